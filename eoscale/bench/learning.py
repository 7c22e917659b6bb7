"""`eoscale bench learning`: does ResNet-18 segmentation learn on the store, and does spatial context pay?

Trains `configs/resnet18_seg.yaml` with `eoscale fit` for a fixed CPU budget (`--minutes`), and compares its
validation mIoU with a per-pixel baseline trained on the same training tiles: a random forest on pixel
spectra (no context at all). Both are scored on every valid pixel of the validation split.
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
    """Mean IoU over classes that occur in the labels or the predictions."""
    tp = np.diag(confusion).astype(np.float64)
    union = confusion.sum(0) + confusion.sum(1) - tp
    iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
    return float(np.nanmean(iou)), [None if np.isnan(v) else float(v) for v in iou]


def pixel_baseline(store: str, *, samples: int, seed: int) -> dict:
    from sklearn.ensemble import RandomForestClassifier

    from eoscale.data import open_store

    ds = open_store(store)
    n_classes = len(ds.attrs["classes"])
    rng = np.random.default_rng(seed)

    def pixels(split: str) -> tuple[np.ndarray, np.ndarray]:
        start, stop = ds.attrs["splits"][split]
        images = ds["images"][start:stop].isel(time=0).values  # (tile, band, y, x): the first (a single-date store's) date
        labels = ds["labels"][start:stop].values
        x = images.transpose(0, 2, 3, 1).reshape(-1, images.shape[1]).astype(np.float32)
        y = labels.reshape(-1)
        keep = y != IGNORE_INDEX
        return x[keep], y[keep]

    x_train, y_train = pixels("train")
    pick = rng.choice(len(y_train), size=min(samples, len(y_train)), replace=False)
    started = time.perf_counter()
    forest = RandomForestClassifier(n_estimators=60, max_depth=20, n_jobs=-1, random_state=seed)
    forest.fit(x_train[pick], y_train[pick])
    fit_seconds = time.perf_counter() - started
    x_val, y_val = pixels("val")
    predicted = forest.predict(x_val)
    confusion = np.bincount(y_val.astype(np.int64) * n_classes + predicted, minlength=n_classes**2).reshape(n_classes, n_classes)
    value, per_class = miou(confusion)
    return {"model": "random forest on pixel spectra", "train_pixels": int(len(pick)), "fit_seconds": fit_seconds,
            "val_miou": value, "val_iou_per_class": per_class,
            "val_accuracy": float(np.trace(confusion) / confusion.sum())}


def _fit_argv(store: str, root: Path, *, batch: int, workers: int, steps: int) -> list[str]:
    return [sys.executable, "-m", "eoscale", "fit", "--config", "configs/resnet18_seg.yaml",
            "--data.init_args.store", store, "--data.init_args.batch_size", str(batch),
            "--data.init_args.num_workers", str(workers), "--trainer.max_steps", str(steps),
            "--model.init_args.warmup_steps", "50", "--trainer.default_root_dir", str(root)]


def _run_fit(argv: list[str], env: dict | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"eoscale fit failed:\n{done.stderr[-3000:]}")


def step_seconds(store: str, work: Path, *, batch: int, workers: int, steps: int = 40) -> float:
    """Seconds per training step of the run below, from a short run of the same fit (no validation)."""
    out = work / "calibration.json"
    argv = _fit_argv(store, work / "calibration", batch=batch, workers=workers, steps=steps)
    argv += ["--trainer.limit_val_batches", "0", "--trainer.callbacks+=eoscale.bench.train.StepTimer"]
    _run_fit(argv, {"EOSCALE_BENCH_OUT": str(out)})
    timed = json.loads(out.read_text())
    return timed["seconds"] / max(timed["steps_timed"], 1)


def fit_resnet(store: str, work: Path, *, minutes: float, batch: int, workers: int, calibration_steps: int = 40,
               validate_every: int = 100) -> dict:
    """Train for `minutes`. The LR schedule (warm-up, cosine to 0) must end when the budget does, so the step
    count is set from a short calibration run's step time (`calibration_steps`), less 10 % for validation and
    start-up, in whole `validate_every` steps; `max_time` still stops the run at the budget if the machine
    slows down."""
    seconds_per_step = step_seconds(store, work, batch=batch, workers=workers, steps=calibration_steps)
    every = validate_every
    steps = max(every, int(0.9 * minutes * 60 / seconds_per_step) // every * every)  # validated at the last step too
    argv = _fit_argv(store, work / "fit", batch=batch, workers=workers, steps=steps)
    argv += ["--trainer.max_time", time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60)),
             "--trainer.val_check_interval", str(every), "--trainer.log_every_n_steps", str(min(10, every))]
    started = time.perf_counter()
    _run_fit(argv)
    rows = [row for path in (work / "fit").rglob("metrics.csv") for row in csv.DictReader(path.open())]
    history = _series(rows, "val_miou")
    return {"model": "resnet18 + FPN (configs/resnet18_seg.yaml)", "minutes": minutes,
            "seconds_per_step_calibrated": seconds_per_step, "calibration_steps": calibration_steps,
            "max_steps": steps, "validate_every": every,
            "wall_seconds": time.perf_counter() - started, "val_miou_history": history,
            "val_miou": history[-1][1] if history else None, "best_val_miou": max((v for _, v in history), default=None)}


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of one metric from the training's metrics.csv (`time,step,metric,value` rows)."""
    return sorted((int(float(r["step"] or 0)), float(r["value"])) for r in rows if r.get("metric") == key)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help="a labelled tile store (e.g. runs/quickstart/tiles.zarr)")
    parser.add_argument("--minutes", type=float, default=10.0, help="CPU training budget (default: 10)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers (default: 1)")
    parser.add_argument("--pixels", type=int, default=200_000, help="training pixels of the baseline (default: 200,000)")
    parser.add_argument("--calibration-steps", type=int, default=40,
                        help="steps of the fit that times a step (the first 5 are warm-up), to size the budgeted fit "
                        "(default: 40)")
    parser.add_argument("--validate-every", type=int, default=100,
                        help="validate every N steps; the fit runs a whole number of them (default: 100)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs

    read_store_attrs(args.store)
    from eoscale.bench.train import WARMUP_STEPS

    if args.calibration_steps <= WARMUP_STEPS or args.validate_every < 1 or args.minutes <= 0:
        from eoscale.errors import InputError

        raise InputError(f"need --minutes > 0, --calibration-steps > {WARMUP_STEPS} (its first {WARMUP_STEPS} are not "
                         f"timed) and --validate-every >= 1; got {args.minutes:g}, {args.calibration_steps} and "
                         f"{args.validate_every}")
    print(f"per-pixel baseline (random forest on {args.pixels} training pixels) …")
    baseline = pixel_baseline(args.store, samples=args.pixels, seed=0)
    print(f"  val mIoU {baseline['val_miou']:.3f}, accuracy {baseline['val_accuracy']:.3f}")
    print(f"eoscale fit resnet18 for {args.minutes:g} min …")
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-learning-") as tmp:
        network = fit_resnet(args.store, Path(tmp), minutes=args.minutes, batch=args.batch_size, workers=args.workers,
                             calibration_steps=args.calibration_steps, validate_every=args.validate_every)
    print(f"  val mIoU {network['val_miou']}, best {network['best_val_miou']}")
    figures = {"store": os.path.abspath(args.store), "baseline": baseline, "resnet18": network,
               "miou_gain_over_pixel_baseline": (network["best_val_miou"] or 0) - baseline["val_miou"]}
    if args.record:
        print(f"recorded in {record('learning', figures, directory=args.record)}")
    return 0
