"""Lightning's private names eoscale relies on (checked on lightning 2.6).

- `ModelParallelStrategy._device_mesh`: the mesh, or None before the strategy made it (the public `device_mesh`
  raises then);
- the sharded-checkpoint helpers of `lightning.fabric.strategies.fsdp` and `lightning.fabric.utilities.load`
  that a tensor-parallel run resumes with (`eoscale.train.strategies.tp`);
- the private hooks of `DeepSpeedStrategy` that `eoscale.train.strategies.zero.ZeroStrategy` overrides
  (`_setup_model_and_optimizer`, `_init_deepspeed_distributed`, `_get_process_group_backend`,
  `_create_default_config`, `_init_config_if_needed`, `_auto_select_batch_size`): `ZERO_HOOKS.require()`;
- `LightningCLI._parse_ckpt_path`, which `eoscale.train.launch.cli.EoscaleCLI` wraps so that a checkpoint's old
  class path does not warn (`eoscale.train.moved.quietly`); were it renamed, such a checkpoint would only warn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eoscale._compat import Checked

CHECKED = Checked("lightning", "2.6", "2.7", "ModelParallelStrategy._device_mesh and the sharded-checkpoint helpers")
ZERO_HOOKS = Checked("lightning", "2.6", "2.7", "DeepSpeedStrategy's private hooks (ZeroStrategy on CPUs)")


def device_mesh(strategy: Any) -> Any:
    """The device mesh of a `ModelParallelStrategy` once it is set up; None for any other strategy or before."""
    if strategy is None:
        return None
    if CHECKED.allowed("eoscale reads the public device_mesh property instead"):
        return getattr(strategy, "_device_mesh", None)
    try:
        return getattr(strategy, "device_mesh", None)
    except RuntimeError:  # not set up yet
        return None


def is_sharded_checkpoint(path: Path) -> bool:
    CHECKED.require()
    from lightning.fabric.strategies.fsdp import _is_sharded_checkpoint

    return _is_sharded_checkpoint(path)


def distributed_checkpoint_load(state: dict[str, Any], path: Path) -> None:
    """Fill `state` (model and optimizer entries, DTensors as this run lays them out) from the sharded folder `path`."""
    CHECKED.require()
    from lightning.fabric.strategies.fsdp import _distributed_checkpoint_load

    _distributed_checkpoint_load(state, path)


def checkpoint_metadata_file(path: Path) -> Path:
    """The file of a sharded checkpoint folder that holds everything but the model and optimizer state."""
    CHECKED.require()
    from lightning.fabric.utilities.load import _METADATA_FILENAME

    return Path(path) / _METADATA_FILENAME

