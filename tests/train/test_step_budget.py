"""`StepBudget`: a budgeted fit re-sized from its own step time after each validation (the step times injected
through a Timer whose clock the test sets: no timing here)."""

from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Timer

from eoscale.train.callbacks.budget import StepBudget, continued_cosine, resized_steps
from eoscale.train.tasks.base import warmup_cosine


def test_a_slow_start_shrinks_the_fit_and_a_fast_one_lengthens_it():
    # guards: a fit sized once by its calibration (issue 49: 7.6 s a step measured under load, 2.1 s an hour before,
    # a 7.5-min budget done in 174 s of 450): after 20 steps the fit's own step time sets max_steps
    assert resized_steps(20, 40.0, 410.0, every=20) == 200  # 2 s a step: 0.9 · 410 / 2 = 184 more, whole 20s: 180
    assert resized_steps(20, 152.0, 298.0, every=20) == 40  # 7.6 s a step: 35 more, one validation interval
    assert resized_steps(40, 300.0, 5.0, every=20) == 40  # the budget is spent: stop at this validation
    assert resized_steps(40, 300.0, -3.0, every=20) == 40
    with pytest.raises(ValueError, match="nothing measured"):
        resized_steps(0, 0.0, 100.0, every=20)


def test_the_continued_cosine_starts_where_the_schedule_is_and_ends_at_the_new_end():
    old = warmup_cosine(10, 100, 0.1)
    new = continued_cosine(40, (40 - 10) / (100 - 10), 200, 0.1)
    assert new(40) == pytest.approx(old(40))
    assert new(200) == pytest.approx(0.1) and new(300) == pytest.approx(0.1)
    assert all(new(s) >= new(s + 1) for s in range(40, 200))


class _Clock(Timer):
    """A Timer whose elapsed seconds the test sets."""

    def __init__(self, duration: float) -> None:
        super().__init__(duration={"seconds": duration})
        self.elapsed = 0.0

    def time_elapsed(self, stage: str = "train") -> float:
        return self.elapsed


class _Trainer(SimpleNamespace):
    @property
    def max_steps(self) -> int:
        return self.fit_loop.epoch_loop.max_steps


def _trainer(timer, scheduler, *, max_steps: int, every: int) -> _Trainer:
    return _Trainer(callbacks=[timer], global_step=0, sanity_checking=False, val_check_interval=every, global_rank=0,
                    should_stop=False,
                    state=SimpleNamespace(fn="fit"), strategy=SimpleNamespace(broadcast=lambda value, src: value),
                    fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(max_steps=max_steps)),
                    lr_scheduler_configs=[SimpleNamespace(scheduler=scheduler, interval="step")])


def test_the_callback_resizes_max_steps_and_the_lr_schedule_after_each_validation():
    # guards: max_steps left at the calibration's guess when the machine is faster or slower than it measured, or
    # the LR schedule left ending at the old max_steps (cut by max_time before it decays, or decayed half-way)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(10, 40, 0.0))
    timer = _Clock(450.0)
    trainer = _trainer(timer, scheduler, max_steps=40, every=20)
    module = SimpleNamespace(hparams={"warmup_steps": 10, "min_lr_ratio": 0.0})
    budget = StepBudget(verbose=False)

    trainer.global_step, timer.elapsed = 20, 40.0  # 2 s a step: the budget holds 200 steps, not 40
    before = scheduler.lr_lambdas[0](20)
    budget.on_validation_end(trainer, module)
    assert trainer.max_steps == 200
    assert scheduler.lr_lambdas[0](20) == pytest.approx(before)  # no jump in the LR
    assert scheduler.lr_lambdas[0](200) == pytest.approx(0.0) and scheduler.lr_lambdas[0](100) > 0.25

    trainer.global_step, timer.elapsed = 100, 400.0  # then 4 s a step: 50 s left hold 11 steps, none whole
    before = scheduler.lr_lambdas[0](100)
    budget.on_validation_end(trainer, module)
    assert trainer.max_steps == 100  # the fit stops at this validation
    assert scheduler.lr_lambdas[0](100) == pytest.approx(before)
    assert [r["max_steps"] for r in budget.resizes] == [200, 100]


def test_without_a_time_budget_nothing_changes():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(10, 40, 0.0))
    trainer = _trainer(Timer(), scheduler, max_steps=40, every=20)  # no duration: no max_time
    trainer.global_step = 20
    StepBudget(verbose=False).on_validation_end(trainer, SimpleNamespace(hparams={}))
    assert trainer.max_steps == 40


def test_the_validation_of_a_stopping_run_resizes_nothing():
    # guards: the validation Lightning runs when max_time (or early stopping) stops a fit between two intervals
    # taken for one of the schedule's: max_steps set to that step, off the validation intervals
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(10, 40, 0.0))
    timer = _Clock(6.0)
    trainer = _trainer(timer, scheduler, max_steps=40, every=20)
    trainer.global_step, timer.elapsed, trainer.should_stop = 4, 6.5, True
    StepBudget(verbose=False).on_validation_end(trainer, SimpleNamespace(hparams={"warmup_steps": 10}))
    assert trainer.max_steps == 40
