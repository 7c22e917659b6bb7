"""A new strategy is a Lightning strategy with the protocol of `eoscale.train.strategies.protocol`: one written here
(on Lightning's one-device strategy: a DDP one would leave this process's process group behind) runs a short fit, and the task and the loader reach it only through the protocol's methods."""

from __future__ import annotations

import json
from pathlib import Path

from lightning.pytorch.strategies import SingleDeviceStrategy

from eoscale.train.launch.main import main
from eoscale.train.strategies.protocol import DataParallel, PlainParallelism

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
CALLS: list[str] = []


class StubStrategy(PlainParallelism, SingleDeviceStrategy):
    """One CPU device, whose protocol methods say that they were called."""

    def __init__(self) -> None:
        super().__init__(device="cpu")

    def data_parallel(self) -> DataParallel:
        CALLS.append("data_parallel")
        return super().data_parallel()

    def prepare_model(self, task, model):
        CALLS.append("prepare_model")
        return model

    def clip_gradients(self, module, max_norm: float) -> bool:
        CALLS.append("clip_gradients")
        return False  # Lightning clips

    def parameter_shape(self, parameter) -> tuple[int, ...]:
        CALLS.append("parameter_shape")
        return tuple(parameter.shape)


def test_a_stub_strategy_runs_a_short_fit(store: Path, tmp_path: Path, monkeypatch, one_thread):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    CALLS.clear()
    main(["fit", "--config", SMOKE, "--data.init_args.store", str(store), "--data.init_args.num_workers", "0",
          "--data.init_args.batch_size", "4", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
          "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
          "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.gradient_clip_val", "1.0",
          "--trainer.strategy", json.dumps({"class_path": f"{__name__}.StubStrategy"})])
    assert {"data_parallel", "prepare_model", "clip_gradients", "parameter_shape"} <= set(CALLS)
    assert list(tmp_path.rglob("last.ckpt"))


def test_every_eoscale_strategy_speaks_the_protocol():
    from eoscale.train.strategies.fsdp import FSDP2Strategy
    from eoscale.train.strategies.pipeline import PipelineStrategy
    from eoscale.train.strategies.protocol import Parallelism
    from eoscale.train.strategies.resolve import parallelism
    from eoscale.train.strategies.tp import TensorParallelStrategy
    from eoscale.train.strategies.zero import ZeroStrategy

    for cls in (FSDP2Strategy, TensorParallelStrategy, ZeroStrategy, PipelineStrategy, StubStrategy):
        assert issubclass(cls, Parallelism), cls
    plain = parallelism(None)  # one process, no trainer
    assert plain.data_parallel() == DataParallel(0, 1) and plain.stage_runner() is None
