"""`LatestCheckpoint`: Lightning's ModelCheckpoint, whose `last.ckpt` is the newest state at every save point.

Lightning 2.6 writes `last.ckpt` (with `save_last=True`) only when a top-k checkpoint was saved at that step:
while the monitored metric does not improve, `last.ckpt` stays at the step of the last improvement. A run
that then dies without Slurm's warning (a node failure, an out-of-memory kill) and is resumed with
`--ckpt_path last` went back to that step and trained the hours since again. Here `last.ckpt` is written at
every point where the callback considers saving (each validation, or each epoch's end), whether or not the
top-k checkpoint changed; the top-k files are Lightning's as before. (The `every_n_train_steps` save points
write `last.ckpt` each time already, in Lightning's own code: checked with every 4 steps, a crash at step 17.)
"""

from __future__ import annotations

from lightning import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint


class LatestCheckpoint(ModelCheckpoint):
    """ModelCheckpoint (same arguments) whose `last.ckpt` is written at every save point; see the module
    docstring. Relies on ModelCheckpoint's `_should_skip_saving_checkpoint`, `_should_save_on_train_epoch_end`,
    `_monitor_candidates`, `_save_last_checkpoint` and `_last_global_step_saved` (checked with Lightning 2.6:
    tests/train/test_resume.py fails if they change)."""

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_behind(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_behind(trainer)

    def _save_last_if_behind(self, trainer: Trainer) -> None:
        # on every rank (a sharded save is a collective), as Lightning's own saves
        if self.save_last is True and not self._should_skip_saving_checkpoint(trainer):  # "link": Lightning's own rule
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
