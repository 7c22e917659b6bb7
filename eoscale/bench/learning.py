"""`eoscale bench learning STORE`: does the network beat a per-pixel random forest on this store?

On any labelled tile store (any bands, class table and split), the two models an analyst compares, each through
`eoscale fit`: the forest (`configs/forest.yaml`, `eoscale.train.tasks.forest`) and the network (the default
recipe, `configs/resnet18_seg.yaml`, or `--config`, with `--fit-args` for a variant) for a fixed CPU budget
(`--minutes`). Both checkpoints (the network's best by val mIoU, the one `predict` takes) are scored by the same
code on every valid pixel of the store's val split: mIoU, and per class the IoU, the producer's accuracy and the
share of the pixels. Any warning of the fit about a class never predicted is kept in the record.

    eoscale bench learning runs/tiles.zarr --minutes 5 --label default --record benchmarks
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

import numpy as np

from eoscale.classes import IGNORE_INDEX


def miou(confusion: np.ndarray) -> tuple[float, list[float]]:
    """Mean IoU over the classes that occur in the labels (the same classes for every model scored on a split: a
    class absent from it but predicted by one model would count against that model only), and the IoU of each
    class that occurs in the labels or the predictions."""
    tp = np.diag(confusion).astype(np.float64)
    union = confusion.sum(0) + confusion.sum(1) - tp
    iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
    present = confusion.sum(1) > 0
    return float(iou[present].mean()), [None if np.isnan(v) else float(v) for v in iou]


def score_checkpoint(checkpoint: str | Path, store: str, *, split: str = "val", batch_size: int = 16) -> dict:
    """A checkpoint's confusion on every valid pixel of `split` (tiles as training reads them): mIoU over the classes
    in the labels (`miou`), and per class the IoU, the producer's accuracy and the share of the pixels.
    Networks and forests alike (`eoscale.infer.model.load_model`), so both are scored by the same code."""
    import torch

    from eoscale.data.datamodule import TileDataModule
    from eoscale.infer.model import load_model

    model = load_model(checkpoint)
    n = len(model.contract.classes)
    data = TileDataModule(store, batch_size=batch_size, num_workers=0, bands=list(model.contract.bands), labels=True,
                          augment=False, predict_split=split)
    data.setup("predict")
    confusion = np.zeros((n, n), dtype=np.int64)
    with torch.inference_mode(), data.predict_dataloader() as loader:
        for batch in loader:
            batch = data.normalise(batch)
            predicted = model.network(batch["image"]).argmax(1).reshape(-1).numpy()
            truth = batch["label"].reshape(-1).numpy()
            keep = truth != IGNORE_INDEX
            confusion += np.bincount(truth[keep] * n + predicted[keep], minlength=n * n).reshape(n, n)
    value, per_class = miou(confusion)
    support = confusion.sum(1)
    names = [c["name"] for c in model.contract.classes]
    classes = {name: {"iou": per_class[i], "pixel_share": float(support[i] / max(support.sum(), 1)),
                      "producer_accuracy": float(confusion[i, i] / support[i]) if support[i] else None}
               for i, name in enumerate(names)}
    return {"val_miou": value, "val_accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
            "val_classes": classes, "val_pixels": int(confusion.sum())}


def fit_forest(store: str, work: Path, *, config: str, extra: list[str]) -> dict:
    """`eoscale fit --config configs/forest.yaml` on the store, then its checkpoint scored on the val split."""
    argv = [sys.executable, "-m", "eoscale", "fit", "--config", config, "--data.init_args.store", store,
            "--trainer.default_root_dir", str(work / "forest"), *extra]
    started = time.perf_counter()
    _run_fit(argv)
    seconds = time.perf_counter() - started
    checkpoint = _checkpoint(work / "forest", best=False)
    return {"model": f"random forest ({config})", "fit_args": extra, "wall_seconds": seconds,
            **score_checkpoint(checkpoint, store)}


def _checkpoint(root: Path, *, best: bool) -> Path:
    """The run's best-val_miou checkpoint (`best`), else its last one."""
    found = sorted(root.rglob("*.ckpt"))
    chosen = [p for p in found if not p.name.startswith("last")] if best else [p for p in found if p.name == "last.ckpt"]
    if not chosen:
        chosen = found
    if not chosen:
        raise RuntimeError(f"the fit wrote no checkpoint under {root}")
    return max(chosen, key=lambda p: p.stat().st_mtime)


def _fit_argv(store: str, root: Path, *, config: str, extra: list[str], batch: int, workers: int,
              steps: int) -> list[str]:
    return [sys.executable, "-m", "eoscale", "fit", "--config", config,
            "--data.init_args.store", store, "--data.init_args.batch_size", str(batch),
            "--data.init_args.num_workers", str(workers), "--trainer.max_steps", str(steps),
            "--model.init_args.warmup_steps", str(min(50, steps // 4)), "--trainer.default_root_dir", str(root), *extra]


def _run_fit(argv: list[str], env: dict | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"eoscale fit failed:\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def step_seconds(store: str, work: Path, *, config: str, extra: list[str], batch: int, workers: int,
                 steps: int = 40) -> float:
    """Seconds per training step of the run below, from a short run of the same fit (no validation)."""
    out = work / "calibration.json"
    argv = _fit_argv(store, work / "calibration", config=config, extra=extra, batch=batch, workers=workers,
                     steps=steps)
    argv += ["--trainer.limit_val_batches", "0", "--trainer.callbacks+=eoscale.bench.train.StepTimer"]
    _run_fit(argv, {"EOSCALE_BENCH_OUT": str(out)})
    timed = json.loads(out.read_text())
    return timed["seconds"] / max(timed["steps_timed"], 1)


def fit_network(store: str, work: Path, *, config: str, extra: list[str], minutes: float, batch: int, workers: int,
                calibration_steps: int = 40, validate_every: int = 100) -> dict:
    """Train for `minutes`. The LR schedule (warm-up, cosine to 0) must end when the budget does, so the step
    count is set from a short calibration run's step time (`calibration_steps`), less 10 % for validation and
    start-up, in whole `validate_every` steps; `max_time` still stops the run at the budget if the machine
    slows down. The best checkpoint (by val mIoU, the one `predict` takes) is then scored as the forest is."""
    seconds_per_step = step_seconds(store, work, config=config, extra=extra, batch=batch, workers=workers,
                                    steps=calibration_steps)
    every = validate_every
    steps = max(every, int(0.9 * minutes * 60 / seconds_per_step) // every * every)  # validated at the last step too
    argv = _fit_argv(store, work / "fit", config=config, extra=extra, batch=batch, workers=workers, steps=steps)
    argv += ["--trainer.max_time", time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60)),
             "--trainer.val_check_interval", str(every), "--trainer.log_every_n_steps", str(min(10, every))]
    started = time.perf_counter()
    output = _run_fit(argv)
    wall = time.perf_counter() - started
    rows = [row for path in (work / "fit").rglob("metrics.csv") for row in csv.DictReader(path.open())]
    history = _series(rows, "val_miou")
    warnings = [line.strip() for line in output.splitlines() if "producer's accuracy 0" in line]
    return {"model": f"network ({config})", "fit_args": extra, "minutes": minutes,
            "seconds_per_step_calibrated": seconds_per_step, "calibration_steps": calibration_steps,
            "max_steps": steps, "validate_every": every, "wall_seconds": wall, "val_miou_history": history,
            "fit_warnings": warnings, **score_checkpoint(_checkpoint(work / "fit", best=True), store, batch_size=batch)}


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of one metric from the training's metrics.csv (`time,step,metric,value` rows)."""
    return sorted((int(float(r["step"] or 0)), float(r["value"])) for r in rows if r.get("metric") == key)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="a labelled tile store (e.g. runs/quickstart/tiles.zarr): any "
                        "bands, class table and split")
    parser.add_argument("--minutes", type=float, default=10.0, help="CPU training budget of the network (default: 10)")
    parser.add_argument("--config", default="configs/resnet18_seg.yaml",
                        help="the network's fit config (default: configs/resnet18_seg.yaml, the default recipe)")
    parser.add_argument("--fit-args", default="", metavar="ARGS",
                        help="more 'eoscale fit' arguments for the network, one string (e.g. "
                        "\"--model.init_args.class_weights inverse\"), to measure a variant")
    parser.add_argument("--forest-config", default="configs/forest.yaml",
                        help="the forest's fit config (default: configs/forest.yaml)")
    parser.add_argument("--forest-args", default="", metavar="ARGS", help="more 'eoscale fit' arguments for the forest")
    parser.add_argument("--label", default=None, help="a name for this record (e.g. the variant measured)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers (default: 1)")
    parser.add_argument("--calibration-steps", type=int, default=40,
                        help="steps of the fit that times a step (the first 5 are warm-up), to size the budgeted fit "
                        "(default: 40)")
    parser.add_argument("--validate-every", type=int, default=100,
                        help="validate every N steps; the fit runs a whole number of them (default: 100)")


def run(args: argparse.Namespace) -> int:
    import shlex

    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs

    read_store_attrs(args.store)
    from eoscale.bench.train import WARMUP_STEPS

    if args.calibration_steps <= WARMUP_STEPS or args.validate_every < 1 or args.minutes <= 0:
        from eoscale.errors import InputError

        raise InputError(f"need --minutes > 0, --calibration-steps > {WARMUP_STEPS} (its first {WARMUP_STEPS} are not "
                         f"timed) and --validate-every >= 1; got {args.minutes:g}, {args.calibration_steps} and "
                         f"{args.validate_every}")
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-learning-") as tmp:
        print(f"random forest: eoscale fit --config {args.forest_config} …")
        forest = fit_forest(args.store, Path(tmp), config=args.forest_config, extra=shlex.split(args.forest_args))
        print(f"  val mIoU {forest['val_miou']:.3f}, accuracy {forest['val_accuracy']:.3f}")
        print(f"network: eoscale fit --config {args.config} {args.fit_args} for {args.minutes:g} min …")
        network = fit_network(args.store, Path(tmp), config=args.config, extra=shlex.split(args.fit_args),
                              minutes=args.minutes, batch=args.batch_size, workers=args.workers,
                              calibration_steps=args.calibration_steps, validate_every=args.validate_every)
    print(f"  val mIoU {network['val_miou']:.3f} (best checkpoint), accuracy {network['val_accuracy']:.3f}")
    print(f"  {'class':<24} {'share':>7} {'forest IoU':>10} {'network IoU':>11} {'network PA':>10}")
    for name, row in network["val_classes"].items():
        def text(v):
            return "   -" if v is None else f"{v:.3f}"
        print(f"  {name:<24} {row['pixel_share']:>7.2%} {text(forest['val_classes'][name]['iou']):>10} "
              f"{text(row['iou']):>11} {text(row['producer_accuracy']):>10}")
    for line in network["fit_warnings"]:
        print(f"  fit warned: {line}")
    gain = network["val_miou"] - forest["val_miou"]
    print(f"network - forest: {gain:+.3f} val mIoU")
    figures = {"label": args.label, "store": os.path.abspath(args.store), "forest": forest, "network": network,
               "miou_gain_over_forest": gain}
    if args.record:
        print(f"recorded in {record('learning', figures, directory=args.record)}")
    return 0
