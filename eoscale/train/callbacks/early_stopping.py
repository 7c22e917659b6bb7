"""`BestMetricStopping`: stop a fit once the task's checkpoint metric has not improved for `patience` validations.

On by default in `eoscale fit` (`--early_stopping.enabled false` trains to `max_steps`, `--early_stopping.patience N`
sets the patience). It watches what the best checkpoint is chosen by, so the run stops when the checkpoint `predict`
takes (`eoscale.models.checkpoint.run_checkpoint`) has stopped changing: val mIoU (max) for segmentation, val RMSE
(min) for regression (`BaseTask.CHECKPOINT_MONITOR`, or whatever `--checkpoint.monitor` names). On small, noisy
label sets the val mIoU peaks and then wanders while the training loss still falls (issue 38).

Lightning's `EarlyStopping` does the work: its state (the best score, the validations waited) is saved in every
checkpoint and restored on `--ckpt_path` and Slurm requeues, and its decision is reduced over the ranks. This class
only resolves the monitor from the checkpoint callback at setup, checks after every validation (`patience` counts
validations, whatever `val_check_interval` is), and stays out of tasks that opt out (`EARLY_STOPPING = False`: the
self-supervised pretraining tasks, which follow a fixed schedule) and of runs where the metric is never logged.
"""

from __future__ import annotations

import sys
from typing import Literal

import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason


class BestMetricStopping(EarlyStopping):
    """Lightning's EarlyStopping on the checkpoint callback's metric, checked after every validation.

    Args:
        enabled: stop early at all (false: train to the end of the schedule).
        patience: validations without an improvement of the monitored metric before the fit stops.
        min_delta: the smallest change that counts as an improvement.
        monitor: the metric; by default the best checkpoint's (`checkpoint.monitor`, which each task sets).
        mode: `max` or `min`, whether higher or lower is better; by default the best checkpoint's (`checkpoint.mode`).
    """

    def __init__(self, enabled: bool = True, patience: int = 10, min_delta: float = 0.0, monitor: str | None = None,
                 mode: Literal["min", "max"] | None = None) -> None:
        # strict=False: a task that never logs the metric (a config without validation) is not stopped, not failed
        super().__init__(monitor=monitor or "", patience=patience, min_delta=min_delta, mode=mode or "max",
                         strict=False, check_on_train_epoch_end=False)
        self.enabled = enabled
        self._given = (monitor, mode)
        self.active = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        monitor, mode = self._given
        checkpoint = trainer.checkpoint_callback
        if monitor is None and checkpoint is not None:
            monitor, mode = checkpoint.monitor, mode or checkpoint.mode
        self.active = bool(self.enabled and stage == "fit" and monitor and getattr(pl_module, "EARLY_STOPPING", True))
        if not self.active:
            return
        # before the checkpoint's state is restored (Lightning restores callbacks after setup): the state key
        # (`monitor`, `mode`) must be the one a resumed run saved it under
        self.monitor, self.mode = monitor, mode or "max"
        self.min_delta = abs(self.min_delta) * (1 if self.mode == "max" else -1)
        self.best_score = torch.tensor(-torch.inf if self.mode == "max" else torch.inf)

    def _should_skip_check(self, trainer: Trainer) -> bool:
        return not self.active or super()._should_skip_check(trainer)

    def _run_early_stopping_check(self, trainer: Trainer) -> None:
        stopping = trainer.should_stop
        super()._run_early_stopping_check(trainer)
        if trainer.should_stop and not stopping and trainer.is_global_zero:
            if self.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
                why = (f"{self.monitor} has not improved for {self.wait_count} validations "
                       f"(best {float(self.best_score):.4f})")
            else:
                why = self.stopping_reason_message or "stopping"
            print(f"early stopping at step {trainer.global_step}: {why}; the best checkpoint is kept "
                  "(--early_stopping.enabled false trains to the end)", file=sys.stderr)
