"""The one protocol through which tasks and the data loader use a strategy.

A task or the loader never reads a strategy's attributes by name (a mesh, a pipeline stage, a ZeRO placeholder's
shape); it asks the strategy, through `parallelism(trainer.strategy)`:

- `data_parallel()`: this rank's data-parallel rank, the data-parallel size, and their process group (None: the
  whole world). Ranks of one tensor-parallel group, or the stages of one pipeline, take the same batches.
- `prepare_model(task, model)`: the network as this rank runs it (sharded by FSDP2, split by tensor
  parallelism, cut to one pipeline stage), called on every rank before the optimizer exists.
- `clip_gradients(module, max_norm)`: clip by the norm of the whole model's gradients where Lightning's own
  clipping cannot (gradients on two device meshes, or spread over pipeline stages); False: Lightning clips.
- `full_state(module)`: `module`'s whole state on rank 0 (a collective: every rank calls it), for export.
- `parameter_shape(parameter)`: a parameter's own shape (ZeRO-3 leaves an empty placeholder between uses).
- `stage_runner()`: the pipeline stage that runs a whole step's forward and backward itself, else None.
- `sync_buffers(module, check=False)`: give every rank that holds a copy of `module`'s buffers rank 0's running
  statistics (BatchNorm's, which each rank updates from its own batches), and with `check` raise if any buffer
  still differs (a collective). The strategy calls it itself where they are read or saved (before validation,
  test and prediction, at the end of training, when a checkpoint is taken: `strategies.buffers`); a strategy whose
  replicas stay equal without it (DDP broadcasts rank 0's buffers before each forward that follows a training
  one) or that holds no replicas (one device, pipeline stages) does nothing.

`PlainParallelism` is what a strategy that splits nothing does (Lightning's DDP or one device, Ray's DDP);
eoscale's strategies mix it in and override what they do differently. A new strategy is a Lightning strategy
with this mixin and the methods it changes: no task or loader changes (ARCHITECTURE.md, "where a change goes").
Tasks get the protocol of any strategy, Lightning's own included, from `eoscale.train.strategies.resolve`.
The data loader (`eoscale.data.datamodule.data_parallel`, a layer below) calls `data_parallel()` by this name.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor, nn


class DataParallel(NamedTuple):
    """This rank's place among the ranks that take different batches."""

    rank: int
    size: int
    group: Any = None  # their process group; None: every rank of the world is a replica of its own


@runtime_checkable
class Parallelism(Protocol):
    def data_parallel(self) -> DataParallel: ...

    def prepare_model(self, task: Any, model: nn.Module) -> nn.Module: ...

    def clip_gradients(self, module: nn.Module, max_norm: float) -> bool: ...

    def full_state(self, module: nn.Module) -> dict[str, Tensor]: ...

    def parameter_shape(self, parameter: Tensor) -> tuple[int, ...]: ...

    def stage_runner(self) -> Any | None: ...

    def sync_buffers(self, module: nn.Module, *, check: bool = False) -> None: ...


class PlainParallelism:
    """The protocol of a strategy that splits nothing: every rank a whole replica (DDP, one device)."""

    def data_parallel(self) -> DataParallel:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return DataParallel(torch.distributed.get_rank(), torch.distributed.get_world_size())
        return DataParallel(int(getattr(self, "global_rank", 0)), int(getattr(self, "world_size", 1)))

    def prepare_model(self, task: Any, model: nn.Module) -> nn.Module:
        return model

    def clip_gradients(self, module: nn.Module, max_norm: float) -> bool:
        return False

    def full_state(self, module: nn.Module) -> dict[str, Tensor]:
        # a DTensor (FSDP2, tensor parallel) is gathered whole on every rank: a collective
        return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in module.state_dict().items()}

    def parameter_shape(self, parameter: Tensor) -> tuple[int, ...]:
        return tuple(parameter.shape)

    def stage_runner(self) -> Any | None:
        return None

    def sync_buffers(self, module: nn.Module, *, check: bool = False) -> None:
        return None  # DDP keeps rank 0's buffers itself (`broadcast_buffers`); one device has no replicas
