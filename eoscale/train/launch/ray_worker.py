"""One Ray Train worker of `eoscale fit|pretrain --launcher ray`: the same LightningCLI run as under torchrun.

`train_loop` is the function Ray's `TorchTrainer` runs in each worker process. Ray has already made the
process group (gloo on CPUs, NCCL on GPUs), so `TileDataModule.setup` finds this worker's rank and the world
size in `torch.distributed` and streams this rank's own shards, as under torchrun. `RayCLI` is `EoscaleCLI`
with Ray's Lightning integration put into the Trainer: the config's strategy becomes its Ray counterpart
(`RayDDPStrategy` for DDP; eoscale's FSDP2 strategy with Ray's device), `RayLightningEnvironment` gives the
ranks, `RayCheckpointReport` hands checkpoints to Ray, and `prepare_trainer` checks the result. The config
itself (MLflow params, `config.yaml`) stays as the user wrote it.

After a lost worker, Ray starts the whole group again and `train_loop` resumes from the last reported
checkpoint (`--ckpt_path`), which carries the MLflow run: the run goes on, as after a Slurm requeue.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from lightning import Trainer
from lightning.pytorch.strategies import DDPStrategy

from eoscale._compat.ray import import_ray_train, wait_until_reported
from eoscale.errors import InputError
from eoscale.train.launch.cli import EoscaleCLI
from eoscale.train.strategies.fsdp import FSDP2Strategy

import_ray_train()  # Ray is the extra eoscale[ray]: without it, one line naming the extra (this module runs Ray's side)
import ray.train  # noqa: E402
from ray.train.lightning import (  # noqa: E402
    RayDDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)

LAUNCHER_ENV = "EOSCALE_LAUNCHER"  # read by eoscale.track.logger: the `run/launcher` param of the MLflow run
RAY_CHECKPOINT = RayTrainReportCallback.CHECKPOINT_NAME


class RayFSDP2Strategy(FSDP2Strategy):
    """eoscale's FSDP2 strategy on the device Ray gave this worker (Ray's own `RayFSDPStrategy` is Lightning's
    FSDP1 strategy, which refuses CPUs)."""

    @property
    def root_device(self):
        return ray.train.torch.get_device()

    def setup_environment(self) -> None:
        # Ray's world, not Lightning's num_nodes × devices (1 × 1 in each worker): all of it shards the model
        if self._data_parallel_size == "auto":
            self._data_parallel_size = ray.train.get_context().get_world_size() // int(self._tensor_parallel_size)
        super().setup_environment()


class RayCheckpointReport(RayTrainReportCallback):
    """Ray's report callback, also after every validation of `fit`: where `ModelCheckpoint` saves, a step-based
    run (whose epoch may be longer than the run) gets a checkpoint to resume from. Every rank reports (a
    collective); only rank 0's folder holds the file under DDP."""

    def __init__(self) -> None:
        super().__init__()
        self._reported_step = -1

    def on_validation_end(self, trainer: Trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._report(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module) -> None:
        self._report(trainer, pl_module)

    def _report(self, trainer: Trainer, pl_module) -> None:
        if trainer.global_step == self._reported_step:
            return  # a validation at the end of the epoch reported this step already
        self._reported_step = trainer.global_step
        super().on_train_epoch_end(trainer, pl_module)
        shutil.rmtree(Path(self.tmpdir_prefix, str(trainer.current_epoch)), ignore_errors=True)
        wait_until_reported()  # Ray's controller has the report before anything else can happen
        trainer.strategy.barrier()  # every rank's report taken: Ray registers the checkpoint in that same poll


def _strategy_spec(spec: Any) -> tuple[str | None, dict[str, Any]]:
    """(class path or name, init args) of the config's `trainer.strategy` as it was written."""
    if spec is None or isinstance(spec, str):
        return spec, {}
    if hasattr(spec, "get") and spec.get("class_path"):
        init = spec.get("init_args")
        return spec["class_path"], dict(vars(init) if init is not None and not isinstance(init, dict) else init or {})
    return type(spec).__module__ + "." + type(spec).__qualname__, {}


def ray_strategy(spec: Any):
    """The Ray counterpart of the config's strategy: DDP (or none given) → `RayDDPStrategy` with the same
    options, eoscale's FSDP2 → `RayFSDP2Strategy`; anything else is refused in one line."""
    name, init = _strategy_spec(spec)
    if name in (None, "auto", "ddp", "ray_ddp") or _is_subclass(name, DDPStrategy):
        for key in ("process_group_backend", "timeout", "start_method"):  # Ray's TorchConfig sets these
            init.pop(key, None)
        return RayDDPStrategy(**init)
    if _is_subclass(name, FSDP2Strategy):
        init.pop("process_group_backend", None)
        return RayFSDP2Strategy(**init)
    raise InputError(f"trainer.strategy={name!r} cannot run under --launcher ray: use configs/strategy/ddp.yaml "
                     f"or configs/strategy/fsdp.yaml")


def _is_subclass(path: str | None, base: type) -> bool:
    if not path or "." not in path:
        return False
    import importlib

    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, base)


class RayCLI(EoscaleCLI):
    """`EoscaleCLI` whose Trainer runs as one Ray Train worker (see the module docstring)."""

    def __init__(self, *args: Any, accelerator: str = "cpu", **kwargs: Any) -> None:
        self._ray_accelerator = accelerator
        super().__init__(*args, **kwargs)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config[self.subcommand] if self.subcommand else self.config
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        given = init["trainer"].get("callbacks") or []
        callbacks = list(given) if isinstance(given, list | tuple) else [given]
        kwargs.update(
            strategy=ray_strategy(config.trainer.get("strategy")),
            plugins=[RayLightningEnvironment()],
            accelerator=self._ray_accelerator,
            devices="auto",  # one device a worker: Ray's ranks, not Lightning's, make the world
            num_nodes=1,
            callbacks=[*callbacks, RayCheckpointReport()],
        )
        trainer = super().instantiate_trainer(**kwargs)
        # the report last, after ModelCheckpoint (which Lightning puts at the end): the checkpoint Ray keeps then
        # holds ModelCheckpoint's state after its save, and a restarted run overwrites `last.ckpt` (no `last-v1`)
        report = next(c for c in trainer.callbacks if isinstance(c, RayCheckpointReport))
        trainer.callbacks.remove(report)
        trainer.callbacks.append(report)
        if isinstance(trainer.strategy, RayDDPStrategy):
            prepare_trainer(trainer)  # Ray's check of strategy and environment (it knows no FSDP2)
        return trainer


def train_loop(config: dict[str, Any]) -> None:
    """One worker: resume from Ray's last checkpoint if there is one, then run the LightningCLI command."""
    os.chdir(config["cwd"])  # the config's relative paths are the user's, as without Ray
    os.environ[LAUNCHER_ENV] = "ray"
    # workers of a Ray cluster started inside a Slurm job inherit its variables: Lightning would take the
    # ranks from Slurm and eoscale would add its requeue callback; Ray owns the ranks here
    os.environ.pop("SLURM_NTASKS", None)
    # Ray gives a worker's root logger a handler of its own: these loggers have theirs, and would print twice
    for name in ("lightning.pytorch", "lightning.fabric", "mlflow"):
        logging.getLogger(name).propagate = False
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # "Reporting training result …" at every checkpoint
    args = list(config["args"])
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        path = Path(checkpoint.path) / RAY_CHECKPOINT  # Ray's storage is a (shared) file system
        if ray.train.get_context().get_world_rank() == 0:
            print(f"eoscale: Ray restarted the workers: resuming from {path}", flush=True)
        args += ["--ckpt_path", str(path)]
    RayCLI(args=args, accelerator=config["accelerator"])
