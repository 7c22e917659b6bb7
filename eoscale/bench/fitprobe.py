"""`FitProbe`: the figures `eoscale bench adapters` measures inside one `eoscale fit` (a Lightning callback).

Added on the fit's command line (`--trainer.callbacks+=eoscale.bench.fitprobe.FitProbe`), it times every
training step, counts the parameters by part (backbone, adapter, head), measures the bytes of parameters,
gradients and optimizer state at the last step and the process's peak memory, and, when
`$EOSCALE_BENCH_HELDOUT` names a labelled tile store of other scenes, evaluates the trained model on all of
that store's tiles (mIoU over its classes, normalised with the fine-tuning store's statistics, as the model
was trained). Rank 0 writes the figures as JSON to `$EOSCALE_BENCH_OUT` at the end of training.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from eoscale.bench.train import training_state_bytes

WARMUP_STEPS = 3  # steps left out of the step time (first-call allocations, thread pools)


class FitProbe(Callback):
    """See the module docstring."""

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
        heldout = os.environ.get("EOSCALE_BENCH_HELDOUT")
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
        if heldout:
            figures["heldout"] = heldout_miou(pl_module, trainer.datamodule, heldout)
        Path(out).write_text(json.dumps(figures))


def heldout_miou(pl_module, datamodule, store: str, *, batch_size: int = 32) -> dict:
    """mIoU (macro over the classes, `ignore_index` left out, as the task's val_miou) and pixel accuracy of
    `pl_module` on every tile of `store` (all its splits), its images normalised as in training."""
    from eoscale.data.datamodule import TileDataModule
    from eoscale.models.metrics import segmentation_metrics
    from eoscale.store import schema

    dm = TileDataModule(store, batch_size=batch_size, num_workers=0, augment=False, bands=datamodule.band_names,
                        pin_memory=False)
    # the model was trained on the fine-tuning store's normalisation: use its statistics, not this store's
    dm.attrs[schema.ATTR_STATISTICS] = {
        k: [datamodule.attrs[schema.ATTR_STATISTICS][k][datamodule.attrs[schema.ATTR_BANDS].index(b)]
            if b in datamodule.attrs[schema.ATTR_BANDS] else 0.0 for b in dm.attrs[schema.ATTR_BANDS]]
        for k in ("mean", "std")
    }
    metrics = segmentation_metrics(dm.num_classes).to(pl_module.device)
    was_training = pl_module.training
    pl_module.eval()
    tiles = 0
    with torch.no_grad():
        for split in schema.SPLITS:
            start, stop = dm.split_range(split)
            if stop <= start:
                continue
            dm.predict_split = split
            dm.setup("predict")
            with dm.predict_dataloader() as loader:
                for batch in loader:
                    batch = dm.normalise({k: v.to(pl_module.device) for k, v in batch.items()})
                    metrics.update(pl_module(batch["image"]).argmax(dim=1), batch["label"])
                    tiles += batch["image"].shape[0]
    pl_module.train(was_training)
    values = metrics.compute()
    return {"store": store, "tiles": tiles, "miou": float(values["miou"]), "accuracy": float(values["accuracy"])}


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
