"""`eoscale bench adapters STORE`: what a pretrained backbone and LoRA adapters buy, in one run.

    eoscale bench adapters runs/quickstart/tiles.zarr
    eoscale bench adapters runs/tiles.zarr --pretrain-store runs/unlabelled.zarr --heldout runs/heldout.zarr \
        --mae-steps 1500 --mae-batch-size 32 --mae-norm-pix-loss false --recipe rawpix
    eoscale bench adapters runs/tiles.zarr --backbone runs/pretrain/mae/checkpoints/backbone.safetensors --steps 300

1. A short `eoscale pretrain` makes the backbone, unless `--backbone FILE` gives an exported
   `backbone.safetensors`: MAE (configs/mae_pretrain.yaml; `--mae-…` set its recipe: steps, batch, masking
   ratio, normalised-pixel loss, decoder depth and width, LR, warm-up) or self-distillation (`--ssl dino`,
   configs/dino_pretrain.yaml), on `--pretrain-store` (e.g. an unlabelled store of many other scenes,
   `eoscale ingest` without `--labels`), else on STORE's own images.
2. `eoscale fit` then trains the same segmentation model (`--model`, patch 8, at the store's tile size) on
   STORE for the same number of steps (`--steps`, so that a shared, noisy CPU changes the time taken and not
   the result) four ways: from scratch (configs/full_finetune.yaml without weights), full fine-tuning of the
   backbone (configs/full_finetune.yaml), LoRA on the frozen backbone (configs/lora_finetune.yaml) and a
   linear probe (the head on the frozen backbone) - each at every share of the training labels in
   `--fractions` (`TileDataModule(train_fraction=…)`; default 100 %, 10 % and 1 %), where a pretrained
   backbone should pay. `--lr` and `--warmup` set every fit's schedule.
3. Figures: validation mIoU at the end of each fit (from the run's `metrics.csv`) and, with `--heldout STORE`
   (labelled scenes that neither pretraining nor fine-tuning saw), the mIoU on all of that store's tiles;
   LoRA's trainable parameters against the backbone's (goal ≤ 1%); the median time of a training step
   (forward, backward, optimizer) and the peak memory of LoRA against full fine-tuning, both measured inside
   the all-label fits (the same model, batch and data): peak resident memory of the fit's process
   (`getrusage` maxrss, one process per fit) and the bytes of parameters + gradients + optimizer state,
   or `torch.cuda.max_memory_allocated` on a GPU. Every run's learning curves (pretraining and each fit) go
   to MLflow (`--mlflow DIR`, experiment 'bench-adapters', runs named RECIPE/METHOD-FRACTION); each bench run
   appends one record, named by `--recipe`, so every tried recipe stays in benchmarks/adapters.json.

ViT-S/8 is too slow on 2 CPU cores for 9 fits in 25 minutes, so the default `--model` is timm's ViT-Ti
(`vit_tiny_patch16_224`, here with 8 px patches; its step times are in benchmarks/adapters.json). Each fit runs
with one thread (`--threads`): on a shared, oversubscribed machine two OpenMP threads made a step several times
slower. LoRA's rank is 4 by default: the record's `lora_fraction_by_model` gives r=4 and r=8
(configs/lora_finetune.yaml) on qkv/proj as a fraction of ViT-Ti/8's and ViT-S/8's backbones.
Every fit runs as its own `python -m eoscale …` process with a `FitProbe` callback (eoscale/bench/fitprobe.py)
added on the command line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from eoscale.bench.adapters_table import LABELS, LORA_GOAL, show
from eoscale.bench.fitprobe import FitProbe  # noqa: F401  (the callback each fit adds, by this name too)
from eoscale.errors import InputError, InputNotFoundError
from eoscale.paths import Paths

ROOT = Path(__file__).resolve().parents[2]
# method -> (config file, fine-tuning mode, starts from the pretrained backbone)
METHODS: dict[str, tuple[str, str, bool]] = {
    "scratch": ("configs/full_finetune.yaml", "full", False),
    "full": ("configs/full_finetune.yaml", "full", True),
    "lora": ("configs/lora_finetune.yaml", "lora", True),
    "linear": ("configs/full_finetune.yaml", "linear", True),
}


# -- the runs ------------------------------------------------------------------------------------------------
def _run(argv: list[str], what: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "eoscale", *argv], env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(argv)}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def _environment(threads: int | None, *, heldout: str | None = None, tracking_uri: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)  # without tracking_uri: each fit's own SQLite store, in its folder
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    if heldout:
        env["EOSCALE_BENCH_HELDOUT"] = heldout
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


# the MAE recipe's knobs (`--mae-…`) and their defaults: configs/mae_pretrain.yaml's, with a short schedule's LR
MAE_DEFAULTS = {"mask_ratio": 0.75, "norm_pix_loss": True, "decoder_depth": 2, "decoder_dim": 128, "lr": 1e-3,
                "warmup_steps": None}


def pretrain(store: str, work: Path, *, model: str, steps: int, batch: int, env: dict[str, str],
             recipe: dict | None = None, run_name: str = "mae", ssl: str = "mae") -> dict:
    """`eoscale pretrain` on `store`'s images: MAE (configs/mae_pretrain.yaml) with `recipe` (MAE_DEFAULTS's
    keys), or self-distillation (`ssl="dino"`, configs/dino_pretrain.yaml) with the recipe's lr and warm-up;
    returns its export and figures."""
    r = {**MAE_DEFAULTS, **(recipe or {})}
    r["warmup_steps"] = r["warmup_steps"] if r["warmup_steps"] is not None else max(1, steps // 10)
    folder = work / "mae"
    if ssl == "dino":
        r = {"lr": r["lr"], "warmup_steps": r["warmup_steps"]}
    argv = ["pretrain", "--config", f"configs/{ssl}_pretrain.yaml", "--data.init_args.store", store,
            "--data.init_args.batch_size", str(batch), "--data.init_args.num_workers", "0",
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(min(steps, 500)),
            "--trainer.num_sanity_val_steps", "0", "--trainer.log_every_n_steps", "10",
            "--trainer.enable_progress_bar", "false", *_tracking(run_name),
            "--trainer.default_root_dir", str(folder), "--checkpoint.dirpath", str(folder / "checkpoints"),
            "--model.init_args.backbone", model, "--model.init_args.backbone_kwargs", "{patch_size: 8}",
            # a short schedule: a higher peak than the 2,000-step config's 1.5e-4, reached sooner
            "--model.init_args.lr", str(r["lr"]), "--model.init_args.warmup_steps", str(r["warmup_steps"])]
    if ssl == "mae":
        argv += ["--model.init_args.mask_ratio", str(r["mask_ratio"]),
                 "--model.init_args.norm_pix_loss", str(bool(r["norm_pix_loss"])).lower(),
                 "--model.init_args.decoder_depth", str(r["decoder_depth"]),
                 "--model.init_args.decoder_dim", str(r["decoder_dim"])]
    seconds = _run(argv, "eoscale pretrain", env)
    export = folder / "checkpoints" / "backbone.safetensors"
    losses = _series(_metric_rows(folder), "val_loss")
    return {"objective": ssl, "store": store, "steps": steps, "batch_size": batch, "recipe": r, "seconds": seconds,
            "backbone": str(export), "val_loss": losses[-1][1] if losses else None}


def finetune(store: str, work: Path, *, method: str, fraction: float, model: str, backbone: str | None,
             steps: int, batch: int, decoder_channels: int, lora_rank: int, env: dict[str, str],
             lr: float | None = None, warmup_steps: int | None = None, run_name: str | None = None) -> dict:
    """One `eoscale fit` of `method` on `fraction` of the training tiles; returns its figures. `lr` (default:
    the method's config file's) and `warmup_steps` (default: a tenth of the steps) are the fine-tuning schedule's."""
    config, mode, pretrained = METHODS[method]
    folder = work / f"{method}-{fraction:g}"
    out = folder / "probe.json"
    folder.mkdir(parents=True, exist_ok=True)
    argv = ["fit", "--config", config, "--data.init_args.store", store,
            "--data.init_args.batch_size", str(batch), "--data.init_args.num_workers", "0",
            "--data.init_args.train_fraction", str(fraction),
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
            "--trainer.num_sanity_val_steps", "0", "--trainer.log_every_n_steps", "10",
            "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(folder),
            *_tracking(run_name or f"{method}-{fraction:g}"),
            "--model.init_args.backbone", model, "--model.init_args.backbone_kwargs", "{patch_size: 8}",
            "--model.init_args.decoder_channels", str(decoder_channels),
            "--model.init_args.finetune", mode, "--model.init_args.drop_path_rate", "0.0",
            "--model.init_args.warmup_steps", str(warmup_steps if warmup_steps is not None else max(1, steps // 10)),
            "--model.init_args.weights", backbone if pretrained else "null",
            "--trainer.callbacks+=eoscale.bench.fitprobe.FitProbe"]
    if lr is not None:
        argv += ["--model.init_args.lr", str(lr)]
    if mode == "lora":
        argv += ["--model.init_args.lora", f"{{r: {lora_rank}, alpha: {2 * lora_rank}, targets: [qkv, proj], name: bench}}"]
    seconds = _run(argv, f"eoscale fit ({method}, {fraction:g} of the labels)", {**env, "EOSCALE_BENCH_OUT": str(out)})
    history = _series(_metric_rows(folder), "val_miou")
    figures = {"method": method, "fraction": fraction, "seconds": seconds, **json.loads(out.read_text()),
               "val_miou": history[-1][1] if history else None}
    adapter = folder / "adapters" / "bench"
    if adapter.is_dir():
        figures["adapter_megabytes"] = sum(f.stat().st_size for f in adapter.iterdir() if f.is_file()) / 1e6
    return figures


def _tracking(run_name: str) -> list[str]:
    """The fit's MLflow experiment and run name (its store: `$MLFLOW_TRACKING_URI`, set by `_environment`)."""
    return ["--trainer.logger.init_args.experiment_name", "bench-adapters",
            "--trainer.logger.init_args.run_name", run_name]


def _metric_rows(folder: Path) -> list[dict]:
    return [row for path in folder.rglob("metrics.csv") for row in csv.DictReader(path.open())]


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    from eoscale.bench.learning import _series as series

    return series(rows, key)


def bench_adapters(store: str, work: Path, *, model: str = "vit_tiny_patch16_224", backbone: str | None = None,
                   pretrain_store: str | None = None, heldout: str | None = None, mae_steps: int = 200,
                   mae_batch: int = 16, mae_recipe: dict | None = None, steps: int = 150, batch: int = 8,
                   fractions: tuple[float, ...] = (1.0, 0.1), decoder_channels: int = 32, lora_rank: int = 4,
                   lr: float | None = None, warmup_steps: int | None = None, recipe: str = "default", ssl: str = "mae",
                   methods: tuple[str, ...] = tuple(METHODS), threads: int | None = 1,
                   tracking_uri: str | None = None) -> dict:
    """Run the pretraining (unless `backbone`) and every fit; return the figures (see the module docstring)."""
    from eoscale.data import read_store_attrs

    env = _environment(threads, heldout=heldout, tracking_uri=tracking_uri)
    started = time.perf_counter()
    mae = None
    pretrain_store = pretrain_store or store
    if backbone is None and any(METHODS[m][2] for m in methods):  # scratch alone needs no backbone
        print(f"eoscale pretrain: {ssl.upper()} on {model} (patch 8) on {pretrain_store}, {mae_steps} steps of {mae_batch} tiles …",
              flush=True)
        mae = pretrain(pretrain_store, work, model=model, steps=mae_steps, batch=mae_batch, env=env, recipe=mae_recipe,
                       run_name=f"{recipe}/{ssl}", ssl=ssl)
        backbone = mae["backbone"]
        print(f"  {mae['seconds']:.0f} s, val loss {mae['val_loss']}", flush=True)
    runs: dict[str, dict[str, dict]] = {}
    for frac in dict.fromkeys(fractions):
        for method in methods:
            print(f"eoscale fit: {LABELS[method]}, {frac:.0%} of the training labels, {steps} steps …", flush=True)
            result = finetune(store, work, method=method, fraction=frac, model=model, backbone=backbone, steps=steps,
                              batch=batch, decoder_channels=decoder_channels, lora_rank=lora_rank, env=env, lr=lr,
                              warmup_steps=warmup_steps, run_name=f"{recipe}/{method}-{frac:g}")
            runs.setdefault(f"{frac:g}", {})[method] = result
            held = result.get("heldout")
            print(f"  {result['seconds']:.0f} s, val mIoU {result['val_miou']:.3f}"
                  + (f", held-out mIoU {held['miou']:.3f}" if held else "")
                  + f", step {result['step_seconds_median']:.3f} s", flush=True)
    figures = {"recipe": recipe, "store": store, "pretrain_store": pretrain_store if mae else None, "heldout": heldout,
               "model": model, "patch_size": 8, "backbone": backbone if mae is None else "pretrained here",
               "mae": mae, "steps": steps, "batch_size": batch, "decoder_channels": decoder_channels,
               "finetune": {"lr": lr, "warmup_steps": warmup_steps if warmup_steps is not None else max(1, steps // 10)},
               "lora": {"r": lora_rank, "alpha": 2 * lora_rank, "targets": ["qkv", "proj"]},
               "fractions": list(dict.fromkeys(fractions)), "threads": threads, "tracking_uri": tracking_uri,
               "runs": runs}
    figures.update(_compare(runs))
    attrs = read_store_attrs(store)
    models = tuple(dict.fromkeys((model, "vit_small_patch16_224")))
    figures["lora_fraction_by_model"] = lora_fractions(
        models, tuple(sorted({lora_rank, 8})), in_chans=len(attrs["bands"]), num_classes=len(attrs["classes"]),
        img_size=int(attrs["tile_size"]))
    figures["wall_seconds"] = time.perf_counter() - started
    return figures


def lora_fractions(models: tuple[str, ...], ranks: tuple[int, ...], *, in_chans: int, num_classes: int,
                   img_size: int) -> list[dict]:
    """Adapter parameters ÷ backbone parameters of LoRA on qkv/proj, counted on freshly built models (no
    training): the bench's model and ViT-S/8, the model of configs/lora_finetune.yaml, at each rank."""
    from eoscale.models import build_model
    from eoscale.models.lora import apply_finetune

    out = []
    for model in models:
        for r in ranks:
            with torch.random.fork_rng(devices=[]):
                net = build_model(model, in_chans=in_chans, num_classes=num_classes, img_size=img_size,
                                  decoder_channels=32, patch_size=8)
            apply_finetune(net, "lora", {"r": r, "alpha": 2 * r, "targets": ["qkv", "proj"]})
            adapter = sum(p.numel() for n, p in net.named_parameters() if "lora_" in n)
            backbone = sum(p.numel() for n, p in net.named_parameters() if n.startswith("backbone.") and "lora_" not in n)
            out.append({"model": model, "patch_size": 8, "r": r, "adapter": adapter, "backbone": backbone,
                        "adapter_vs_backbone": adapter / backbone, "meets_goal": adapter / backbone <= LORA_GOAL})
    return out


def _compare(runs: dict[str, dict[str, dict]]) -> dict:
    """The ratios: LoRA's parameters against the backbone's, and its step time and memory against full's."""
    out: dict = {"goals": {"lora_adapter_vs_backbone_parameters": f"<= {LORA_GOAL:.0%}"}}
    full, lora = runs.get("1", {}).get("full"), runs.get("1", {}).get("lora")
    if lora:
        p = lora["parameters"]
        out["lora_parameters"] = {
            "adapter": p["adapter"], "backbone": p["backbone"], "head": p["head"], "trainable": p["trainable"],
            "adapter_vs_backbone": p["adapter"] / p["backbone"],
            "trainable_vs_all": p["trainable"] / (p["adapter"] + p["backbone"] + p["head"]),
            "adapter_megabytes": lora.get("adapter_megabytes"),
        }
    if full and lora:
        out["lora_vs_full"] = {
            "step_time": lora["step_seconds_median"] / full["step_seconds_median"],
            "peak_rss": lora["peak_rss_bytes"] / full["peak_rss_bytes"],
            "state_bytes": lora["state_bytes"] / full["state_bytes"],
        }
        if full.get("cuda_max_allocated_bytes"):
            out["lora_vs_full"]["cuda_max_allocated"] = lora["cuda_max_allocated_bytes"] / full["cuda_max_allocated_bytes"]
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE",
                        help="the labelled tile store to fine-tune on (e.g. runs/quickstart/tiles.zarr)")
    parser.add_argument("--pretrain-store", action=Paths, metavar="STORE",
                        help="the tile store to pretrain on, labelled or not (`eoscale ingest` without --labels); "
                             "default: STORE's own images")
    parser.add_argument("--heldout", action=Paths, metavar="STORE",
                        help="a labelled tile store of other scenes: every fit is also evaluated on all its tiles")
    parser.add_argument("--backbone", action=Paths, metavar="FILE",
                        help="an exported backbone.safetensors (default: pretrain one here with 'eoscale pretrain')")
    parser.add_argument("--model", default="vit_tiny_patch16_224",
                        help="timm ViT, built with 8 px patches (default: %(default)s; ViT-S/8 is "
                             "vit_small_patch16_224, about 3× slower per step on CPU)")
    parser.add_argument("--recipe", default="default", help="a name for this run's recipe, recorded (default: %(default)s)")
    mae = parser.add_argument_group("pretraining (configs/mae_pretrain.yaml, configs/dino_pretrain.yaml)")
    mae.add_argument("--ssl", choices=("mae", "dino"), default="mae",
                     help="the self-supervised objective: MAE or self-distillation (default: %(default)s); the "
                          "--mae-steps, --mae-batch-size, --mae-lr and --mae-warmup options apply to either")
    mae.add_argument("--mae-steps", type=int, default=200, help="MAE pretraining steps (default: %(default)s)")
    mae.add_argument("--mae-batch-size", type=int, default=16, help="(default: %(default)s)")
    mae.add_argument("--mae-mask-ratio", type=float, default=MAE_DEFAULTS["mask_ratio"], help="(default: %(default)s)")
    mae.add_argument("--mae-norm-pix-loss", type=_boolean, default=MAE_DEFAULTS["norm_pix_loss"], metavar="true|false",
                     help="reconstruct per-patch normalised pixels (default: %(default)s)")
    mae.add_argument("--mae-decoder-depth", type=int, default=MAE_DEFAULTS["decoder_depth"], help="(default: %(default)s)")
    mae.add_argument("--mae-decoder-dim", type=int, default=MAE_DEFAULTS["decoder_dim"], help="(default: %(default)s)")
    mae.add_argument("--mae-lr", type=float, default=MAE_DEFAULTS["lr"], help="peak learning rate (default: %(default)s)")
    mae.add_argument("--mae-warmup", type=int, help="warm-up steps (default: a tenth of --mae-steps)")
    fit = parser.add_argument_group("fine-tuning")
    fit.add_argument("--steps", type=int, default=150, help="training steps of every fit (default: %(default)s)")
    fit.add_argument("--batch-size", type=int, default=8, help="(default: %(default)s)")
    fit.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.1, 0.01], metavar="F",
                     help="shares of the training labels, each fitted by every method (default: 1 0.1 0.01)")
    fit.add_argument("--lr", type=float, help="peak learning rate of every fit (default: the method's config file's)")
    fit.add_argument("--warmup", type=int, help="warm-up steps of every fit (default: a tenth of --steps)")
    fit.add_argument("--decoder-channels", type=int, default=32, help="FPN decoder width (default: %(default)s)")
    fit.add_argument("--lora-rank", type=int, default=4, help="LoRA rank r; alpha is 2r (default: %(default)s)")
    fit.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), metavar="METHOD",
                     help=f"which fits to run (default: all of {', '.join(METHODS)})")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of each fit; 0 for torch's default (default: %(default)s: on the "
                             "shared 2-core machine a ViT-Ti/8 step took 2.1 s with one thread, 17.7 s with two)")
    parser.add_argument("--mlflow", default="runs/bench-adapters", metavar="DIR",
                        help="folder of the MLflow store (mlflow.db) that every fit's learning curves go to, in "
                             "experiment 'bench-adapters' (default: %(default)s)")
    parser.add_argument("--keep", metavar="DIR",
                        help="do the runs in DIR and keep them (the backbone, for --backbone later); default: a "
                             "temporary folder")


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs

    for store in (args.store, args.pretrain_store, args.heldout):
        if store:
            read_store_attrs(store)  # a clear error before any subprocess starts
    if args.backbone and not Path(args.backbone).is_file():
        raise InputNotFoundError(f"no backbone file at {args.backbone!r}: give a backbone.safetensors from 'eoscale pretrain'")
    bad = [f for f in args.fractions if not 0 < f <= 1]
    if bad:
        raise InputError(f"--fractions {bad[0]!r}: give shares of the labels above 0 and at most 1 (e.g. 1 0.1 0.01)")
    if min(args.steps, args.mae_steps, args.batch_size, args.mae_batch_size) < 1:
        raise InputError("--steps, --mae-steps and the batch sizes must be at least 1")
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        raise InputError(f"--keep {args.keep!r} is not empty: give a new or empty folder")
    resolve = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
    mlflow_dir = Path(args.mlflow).resolve()
    mlflow_dir.mkdir(parents=True, exist_ok=True)
    if args.model != "vit_small_patch16_224":
        print(f"model: {args.model} with 8 px patches (ViT-S/8 is about 3× slower per step on these CPUs)")
    mae_recipe = {"mask_ratio": args.mae_mask_ratio, "norm_pix_loss": args.mae_norm_pix_loss,
                  "decoder_depth": args.mae_decoder_depth, "decoder_dim": args.mae_decoder_dim, "lr": args.mae_lr,
                  "warmup_steps": args.mae_warmup}
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-adapters-") as tmp:
        work = Path(args.keep).resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures = bench_adapters(
            resolve(args.store), work, model=args.model, backbone=resolve(args.backbone),
            pretrain_store=resolve(args.pretrain_store), heldout=resolve(args.heldout), mae_steps=args.mae_steps,
            mae_batch=args.mae_batch_size, mae_recipe=mae_recipe, steps=args.steps, batch=args.batch_size,
            fractions=tuple(args.fractions), decoder_channels=args.decoder_channels, lora_rank=args.lora_rank,
            lr=args.lr, warmup_steps=args.warmup, recipe=args.recipe, ssl=args.ssl, methods=tuple(args.methods),
            threads=args.threads, tracking_uri=f"sqlite:///{mlflow_dir / 'mlflow.db'}")
    show(figures)
    print(f"learning curves: MLflow experiment 'bench-adapters' in {mlflow_dir / 'mlflow.db'} "
          f"(eoscale track … or mlflow ui --backend-store-uri sqlite:///{mlflow_dir / 'mlflow.db'})")
    if args.record:
        print(f"recorded in {record('adapters', figures, directory=args.record)}")
    return 0
