"""What a user sees while eoscale trains: eoscale's progress and warnings, not Lightning's advertisements.

`silence_known_noise()` drops, by exact message, what Lightning and torch print on every run and which tells an
eoscale user nothing or something wrong:

- the litlogger "💡 Tip" (an advertisement), and MLflow's INFO lines about creating its database tables;
- "The `srun` command is available on your system but is not used" (eoscale's Slurm templates use srun; a
  run on a login node or a laptop is deliberate);
- `isinstance(treespec, LeafSpec)` is deprecated (Lightning's own use of torch's pytree, not ours);
- "Your `IterableDataset` has `__len__` defined": `TileStream`'s length is exact per rank and worker (every rank
  yields the same number of batches by construction, `eoscale.data.partition`), which is why it has one;
- "It is recommended to use `self.log('val_miou', ..., sync_dist=True)`", once per epoch metric on every
  distributed fit: those values come from torchmetrics' `compute()`, which has all-reduced them already
  (`SegmentationTask._log_epoch`); following the advice would average them again;
- under DeepSpeed ZeRO: torch's deprecation warnings for the collectives DeepSpeed calls, and Lightning's note that
  its clipping hook does not clip (DeepSpeed clips, at the trainer's `gradient_clip_val`: `eoscale.train.strategies.zero`).

`ModelSummary` is Lightning's rich model summary without the FLOPs column and "Total FLOPs: 0" line, which
Lightning prints for every model that sets no `example_input_array`; `ProgressBar` is its rich progress bar
without "Epoch 6/-2" when a run is bounded by steps (it says the step and `max_steps` instead). Where standard output
is not a terminal (a Slurm log, a pipe), `progress_bar()` gives `LineProgress` instead: whole lines every
`LINE_EVERY` steps and at each epoch's and validation's end; the rich bar, drawn for a file, left half-drawn table
cells there (`train_loss_ste…`).
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

from lightning.pytorch.callbacks import ProgressBar as BaseProgressBar
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar

from eoscale.track.logger import quiet_store_creation

NOISE = (
    r"The `srun` command is available on your system but is not used",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    r"Your `IterableDataset` has `__len__` defined",
    r"It is recommended to use `self.log\('(val|test)_(accuracy|f1|miou|iou/)",
    # DeepSpeed ZeRO (eoscale.train.strategies.zero): its collectives call torch's deprecated names, and Lightning says the
    # clipping hook will not clip, which eoscale's never asked it to: DeepSpeed clips at the trainer's value
    r"`torch.distributed.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
    r"Since DeepSpeed handles gradient clipping internally",
)


class _DropTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage())
        return "litlogger" not in message and "already configured with model summary" not in message


def silence_known_noise() -> None:
    """Filter the messages listed in the module docstring for the rest of this process (idempotent)."""
    for message in NOISE:
        warnings.filterwarnings("ignore", message=message)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _DropTip) for f in target.filters):
            target.addFilter(_DropTip())
    quiet_store_creation()  # MLflow's "Creating initial MLflow database tables", Lightning's "… Creating it."


def silence_trainer_info() -> None:
    """For a Trainer eoscale builds itself inside a command (the benchmarks' fits): the known noise, and none of
    Lightning's INFO lines ("GPU available: False, used: False", "`Trainer.fit` stopped: `max_steps=…` reached"),
    which the benchmark's own progress lines replace; Lightning's warnings still show."""
    silence_known_noise()
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)


class ModelSummary(RichModelSummary):
    """Lightning's rich model summary, FLOPs shown only where they were counted."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        if total_flops:
            RichModelSummary.summarize(summary_data, total_parameters, trainable_parameters, model_size,
                                       total_training_modes, total_flops, **summarize_kwargs)
            return
        from lightning.pytorch.utilities.model_summary.model_summary import (
            get_formatted_model_size,
            get_human_readable_count,
        )
        from rich.console import Console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style="bold magenta")
        for name, _ in columns:
            table.add_column(name, justify="right" if name.startswith("Params") else "left",
                             style="dim" if name == " " else None)
        for row in zip(*(values for _, values in columns), strict=True):
            table.add_row(*row)
        console = Console()
        console.print(table)
        console.print(f"Trainable params: {get_human_readable_count(int(trainable_parameters))}   "
                      f"total: {get_human_readable_count(int(total_parameters))}   "
                      f"size: {get_formatted_model_size(model_size)} MB   "
                      f"modules in train / eval mode: {total_training_modes['train']} / {total_training_modes['eval']}")


class ProgressBar(RichProgressBar):
    """Lightning's rich progress bar; a run bounded by steps shows `step s/max_steps`, not `Epoch e/-2`; and it
    computes the epoch's metrics on every rank, not on rank 0 alone (see `on_train_epoch_end`)."""

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # Lightning's bar shows the epoch's metrics on rank 0 only, and computing one logged with sync_dist
        # all-reduces it: on rank 0 alone, while the other ranks are already in the next collective (eoscale's
        # throughput monitor's at this same hook). Measured: a 2-rank fit with the bar on died at its first epoch's
        # end ("Received data size doesn't match expected size", gloo). Computed here on every rank, in the same
        # order, they are cached for the bar, the monitor's collectives match, and Lightning logs the same values.
        trainer.callback_metrics  # noqa: B018  (the property computes and caches every epoch metric)
        super().on_train_epoch_end(trainer, pl_module)

    def _get_train_description(self, current_epoch: int) -> str:  # Lightning 2.6's hook for this text
        trainer = self.trainer
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            return super()._get_train_description(current_epoch)
        text = f"Epoch {current_epoch}"
        if trainer.max_steps and trainer.max_steps > 0:
            text += f" (to step {trainer.max_steps})"
        return f"{text:{len(self.validation_description)}}"


LINE_EVERY = 50  # training steps between two lines of `LineProgress`


def progress_bar(stream=None) -> BaseProgressBar:
    """The rich bar on a terminal, whole lines (`LineProgress`) where `stream` (standard output) is not one."""
    stream = sys.stdout if stream is None else stream
    return ProgressBar() if getattr(stream, "isatty", lambda: False)() else LineProgress()


class LineProgress(BaseProgressBar):
    """Progress as whole lines, for logs: `epoch E (to step MAX): step S, batch B/N: name=value …` every `every`
    steps and at the end of each epoch (`epoch E (to step MAX) done: …`), and `validation after step S: name=value …` after each validation; printed by rank 0.
    Like `ProgressBar`, it computes the epoch's metrics on every rank, in the same order (see there why)."""

    def __init__(self, every: int | None = None) -> None:
        super().__init__()
        self.every = max(1, int(LINE_EVERY if every is None else every))
        self._enabled = True
        self._batches = 0  # of this epoch, so far

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._batches = batch_idx + 1
        if self._enabled and trainer.global_step % self.every == 0:
            self._line(trainer, pl_module, batch_idx + 1)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        trainer.callback_metrics  # noqa: B018  (on every rank: computes and caches every epoch metric)
        if self._enabled:
            self._line(trainer, pl_module, self._batches, end=True)

    def on_validation_end(self, trainer, pl_module) -> None:
        metrics = trainer.callback_metrics  # on every rank, as above
        if self._enabled and not trainer.sanity_checking:
            shown = {k: v for k, v in metrics.items() if k.startswith("val_") and "/" not in k}
            print(f"validation after step {trainer.global_step}: {_values(shown)}", flush=True)

    def _line(self, trainer, pl_module, batches: int, *, end: bool = False) -> None:
        total = trainer.num_training_batches  # (the base class's total_train_batches counts down to max_steps)
        if trainer.max_steps and trainer.max_steps > 0:  # as the rich bar says it (`ProgressBar`)
            epoch = f"epoch {trainer.current_epoch} (to step {trainer.max_steps})"
        elif trainer.max_epochs and trainer.max_epochs > 0:
            epoch = f"epoch {trainer.current_epoch} of {trainer.max_epochs}"
        else:
            epoch = f"epoch {trainer.current_epoch}"
        of = f"/{total}" if isinstance(total, int) and total > 0 else ""
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        print(f"{epoch}{' done' if end else ''}: step {trainer.global_step}, batch {batches}{of}: "
              f"{_values(metrics)}".rstrip(": "), flush=True)


def _values(metrics: dict) -> str:
    def text(value: Any) -> str:
        try:
            return f"{float(value):.4g}"
        except (TypeError, ValueError):
            return str(value)

    return " ".join(f"{name}={text(value)}" for name, value in sorted(metrics.items()))
