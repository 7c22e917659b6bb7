"""The fits of `eoscale bench learning`, each through `eoscale fit` as a user runs it, and the scoring of their
checkpoints: the forest (`configs/forest.yaml`), the network for a CPU budget (its LR schedule sized by a short
calibration run), and `score_checkpoint`, which scores networks and forests by the same code on a store's split.
Shared by the store, synthetic and real-scene modes (`eoscale.bench.learning`, `eoscale.bench.learning_scene`).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from eoscale.models.metrics import confusion_iou, confusion_matrix, confusion_miou


def score_checkpoint(checkpoint: str | Path, store: str, *, split: str = "val", batch_size: int = 16) -> dict:
    """A checkpoint's confusion on every valid pixel of `split` (tiles as training reads them): mIoU over the classes
    in the labels (`miou`, `eoscale.models.metrics`' convention), and per class the IoU, the producer's accuracy and
    the share of the pixels.
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
            confusion += confusion_matrix(batch["label"].reshape(-1).numpy(), predicted, n)
    value = confusion_miou(confusion)
    per_class = [None if np.isnan(v) else float(v) for v in confusion_iou(confusion)]
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
    return {"model": f"random forest ({config})", "fit_args": extra, "wall_seconds": seconds,
            **score_checkpoint(_checkpoint(work / "forest"), store)}


def _checkpoint(root: Path) -> Path:
    """The checkpoint `predict` takes from the run under `root`: its best by the monitored metric, else its last."""
    from eoscale.models.checkpoint import run_checkpoint

    return run_checkpoint(root)[0]


def _fit_argv(store: str, root: Path, *, config: str, extra: list[str], batch: int, workers: int,
              steps: int, command: str = "fit") -> list[str]:
    return [sys.executable, "-m", "eoscale", command, "--config", config,
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
                 steps: int = 40, command: str = "fit") -> float:
    """Seconds per training step of the run below, from a short run of the same fit (no validation)."""
    out = work / f"calibration-{command}.json" if command != "fit" else work / "calibration.json"
    argv = _fit_argv(store, work / f"calibration-{command}" if command != "fit" else work / "calibration",
                     config=config, extra=extra, batch=batch, workers=workers, steps=steps, command=command)
    argv += ["--trainer.limit_val_batches", "0", "--trainer.callbacks+=eoscale.bench.train.StepTimer"]
    _run_fit(argv, {"EOSCALE_BENCH_OUT": str(out)})
    timed = json.loads(out.read_text())
    return timed["seconds"] / max(timed["steps_timed"], 1)


def fit_network(store: str, work: Path, *, config: str, extra: list[str], minutes: float, batch: int, workers: int,
                calibration_steps: int = 40, validate_every: int = 100) -> dict:
    """Train for `minutes`. The LR schedule (warm-up, cosine to 0) must end when the budget does, so the step
    count is first set from a short calibration run's step time (`calibration_steps`), less 10 % for validation
    and start-up, in whole `validate_every` steps; then, after every validation, the fit re-sizes it from its own
    step time so far (`eoscale.train.callbacks.budget.StepBudget`: a calibration on a loaded machine once sized a
    7.5-minute fit to a fraction of its budget), and `max_time` stops the run at the budget. The best checkpoint
    (by val mIoU, the one `predict` takes) is then scored as the forest is."""
    seconds_per_step = step_seconds(store, work, config=config, extra=extra, batch=batch, workers=workers,
                                    steps=calibration_steps)
    every = validate_every
    steps = max(every, int(0.9 * minutes * 60 / seconds_per_step) // every * every)  # validated at the last step too
    argv = _fit_argv(store, work / "fit", config=config, extra=extra, batch=batch, workers=workers, steps=steps)
    argv += ["--trainer.max_time", time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60)),
             "--trainer.val_check_interval", str(every), "--trainer.log_every_n_steps", str(min(10, every)),
             "--trainer.callbacks+=eoscale.train.callbacks.budget.StepBudget"]
    started = time.perf_counter()
    output = _run_fit(argv)
    wall = time.perf_counter() - started
    rows = [row for path in (work / "fit").rglob("metrics.csv") for row in csv.DictReader(path.open())]
    history = _series(rows, "val_miou")
    warnings = [line.strip() for line in output.splitlines() if "producer's accuracy 0" in line]
    stopped = [line.strip() for line in output.splitlines() if line.startswith("early stopping at step")]
    resized = [line.strip() for line in output.splitlines() if line.startswith("step budget:")]
    checkpoint = _checkpoint(work / "fit")
    scored = score_checkpoint(checkpoint, store, batch_size=batch)
    return {"model": f"network ({config})", "fit_args": extra, "minutes": minutes,
            "seconds_per_step_calibrated": seconds_per_step, "calibration_steps": calibration_steps,
            "max_steps_calibrated": steps, "max_steps": _final_steps(resized, steps), "budget_resizes": resized,
            "last_logged_step": max((int(float(r["step"])) for r in rows if r.get("step")), default=0),
            "validate_every": every, "wall_seconds": wall, "val_miou_history": history,
            "checkpoint": checkpoint.name, "early_stopping": stopped[0] if stopped else None,
            "fit_warnings": warnings, **scored, **missed_classes(scored["val_classes"], warnings)}


def _final_steps(resized: list[str], calibrated: int) -> int:
    """The fit's last `max_steps`: the calibrated one, or the last re-sizing's (`step budget: … -> N`)."""
    return int(resized[-1].rsplit("->", 1)[1]) if resized else calibrated


def pretrain_encoder(store: str, work: Path, *, config: str, extra: list[str], minutes: float, batch: int,
                     workers: int, calibration_steps: int = 40, validate_every: int = 100) -> dict:
    """`eoscale pretrain` (e.g. MAE, `configs/mae_pretrain.yaml`) on `store`'s images for `minutes`, its schedule
    sized as `fit_network` sizes a fit's (a calibration run's step time, less 10 %); returns its figures and the
    encoder it exports (`backbone`: `work/pretrain/checkpoints/backbone.safetensors`), which a fit takes as
    `--model.init_args.weights`."""
    # the config's checkpoint folder is relative to where it runs: every run of the bench says its own
    calibration = ["--checkpoint.dirpath", str(work / "calibration-pretrain" / "checkpoints")]
    seconds_per_step = step_seconds(store, work, config=config, extra=extra + calibration, batch=batch,
                                    workers=workers, steps=calibration_steps, command="pretrain")
    steps = max(validate_every, int(0.9 * minutes * 60 / seconds_per_step) // validate_every * validate_every)
    root = work / "pretrain"
    argv = _fit_argv(store, root, config=config, extra=extra, batch=batch, workers=workers, steps=steps,
                     command="pretrain")
    argv += ["--checkpoint.dirpath", str(root / "checkpoints"),
             "--trainer.max_time", time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60)),
             "--trainer.val_check_interval", str(validate_every), "--trainer.log_every_n_steps", "10"]
    started = time.perf_counter()
    _run_fit(argv)
    wall = time.perf_counter() - started
    rows = [row for path in root.rglob("metrics.csv") for row in csv.DictReader(path.open())]
    backbone = root / "checkpoints" / "backbone.safetensors"
    if not backbone.is_file():
        raise RuntimeError(f"eoscale pretrain wrote no encoder at {backbone}")
    return {"model": f"pretraining ({config})", "fit_args": extra, "minutes": minutes,
            "seconds_per_step_calibrated": seconds_per_step, "max_steps": steps, "wall_seconds": wall,
            "val_loss_history": _series(rows, "val_loss"), "backbone": str(backbone)}


def missed_classes(classes: dict, warnings: list[str]) -> dict:
    """The classes of at least `MISSED_CLASS_SHARE` of the val pixels that the scored model never maps right
    (producer's accuracy 0), and those of them no warning of the fit names: the issue's "no such class without a
    warning in the run"."""
    from eoscale.train.tasks.segmentation import MISSED_CLASS_SHARE

    missed = [name for name, row in classes.items()
              if row["pixel_share"] >= MISSED_CLASS_SHARE and row["producer_accuracy"] == 0]
    return {"missed_classes": missed,
            "missed_classes_unwarned": [name for name in missed if not any(f"{name!r}" in w for w in warnings)]}


def _series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of one metric from the training's metrics.csv (`time,step,metric,value` rows)."""
    return sorted((int(float(r["step"] or 0)), float(r["value"])) for r in rows if r.get("metric") == key)


def network_seed_args(seed: int) -> list[str]:
    """`eoscale fit` arguments that seed a network's fit: `seed_everything` alone leaves the initial weights
    (`model.init_args.init_seed`) and the tiles' order and augmentation (`data.init_args.seed`) at their configs'
    0, so every "seed" trained the same network (issue 49: two seeds on Zion, the same val mIoU to 17 digits)."""
    return ["--seed_everything", str(seed), "--model.init_args.init_seed", str(seed), "--data.init_args.seed", str(seed)]

