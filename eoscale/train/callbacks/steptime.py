"""`StepTimer`: where a training step's time goes, logged to MLflow every `log_every_n_steps`.

A step runs from the end of the previous training batch to the end of this one, and is cut into three phases
that add up to it:

- `data_wait`: from the end of the previous batch to the start of this one: the time blocked on the loader for
  the next batch (and whatever Lightning does between batches). Validation runs and this callback's own
  logging are left out of the step.
- `forward_backward`: from the batch's start to the optimizer step: `training_step`, `zero_grad`, `backward`
  (Lightning's closure); with gradient accumulation, a batch without an optimizer step counts here whole.
- `optimizer`: the optimizer step, the LR scheduler and the step's logging, up to the end of the batch.

Under DDP, `comm_s` is the time of the gradient all-reduces, from each bucket's launch to its completion (a DDP
communication hook around the default all-reduce; CUDA events on GPUs), summed over buckets. DDP overlaps
them with the backward pass, so this is an "of which" figure, not a fourth phase. FSDP's collectives run inside
its own hooks and are not timed here: `--profile` shows them.

The figures are means per step over the logging window, averaged over the ranks (one all-reduce per window),
as `steptime/step_s`, `steptime/data_wait_s`, `steptime/forward_backward_s`, `steptime/optimizer_s`,
`steptime/data_wait_share` and `steptime/comm_s`. `eoscale compare` shows the data-wait share: near 1 a run
is input-bound, near 0 compute- or communication-bound.

On CUDA the timer synchronizes the device at the phase boundaries (`cuda_sync`), otherwise the host's clock
would charge kernels to whichever phase waits for them; the cost is three syncs a step.

The phases are also NVTX ranges (`nvtx`: no-ops unless a tool such as Nsight Systems is attached), and the
steps `[capture_start, capture_start + capture_steps)` are inside one NVTX range named `CAPTURE_RANGE`, which is
what `nsys profile --capture-range=nvtx` waits for (`--set nsys=true` of the Slurm training templates).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer

CAPTURE_RANGE = "eoscale-capture"  # the NVTX range nsys's capture range opens on (slurm/_train.j2)
PHASES = ("data_wait", "forward_backward", "optimizer")
PREFIX = "steptime/"


def _nvtx():
    try:
        import nvtx
    except ImportError:  # optional at run time: the ranges are only markers for a profiler
        return None
    return nvtx


class CommTimer:
    """A DDP communication hook: the default all-reduce, timed from launch to completion per bucket."""

    def __init__(self, process_group=None) -> None:
        self.process_group = process_group
        self.seconds = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def take(self) -> float:
        """The seconds in all-reduces since the last call."""
        for start, end in self._events:
            end.synchronize()
            self.seconds += start.elapsed_time(end) / 1000
        self._events = []
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP compares them as objects, and this module's are strings
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        buffer = bucket.buffer()
        if buffer.is_cuda:  # NCCL's future completes on its stream: time it there, read it later
            start = torch.cuda.Event(enable_timing=True)
            start.record()

            def done(fut):
                end = torch.cuda.Event(enable_timing=True)
                end.record()  # the callback runs with the future's stream current
                state._events.append((start, end))
                return fut.value()
        else:
            started = time.perf_counter()

            def done(fut):
                state.seconds += time.perf_counter() - started
                return fut.value()

        return allreduce_hook(state.process_group, bucket).then(done)


class StepTimer(Callback):
    """Per-step time of data wait, forward+backward and optimizer step (and DDP all-reduces) into MLflow.

    Args:
        enabled: measure and log (turn off to take the timer out of a measurement of its own).
        cuda_sync: synchronize a CUDA device at the phase boundaries, so that each phase owns its kernels.
        capture_start: the first training step inside the NVTX capture range (`nsys --capture-range=nvtx`).
        capture_steps: how many steps the capture range spans.
    """

    def __init__(self, enabled: bool = True, cuda_sync: bool = True, capture_start: int = 10,
                 capture_steps: int = 5) -> None:
        self.enabled = enabled
        self.cuda_sync = cuda_sync
        self.capture_start = capture_start
        self.capture_steps = capture_steps
        self.comm: CommTimer | None = None
        self._nvtx = _nvtx()
        self._sync = False
        self._reset_window()
        self._last_end: float | None = None
        self._paused = 0.0  # seconds since the last batch end that belong to no step (validation, logging)
        self._paused_from: float | None = None
        self._epoch_end: float | None = None
        self._start = self._optimizer_at = None
        self._capturing = False

    def _reset_window(self, now: float | None = None) -> None:
        self._sums = dict.fromkeys(PHASES, 0.0)
        self._steps = 0
        self._window_from = now  # the window's own wall clock, to check the phases against
        self._window_paused = 0.0

    # -- clock and markers ----------------------------------------------------------------------------------
    def _now(self) -> float:
        if self._sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _push(self, name: str) -> None:
        if self._nvtx is not None:
            self._nvtx.push_range(name)

    def _pop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.pop_range()

    # -- hooks ----------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.enabled:
            return
        self._sync = self.cuda_sync and pl_module.device.type == "cuda"
        self._register_comm_hook(trainer)

    def _register_comm_hook(self, trainer: Trainer) -> None:
        from torch.nn.parallel import DistributedDataParallel

        model = getattr(trainer.strategy, "model", None)
        if not isinstance(model, DistributedDataParallel) or getattr(trainer.strategy, "_ddp_comm_hook", None):
            return  # not DDP, or the user's own hook (DDP takes one): no comm figure
        timer = CommTimer(getattr(trainer.strategy, "process_group", None))
        model.register_comm_hook(timer, CommTimer.hook)
        self.comm = timer

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.enabled:
            return
        # the first batch's wait (loader workers starting, the first fetch) is data wait too
        now = self._now()
        if self._window_from is None:
            self._window_from = now
        elif self._epoch_end is not None:
            self._window_paused += now - self._epoch_end  # between epochs: no step's
        self._last_end, self._paused = now, 0.0
        self._push("data_wait")

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if not self.enabled or self._last_end is None:
            return
        self._start = self._now()
        self._pop()
        self._sums["data_wait"] += max(self._start - self._last_end - self._paused, 0.0)
        self._window_paused += self._paused
        self._optimizer_at = None
        self._push("forward_backward")

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer) -> None:
        if not self.enabled or self._start is None:
            return
        self._optimizer_at = self._now()
        self._pop()
        self._push("optimizer")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        if not self.enabled or self._start is None:
            return
        end = self._now()
        self._pop()
        split = self._optimizer_at or end
        self._sums["forward_backward"] += split - self._start
        self._sums["optimizer"] += end - split
        self._steps += 1
        self._start = None
        self._capture(trainer.global_step)
        every = max(trainer.log_every_n_steps, 1)
        if trainer.global_step > 0 and trainer.global_step % every == 0 and self._optimizer_at is not None:
            self._log(trainer, pl_module, end)
        self._last_end, self._paused = end, time.perf_counter() - end  # this callback's logging: no step's
        self._push("data_wait")

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.enabled and self._last_end is not None:
            self._pop()
            self._epoch_end, self._last_end = time.perf_counter(), None

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._capturing:
            self._pop()
            self._capturing = False

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.enabled and self._last_end is not None and not trainer.sanity_checking:
            self._paused_from = time.perf_counter()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._paused_from is not None:
            self._paused += time.perf_counter() - self._paused_from
            self._paused_from = None

    def _capture(self, step: int) -> None:
        """Open the capture range before step `capture_start`, close it after the last captured step."""
        if not self._capturing and step == self.capture_start:
            self._push(CAPTURE_RANGE)
            self._capturing = True
        elif self._capturing and step >= self.capture_start + self.capture_steps:
            self._pop()
            self._capturing = False

    # -- logging --------------------------------------------------------------------------------------------
    def _log(self, trainer: Trainer, pl_module: LightningModule, end: float) -> None:
        steps = max(self._steps, 1)
        wall = end - (self._window_from or end) - self._window_paused
        comm = self.comm.take() if self.comm is not None else None
        values = [self._sums[p] / steps for p in PHASES] + [wall / steps] + ([comm / steps] if comm is not None else [])
        # every rank reaches this step: the mean over ranks is one small all-reduce per window
        means = trainer.strategy.reduce(torch.tensor(values, dtype=torch.float64, device=pl_module.device),
                                        reduce_op="mean").tolist()
        self._reset_window(end)
        figures = dict(zip(PHASES, means[:3], strict=True))
        metrics = {f"{PREFIX}{name}_s": value for name, value in figures.items()}
        metrics[f"{PREFIX}step_s"] = means[3]
        total = sum(figures.values())
        metrics[f"{PREFIX}data_wait_share"] = figures["data_wait"] / total if total > 0 else 0.0
        if comm is not None:
            metrics[f"{PREFIX}comm_s"] = means[4]
        if trainer.is_global_zero:
            from eoscale.train.callbacks.monitor import mlflow_loggers

            for logger in mlflow_loggers(trainer):
                logger.log_metrics(metrics, step=trainer.global_step)
