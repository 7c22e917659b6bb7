"""`StepBudget`: a fit of a time budget (`--trainer.max_time`) re-sized after each validation, so the budget holds.

A budgeted fit is sized before it starts (`eoscale bench learning` sets `max_steps` from a short calibration run's
step time), but a step's time on a shared machine moves with the load: on the 2-core machine of issue 49 a
calibration under load sized a 7.5-minute fit to a fraction of its budget (docs/how-to/real-scenes.md: `max_time`
only stops a run, it never lengthens one); the other way round, a calibration on a quiet machine makes a schedule
that `max_time` cuts before the LR has decayed. This callback measures the fit itself: after each validation it
takes the seconds a step has cost so far (validation and start-up included), sets `max_steps` to the steps the rest
of the budget holds (`resized_steps`, whole validation intervals, so the last step is validated), and continues the
LR schedule's cosine from where it is to that new end (`continued_cosine`): the warm-up and cosine of `BaseTask`
(`eoscale.train.tasks.base.warmup_cosine`) end at the budget's end whatever the machine's speed. Without
`max_time` (no Timer) it does nothing.

    eoscale fit --config configs/vit_scene_seg.yaml --trainer.max_time 00:00:07:30 --trainer.max_steps 200 \\
        --trainer.callbacks+=eoscale.train.callbacks.budget.StepBudget
"""

from __future__ import annotations

import math

from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import Timer

# the share of the remaining budget that is planned into steps: the rest is the last validation, the checkpoint
# and the variation of the step time
SAFETY = 0.9


def resized_steps(done: int, elapsed: float, remaining: float, *, every: int, safety: float = SAFETY) -> int:
    """The fit's new `max_steps`: the `done` steps plus those `safety` of the `remaining` seconds hold at the
    step time measured so far (`elapsed / done`), in whole intervals of `every` steps; never fewer than `done`
    (the fit then stops at this validation)."""
    if done <= 0 or elapsed <= 0:
        raise ValueError(f"resized_steps(done={done}, elapsed={elapsed}): nothing measured yet")
    more = int(max(remaining, 0.0) * safety / (elapsed / done))
    return done + more // every * every


def continued_cosine(step: int, progress: float, total: int, min_ratio: float):
    """The LR factor from `step` on: the cosine of `warmup_cosine`, continued from its `progress` (0–1) at `step`
    down to `min_ratio` at `total`, so that the LR does not jump when the end moves."""

    def factor(s: int) -> float:
        p = min(1.0, progress + (1 - progress) * max(s - step, 0) / max(total - step, 1))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))

    return factor


class StepBudget(Callback):
    """Re-sizes a fit's `max_steps` and LR schedule to its `max_time` after every validation (module docstring).

    Args:
        verbose: print a line for each re-sizing (`step budget: …`), which `eoscale bench learning` records.
    """

    def __init__(self, verbose: bool = True) -> None:
        self.verbose = verbose
        self.resizes: list[dict] = []
        self._anchor: tuple[int, float] | None = None  # (step, cosine progress there) of the last re-sizing

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        done = trainer.global_step
        if (trainer.state.fn != "fit" or trainer.sanity_checking or timer is None or timer.time_remaining() is None
                or done <= 0):
            return
        every = trainer.val_check_interval if isinstance(trainer.val_check_interval, int) else 1
        if trainer.should_stop or done % every:  # the validation of a run that stops (max_time, early stopping)
            return
        before = trainer.max_steps
        total = resized_steps(done, timer.time_elapsed(), timer.time_remaining(), every=every)
        # rank 0's clock decides for every rank: ranks that stopped at different steps would wait for each other
        total = trainer.strategy.broadcast(total, src=0)
        if total == before:
            return
        trainer.fit_loop.epoch_loop.max_steps = total
        self._reschedule(trainer, pl_module, done, before, total)
        per_step = timer.time_elapsed() / done
        self.resizes.append({"step": done, "seconds_per_step": per_step, "max_steps": total})
        if self.verbose and trainer.global_rank == 0:  # `eoscale bench learning` records these lines
            print(f"step budget: step {done}, {per_step:.2f} s a step, {timer.time_remaining():.0f} s left: "
                  f"max_steps {before} -> {total}", flush=True)

    def _reschedule(self, trainer: Trainer, pl_module: LightningModule, done: int, before: int, total: int) -> None:
        """The step-wise LambdaLR of `BaseTask` made to end at `total`: the warm-up as it was, then the cosine
        continued from its progress at `done` (no schedule of another kind is touched)."""
        from torch.optim.lr_scheduler import LambdaLR

        from eoscale.train.tasks.base import warmup_cosine

        warmup = int(pl_module.hparams.get("warmup_steps", 0))
        min_ratio = float(pl_module.hparams.get("min_lr_ratio", 0.0))
        if done < warmup:  # still warming up: the same warm-up, its cosine to the new end
            factor = warmup_cosine(warmup, total, min_ratio)
        else:
            step, progress = self._anchor or (warmup, 0.0)
            now = min(1.0, progress + (1 - progress) * (done - step) / max(before - step, 1))
            self._anchor = (done, now)
            factor = continued_cosine(done, now, total, min_ratio)
        for config in trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, LambdaLR) and config.interval == "step":
                config.scheduler.lr_lambdas = [factor] * len(config.scheduler.lr_lambdas)
