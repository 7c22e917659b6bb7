"""`eoscale bench adapters STORE`: what an MAE-pretrained backbone and LoRA adapters buy, in one run.

    eoscale bench adapters runs/quickstart/tiles.zarr
    eoscale bench adapters runs/tiles.zarr --backbone runs/mae/checkpoints/backbone.safetensors --steps 300

1. A short `eoscale pretrain` (configs/mae_pretrain.yaml, `--mae-steps`) makes the backbone, unless
   `--backbone FILE` gives an exported `backbone.safetensors`.
2. `eoscale fit` then trains the same segmentation model (`--model`, patch 8, at the store's tile size) for
   the same number of steps (`--steps`, so that a shared, noisy CPU changes the time taken and not the
   result) four ways: from scratch (configs/full_finetune.yaml without weights), full fine-tuning of the
   backbone (configs/full_finetune.yaml), LoRA on the frozen backbone (configs/lora_finetune.yaml) and a
   linear probe (the head on the frozen backbone) - each with all training labels and with
   `--fraction` of them (`TileDataModule(train_fraction=…)`), where a pretrained backbone should pay.
3. Figures: validation mIoU at the end of each fit (from the run's `metrics.csv`); LoRA's trainable
   parameters against the backbone's (goal ≤ 1%); the median time of a training step (forward, backward,
   optimizer) and the peak memory of LoRA against full fine-tuning, both measured inside the all-label
   fits (the same model, batch and data): peak resident memory of the fit's process
   (`getrusage` maxrss, one process per fit) and the bytes of parameters + gradients + optimizer state,
   or `torch.cuda.max_memory_allocated` on a GPU.

ViT-S/8 is too slow on 2 CPU cores for 9 fits in 25 minutes, so the default `--model` is timm's ViT-Ti
(`vit_tiny_patch16_224`, here with 8 px patches; its step times are in benchmarks/adapters.json). Each fit runs
with one thread (`--threads`): on a shared, oversubscribed machine two OpenMP threads made a step several times
slower. LoRA's rank is 4 by default: the record's `lora_fraction_by_model` gives r=4 and r=8
(configs/lora_finetune.yaml) on qkv/proj as a fraction of ViT-Ti/8's and ViT-S/8's backbones.
Every fit runs as its own `python -m eoscale …` process with a `FitProbe` callback added on the command line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from eoscale.bench.train import training_state_bytes
from eoscale.errors import InputError, InputNotFoundError

ROOT = Path(__file__).resolve().parents[2]
WARMUP_STEPS = 3  # steps left out of the step time (first-call allocations, thread pools)
LORA_GOAL = 0.01  # adapter parameters ÷ backbone parameters, at most
# method -> (config file, fine-tuning mode, starts from the pretrained backbone)
METHODS: dict[str, tuple[str, str, bool]] = {
    "scratch": ("configs/full_finetune.yaml", "full", False),
    "full": ("configs/full_finetune.yaml", "full", True),
    "lora": ("configs/lora_finetune.yaml", "lora", True),
    "linear": ("configs/full_finetune.yaml", "linear", True),
}
LABELS = {
    "scratch": "from scratch",
    "full": "full fine-tuning",
    "lora": "LoRA",
    "linear": "linear probe",
}


class FitProbe(Callback):
    """Inside one fit: the time of every training step, the parameter counts by part, the bytes of
    parameters, gradients and optimizer state at the last step, and the process's peak memory; rank 0
    writes them to `$EOSCALE_BENCH_OUT` at the end of training."""

    def __init__(self) -> None:
        self.step_seconds: list[float] = []
        self.state_bytes = 0
        self._started: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        _synchronize()
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        _synchronize()  # the step's kernels are done: its time is the step's, not the next one's
        self.step_seconds.append(time.perf_counter() - self._started)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # gradients exist here, optimizer state from the second step on: measure at the last step
        if trainer.global_step + 1 == trainer.max_steps:
            self.state_bytes = training_state_bytes(pl_module, optimizer)

    def on_train_end(self, trainer, pl_module) -> None:
        out = os.environ.get("EOSCALE_BENCH_OUT")
        if not out or trainer.global_rank != 0:
            return
        timed = self.step_seconds[WARMUP_STEPS:] or self.step_seconds
        counts = {"backbone": 0, "adapter": 0, "head": 0, "trainable": 0}
        for name, p in pl_module.model.named_parameters():
            part = "adapter" if "lora_" in name else "backbone" if name.startswith("backbone.") else "head"
            counts[part] += p.numel()
            counts["trainable"] += p.numel() if p.requires_grad else 0
        figures = {
            "steps": trainer.global_step,
            "step_seconds_median": statistics.median(timed) if timed else None,
            "steps_timed": len(timed),
            "parameters": counts,
            "state_bytes": self.state_bytes,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB on Linux
            "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        }
        Path(out).write_text(json.dumps(figures))


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# -- the runs ------------------------------------------------------------------------------------------------
def _run(argv: list[str], what: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "eoscale", *argv], env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(argv)}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def _environment(threads: int | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("MLFLOW_TRACKING_URI", None)  # each fit's own SQLite store, in its folder
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def pretrain(store: str, work: Path, *, model: str, steps: int, batch: int, env: dict[str, str]) -> dict:
    """A short `eoscale pretrain` on the store's training images; returns its export and figures."""
    folder = work / "mae"
    argv = ["pretrain", "--config", "configs/mae_pretrain.yaml", "--data.init_args.store", store,
            "--data.init_args.batch_size", str(batch), "--data.init_args.num_workers", "0",
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
            "--trainer.num_sanity_val_steps", "0", "--trainer.log_every_n_steps", "10",
            "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(folder), "--checkpoint.dirpath", str(folder / "checkpoints"),
            "--model.init_args.backbone", model, "--model.init_args.backbone_kwargs", "{patch_size: 8}",
            # a short schedule: a higher peak than the 2,000-step config's 1.5e-4, reached sooner
            "--model.init_args.lr", "1e-3", "--model.init_args.warmup_steps", str(max(1, steps // 10))]
    seconds = _run(argv, "eoscale pretrain", env)
    export = folder / "checkpoints" / "backbone.safetensors"
    losses = _series(_metric_rows(folder), "val_loss")
    return {"steps": steps, "batch_size": batch, "seconds": seconds, "backbone": str(export),
            "val_loss": losses[-1][1] if losses else None}


def finetune(store: str, work: Path, *, method: str, fraction: float, model: str, backbone: str | None,
             steps: int, batch: int, decoder_channels: int, lora_rank: int, env: dict[str, str]) -> dict:
    """One `eoscale fit` of `method` on `fraction` of the training tiles; returns its figures."""
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
            "--model.init_args.backbone", model, "--model.init_args.backbone_kwargs", "{patch_size: 8}",
            "--model.init_args.decoder_channels", str(decoder_channels),
            "--model.init_args.finetune", mode, "--model.init_args.drop_path_rate", "0.0",
            "--model.init_args.warmup_steps", str(max(1, steps // 10)),
            "--model.init_args.weights", backbone if pretrained else "null",
            "--trainer.callbacks+=eoscale.bench.adapters.FitProbe"]
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


def _metric_rows(folder: Path) -> list[dict]:
    return [row for path in folder.rglob("metrics.csv") for row in csv.DictReader(path.open())]


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    from eoscale.bench.learning import _series as series

    return series(rows, key)


def bench_adapters(store: str, work: Path, *, model: str = "vit_tiny_patch16_224", backbone: str | None = None,
                   mae_steps: int = 200, mae_batch: int = 16, steps: int = 150, batch: int = 8,
                   fraction: float = 0.1, decoder_channels: int = 32, lora_rank: int = 4,
                   methods: tuple[str, ...] = tuple(METHODS), threads: int | None = 1) -> dict:
    """Run the pretraining (unless `backbone`) and every fit; return the figures (see the module docstring)."""
    from eoscale.data import read_store_attrs

    env = _environment(threads)
    started = time.perf_counter()
    mae = None
    if backbone is None:
        print(f"eoscale pretrain: MAE on {model} (patch 8), {mae_steps} steps of {mae_batch} tiles …", flush=True)
        mae = pretrain(store, work, model=model, steps=mae_steps, batch=mae_batch, env=env)
        backbone = mae["backbone"]
        print(f"  {mae['seconds']:.0f} s, val loss {mae['val_loss']}", flush=True)
    runs: dict[str, dict[str, dict]] = {}
    fractions = list(dict.fromkeys((1.0, fraction)))  # --fraction 1 fits each method once, not twice
    for frac in fractions:
        for method in methods:
            print(f"eoscale fit: {LABELS[method]}, {frac:.0%} of the training labels, {steps} steps …", flush=True)
            result = finetune(store, work, method=method, fraction=frac, model=model, backbone=backbone, steps=steps,
                              batch=batch, decoder_channels=decoder_channels, lora_rank=lora_rank, env=env)
            runs.setdefault(f"{frac:g}", {})[method] = result
            print(f"  {result['seconds']:.0f} s, val mIoU {result['val_miou']:.3f}, "
                  f"step {result['step_seconds_median']:.3f} s", flush=True)
    figures = {"store": store, "model": model, "patch_size": 8, "backbone": backbone if mae is None else "pretrained here",
               "mae": mae, "steps": steps, "batch_size": batch, "decoder_channels": decoder_channels,
               "lora": {"r": lora_rank, "alpha": 2 * lora_rank, "targets": ["qkv", "proj"]},
               "fractions": fractions, "threads": threads, "runs": runs}
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


def show(figures: dict) -> None:
    """Print the figures as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a log file: wide enough that no column is cut
        console = Console(width=130)
    fractions = [f"{f:g}" for f in figures["fractions"]]
    table = Table(title=f"val mIoU after {figures['steps']} steps of {figures['batch_size']} tiles "
                        f"({figures['model']}, patch {figures['patch_size']})")
    table.add_column("method")
    for f in fractions:
        table.add_column(f"{float(f):.0%} labels", justify="right")
    table.add_column("step (100%)", justify="right")
    table.add_column("peak RSS", justify="right")
    table.add_column("params+grads+optim", justify="right")
    table.add_column("trainable", justify="right")
    for method in METHODS:
        cells = [figures["runs"].get(f, {}).get(method) for f in fractions]
        if not any(cells):
            continue
        first = cells[0] or {}
        table.add_row(
            LABELS[method],
            *(f"{c['val_miou']:.3f}" if c and c.get("val_miou") is not None else "-" for c in cells),
            f"{first['step_seconds_median']:.3f} s" if first.get("step_seconds_median") else "-",
            f"{first['peak_rss_bytes'] / 2**20:.0f} MiB" if first else "-",
            f"{first['state_bytes'] / 2**20:.1f} MiB" if first else "-",
            f"{first['parameters']['trainable']:,}" if first else "-",
        )
    console.print(table)
    p = figures.get("lora_parameters")
    if p:
        mark = "meets" if p["adapter_vs_backbone"] <= LORA_GOAL else "misses"
        console.print(f"LoRA r={figures['lora']['r']} on qkv/proj: {p['adapter']:,} adapter parameters = "
                      f"{p['adapter_vs_backbone']:.2%} of the backbone's {p['backbone']:,} ({mark} the goal ≤ 1%); "
                      f"with the head {p['trainable']:,} trainable = {p['trainable_vs_all']:.1%} of the model; "
                      f"adapter folder {p['adapter_megabytes'] or 0:.2f} MB")
    for c in figures.get("lora_fraction_by_model", []):
        console.print(f"  LoRA r={c['r']} on {c['model']} (patch 8): {c['adapter']:,} ÷ {c['backbone']:,} = "
                      f"{c['adapter_vs_backbone']:.2%} of the backbone ({'meets' if c['meets_goal'] else 'misses'} ≤ 1%)")
    r = figures.get("lora_vs_full")
    if r:
        console.print(f"LoRA ÷ full fine-tuning: step time {r['step_time']:.2f}×, peak RSS {r['peak_rss']:.2f}×, "
                      f"params+grads+optimizer state {r['state_bytes']:.2f}×"
                      + (f", CUDA peak {r['cuda_max_allocated']:.2f}×" if "cuda_max_allocated" in r else ""))
    if figures.get("mae"):
        m = figures["mae"]
        console.print(f"MAE pretraining: {m['steps']} steps of {m['batch_size']} tiles in {m['seconds']:.0f} s; "
                      f"whole bench {figures['wall_seconds'] / 60:.1f} min")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="a labelled tile store (e.g. runs/quickstart/tiles.zarr)")
    parser.add_argument("--backbone", metavar="FILE",
                        help="an exported backbone.safetensors (default: pretrain one here with 'eoscale pretrain')")
    parser.add_argument("--model", default="vit_tiny_patch16_224",
                        help="timm ViT, built with 8 px patches (default: %(default)s; ViT-S/8 is "
                             "vit_small_patch16_224, about 3× slower per step on CPU)")
    parser.add_argument("--mae-steps", type=int, default=200, help="MAE pretraining steps (default: %(default)s)")
    parser.add_argument("--mae-batch-size", type=int, default=16, help="(default: %(default)s)")
    parser.add_argument("--steps", type=int, default=150, help="training steps of every fit (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="(default: %(default)s)")
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="the smaller share of training labels (default: %(default)s)")
    parser.add_argument("--decoder-channels", type=int, default=32, help="FPN decoder width (default: %(default)s)")
    parser.add_argument("--lora-rank", type=int, default=4, help="LoRA rank r; alpha is 2r (default: %(default)s)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), metavar="METHOD",
                        help=f"which fits to run (default: all of {', '.join(METHODS)})")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of each fit; 0 for torch's default (default: %(default)s: on the "
                             "shared 2-core machine a ViT-Ti/8 step took 2.1 s with one thread, 17.7 s with two)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs

    read_store_attrs(args.store)  # a clear error before any subprocess starts
    if args.backbone and not Path(args.backbone).is_file():
        raise InputNotFoundError(f"no backbone file at {args.backbone!r}: give a backbone.safetensors from 'eoscale pretrain'")
    if not 0 < args.fraction < 1:
        raise InputError(f"--fraction {args.fraction!r}: give a share of the labels between 0 and 1 (e.g. 0.1)")
    if min(args.steps, args.mae_steps, args.batch_size, args.mae_batch_size) < 1:
        raise InputError("--steps, --mae-steps and the batch sizes must be at least 1")
    store = str(Path(args.store).resolve())
    backbone = str(Path(args.backbone).resolve()) if args.backbone else None
    if args.model != "vit_small_patch16_224":
        print(f"model: {args.model} with 8 px patches (ViT-S/8 is about 3× slower per step on these CPUs)")
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-adapters-") as tmp:
        figures = bench_adapters(store, Path(tmp), model=args.model, backbone=backbone, mae_steps=args.mae_steps,
                                 mae_batch=args.mae_batch_size, steps=args.steps, batch=args.batch_size,
                                 fraction=args.fraction, decoder_channels=args.decoder_channels,
                                 lora_rank=args.lora_rank, methods=tuple(args.methods), threads=args.threads)
    show(figures)
    if args.record:
        print(f"recorded in {record('adapters', figures, directory=args.record)}")
    return 0
