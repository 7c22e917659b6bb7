"""DeepSpeed ZeRO (stages 2 and 3, optionally with the optimizer offloaded to CPU) through Lightning's DeepSpeed strategy.

ZeRO-2 shards the optimizer state and the gradients over the data-parallel ranks and keeps a full copy of the
parameters on each; ZeRO-3 shards the parameters too and gathers each layer's for its forward and backward.
Pick it with a config fragment (`configs/strategy/zero2.yaml`, `zero3.yaml`, `zero3_offload.yaml`)::

    eoscale fit --config configs/vit_l16_seg.yaml --config configs/strategy/zero3.yaml --trainer.devices 4

`ZeroStrategy` is Lightning's `DeepSpeedStrategy` with two changes:

- it also runs on CPUs (gloo): Lightning refuses any accelerator but CUDA, though DeepSpeed itself runs ZeRO
  over gloo on CPUs, which is how the tests run it;
- the optimizer is the LightningModule's own torch optimizer (AdamW), never DeepSpeed's fused ones: those
  are C++/CUDA ops that compile on first use (70-100 s each on these machines, and a compiler on every
  node). Gradient clipping is the trainer's `gradient_clip_val` (DeepSpeed's own default is 1.0, DDP's none):
  Lightning writes it into DeepSpeed's config, so the same config clips the same under DDP and ZeRO.

Checkpoints are DeepSpeed's sharded folders (one file per rank); `eoscale consolidate FOLDER OUT.ckpt` gathers
the fp32 weights into one eoscale checkpoint that `eoscale predict` and fine-tuning read (`eoscale.train.strategies.consolidate`).
Resuming from the folder (`--ckpt_path last` or its path) at the same world size is DeepSpeed's `load_checkpoint`
(tested: ZeRO-3 at W=2 on CPU goes on from its step in the same MLflow run).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy

from eoscale._compat import deepspeed as deepspeed_compat
from eoscale._compat.lightning import ZERO_HOOKS
from eoscale.errors import InputError
from eoscale.train.strategies.buffers import ReplicatedBuffers
from eoscale.train.strategies.protocol import PlainParallelism

# before a config naming this strategy is parsed: jsonargparse imports DeepSpeed (if installed) to read the signature
deepspeed_compat.set_environment()


class ZeroStrategy(ReplicatedBuffers, PlainParallelism, DeepSpeedStrategy):
    """Lightning's `DeepSpeedStrategy` that also runs on CPUs; every argument is Lightning's
    (`stage`, `offload_optimizer`, `offload_parameters`, `reduce_bucket_size`, `allgather_bucket_size`, ...).
    DeepSpeed broadcasts the parameters once, never the buffers: every rank holds rank 0's BatchNorm statistics
    where they are read or saved (`eoscale.train.strategies.buffers`).

    DeepSpeed is the optional extra `eoscale[deepspeed]`: building this strategy without it fails in one line
    naming the extra (exit 2), and nothing else in eoscale imports DeepSpeed."""

    strategy_name = "eoscale_zero"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        deepspeed_compat.import_deepspeed()  # Lightning's own message would not name the extra
        ZERO_HOOKS.require()  # the private hooks of DeepSpeedStrategy overridden below
        super().__init__(*args, **kwargs)
        check_zero_config(self.config or {})  # before any rank starts: the config (or config file) is known here

    def setup_environment(self) -> None:
        if isinstance(self.accelerator, CUDAAccelerator):
            super().setup_environment()
            return
        # Lightning's DeepSpeedStrategy accepts CUDA only; the checks above it (DDP's) are all it needs on CPUs
        DDPStrategy.setup_environment(self)

    @contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        # Lightning builds the model inside deepspeed.zero.Init under ZeRO-3, which partitions each layer's
        # parameters as soon as it exists: timm's weight init after construction, and eoscale's loading of
        # fine-tuning weights, then write into empty placeholders (measured: another model than ZeRO-2's, from
        # step 0). Built whole, as under every other strategy, DeepSpeed partitions it in `deepspeed.initialize`
        # (a ViT-H is 2.5 GB in fp32: a model that fits no single GPU would need zero.Init back)
        self._init_config_if_needed()
        yield

    def setup_distributed(self) -> None:
        if isinstance(self.accelerator, CUDAAccelerator):
            super().setup_distributed()
            return
        # the parent's check that device indices equal local ranks means GPUs; CPU devices have no index
        from lightning.fabric.utilities.seed import reset_seed

        reset_seed()
        self.set_world_ranks()
        deepspeed_compat.skip_shm_op()
        self._init_deepspeed_distributed()

    def parameter_shape(self, parameter: Any) -> tuple[int, ...]:
        # a ZeRO-3 parameter is an empty placeholder between uses: its own shape is `ds_shape`
        return tuple(getattr(parameter, "ds_shape", parameter.shape))

    @property
    def zero_stage(self) -> int | None:
        zero = (self.config or {}).get("zero_optimization")
        return None if not zero else zero.get("stage")

    def _get_process_group_backend(self) -> str:
        # DeepSpeed's CPU accelerator asks for oneCCL, which is not installed: gloo, as DDP uses on CPUs
        if self._process_group_backend is None and not isinstance(self.accelerator, CUDAAccelerator):
            return "gloo"
        return super()._get_process_group_backend()

    def _setup_model_and_optimizer(self, model: Any, optimizer: Any, lr_scheduler: Any = None) -> tuple[Any, Any]:
        deepspeed_compat.share_fp32_master_partitions()
        if isinstance(self.accelerator, CUDAAccelerator):
            return super()._setup_model_and_optimizer(model, optimizer, lr_scheduler)
        import argparse

        import deepspeed

        # Lightning passes the device's index, which a CPU device lacks; DeepSpeed then compares None with 0
        engine, zero_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self.local_rank), config=self.config, model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad], optimizer=optimizer,
            lr_scheduler=lr_scheduler, dist_init_required=False)
        return engine, zero_optimizer

    def _auto_select_batch_size(self) -> int:
        # DeepSpeed logs throughput by it; eoscale's loader has no batch_sampler for Lightning to read it from
        datamodule = getattr(self.lightning_module.trainer, "datamodule", None)
        return int(getattr(datamodule, "batch_size", 0) or super()._auto_select_batch_size())

    def _create_default_config(self, *args: Any, **kwargs: Any) -> dict:
        config = super()._create_default_config(*args, **kwargs)
        # offloading runs the LightningModule's torch optimizer on the CPU copy; DeepSpeed would insist on its
        # DeepSpeedCPUAdam (a C++ op that compiles on first use)
        config["zero_force_ds_cpu_optimizer"] = False
        return config



def check_zero_config(config: dict) -> None:
    """Refuse, in one line, a DeepSpeed config that ZeRO on eoscale cannot run as the user meant: a stage other
    than 1-3, parameter offload below stage 3 (DeepSpeed ignores it there: the parameters stay whole on every
    device), offload to NVMe (DeepSpeed's async_io op, compiled on first use), an optimizer of DeepSpeed's own."""
    zero = config.get("zero_optimization") or {}
    stage = zero.get("stage")
    if stage not in (1, 2, 3):
        raise InputError(f"ZeRO stage={stage!r} is not one of 1, 2, 3: use configs/strategy/zero2.yaml or zero3.yaml")
    if zero.get("offload_param") and stage != 3:
        raise InputError(f"offload_parameters needs ZeRO stage 3 (stage={stage} keeps whole parameters on every "
                         "device): use configs/strategy/zero3_offload.yaml, or offload_optimizer alone")
    for key, option in (("offload_optimizer", "offload_optimizer_device"), ("offload_param", "offload_params_device")):
        device = (zero.get(key) or {}).get("device", "cpu")
        if device != "cpu":
            raise InputError(f"{option}={device!r}: eoscale offloads to cpu only (NVMe offload needs DeepSpeed's "
                             "async_io op, compiled on first use)")
    if "optimizer" in config:
        raise InputError("give the optimizer in the model's config (AdamW), not in the DeepSpeed config: "
                         "DeepSpeed's own optimizers compile CUDA/C++ ops on first use")


def check_strategy_choice(strategy: Any) -> None:
    """Before the Trainer is built (a config's `trainer.strategy`: a name, or class_path and init_args), refuse in
    one line Lightning's own DeepSpeed strategies (`--trainer.strategy deepspeed_stage_3`, or its class: they run
    on CUDA only and build a ZeRO-3 model inside `zero.Init`, where timm's weight init is lost) and a
    `ZeroStrategy` whose DeepSpeed config `check_zero_config` refuses (jsonargparse, building it later, would
    replace the message by its own "does not validate")."""
    name = strategy if isinstance(strategy, str) else getattr(strategy, "class_path", None)
    if not isinstance(name, str):
        return
    if _names(name, ZeroStrategy):
        init_args = getattr(strategy, "init_args", None) or {}
        try:
            ZeroStrategy(**(init_args.as_dict() if hasattr(init_args, "as_dict") else dict(init_args)))
        except MisconfigurationException as err:  # Lightning's: e.g. a config file that does not exist
            raise InputError(str(err).strip().splitlines()[0]) from err
        return
    if name.startswith("deepspeed") or name.rsplit(".", 1)[-1] == "DeepSpeedStrategy":
        stage = name.removeprefix("deepspeed_stage_").replace("_offload", " with offload") if name.startswith(
            "deepspeed_stage_") else "2 or 3"
        raise InputError(f"--trainer.strategy {name}: use eoscale's ZeRO fragments instead (ZeRO {stage}: "
                         "--config configs/strategy/zero2.yaml, zero3.yaml or zero3_offload.yaml)")


def _names(path: str, cls: type) -> bool:
    """Whether the class path `path` (a config's, old module paths included) names `cls` or a subclass of it."""
    import importlib

    module, _, attr = path.rpartition(".")
    if not module:
        return False
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(found, type) and issubclass(found, cls)
