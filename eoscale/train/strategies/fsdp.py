"""Sharded data parallelism: FSDP2 (`fully_shard`) through Lightning's `ModelParallelStrategy`.

Lightning's `strategy="fsdp"` (FSDP1) refuses CPUs; `ModelParallelStrategy` runs FSDP2 on CPUs with gloo
(tests) and on GPUs with NCCL (production) alike. `FSDP2Strategy` is that strategy with pure data
parallelism as its default (the whole world in one data-parallel dimension, no tensor parallelism) and
the knobs of `shard_model`, which its `prepare_model` (the strategy protocol, called by every task on every
rank) applies:

    trainer:
      strategy:
        class_path: eoscale.train.strategies.fsdp.FSDP2Strategy
        init_args: {activation_checkpointing: false, reshard_after_forward: true}
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from eoscale._compat.lightning import device_mesh
from eoscale.errors import InputError
from eoscale.models import shardable_blocks
from eoscale.train.strategies.buffers import ReplicatedBuffers, running_statistics
from eoscale.train.strategies.protocol import DataParallel, PlainParallelism


class MeshParallelism(PlainParallelism):
    """The strategy protocol of FSDP2 over a device mesh (`data_parallel × tensor_parallel`, tensor parallel 1).

    `FSDP2Strategy` is one; `MeshParallelism(strategy)` lends the same behaviour to Lightning's own
    `ModelParallelStrategy` when a config names it."""

    def __init__(self, strategy: Any = None) -> None:
        self._lent_to = strategy

    def _strategy(self) -> Any:
        """The Lightning strategy: this one, or the one this behaviour is lent to."""
        return getattr(self, "_lent_to", None) or self

    def _mesh(self) -> DeviceMesh | None:
        return device_mesh(self._strategy())

    def data_parallel(self) -> DataParallel:
        mesh = self._mesh()
        if mesh is None:  # before the strategy made its mesh
            return super().data_parallel()
        sampler = self._strategy().distributed_sampler_kwargs
        # the ranks of a tensor-parallel group take the same batches: their data-parallel group is not the world
        group = mesh["data_parallel"].get_group() if mesh.ndim > 1 and mesh["tensor_parallel"].size() > 1 else None
        return DataParallel(int(sampler["rank"]), int(sampler["num_replicas"]), group)

    def prepare_model(self, task: Any, model: nn.Module) -> nn.Module:
        # ModelParallelStrategy refuses a LightningModule without `configure_model`: shard there, before the
        # optimizer exists (Lightning makes it later)
        mesh = self._mesh()
        if mesh is None:
            return model
        if not isinstance(self._strategy(), ReplicatedBuffers) and running_statistics(model):
            # Lightning's own strategy has no hook of eoscale's where the statistics are read or saved
            raise InputError(f"{type(model).__name__} has BatchNorm layers, whose running statistics Lightning's "
                             f"{type(self._strategy()).__name__} leaves to drift apart on each rank: use "
                             "configs/strategy/fsdp.yaml (eoscale.train.strategies.fsdp.FSDP2Strategy), which keeps "
                             "them equal")
        return shard_model(model, mesh, strategy=self._strategy(), precision=task.trainer.precision)


class FSDP2Strategy(ReplicatedBuffers, MeshParallelism, ModelParallelStrategy):
    """`ModelParallelStrategy` for FSDP2 alone: `data_parallel_size` defaults to the world size; every rank holds
    rank 0's BatchNorm statistics where they are read or saved (`eoscale.train.strategies.buffers`).

    Args:
        data_parallel_size: ranks that shard the model among them ("auto": all of them).
        tensor_parallel_size: 1 (tensor parallelism is `eoscale.train.strategies.tp.TensorParallelStrategy`'s).
        activation_checkpointing: recompute each block's activations in the backward pass (less memory,
            about a third more compute).
        reshard_after_forward: free the gathered parameters after each block's forward (ZeRO-3); `False`
            keeps them until the backward (ZeRO-2: more memory, less communication).
        save_distributed_checkpoint: write sharded checkpoints (one file per rank; resumable on any world
            size); `False` gathers a full single file on rank 0.
    """

    def __init__(
        self,
        data_parallel_size: int | Literal["auto"] = "auto",
        tensor_parallel_size: int = 1,
        *,
        activation_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        **kwargs: Any,
    ) -> None:
        ModelParallelStrategy.__init__(
            self,
            data_parallel_size=data_parallel_size,
            tensor_parallel_size=tensor_parallel_size,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            **kwargs,
        )
        self.activation_checkpointing = activation_checkpointing
        self.reshard_after_forward = reshard_after_forward

    def setup_environment(self) -> None:
        # num_nodes and the devices per node are known before the process group starts; the parent's
        # "auto" would mean one data-parallel group per node and tensor parallelism inside it
        world, tp = self.num_nodes * self.num_processes, int(self._tensor_parallel_size)
        if self._data_parallel_size == "auto":
            if world % tp:
                raise InputError(f"tensor_parallel_size={tp} does not divide the world size {world} (nodes × devices): "
                                 f"give a divisor of {world}, or more devices")
            self._data_parallel_size = world // tp
        if int(self._data_parallel_size) * tp != world:
            raise InputError(f"tensor_parallel_size={tp} × data_parallel_size={self._data_parallel_size} is not the "
                             f"world size {world} (nodes × devices): set sizes whose product is {world}")
        super().setup_environment()


def shard_model(model: nn.Module, mesh: DeviceMesh, *, strategy: Any = None, precision: str | None = None) -> nn.Module:
    """Wrap `model` with `fully_shard` block by block (ViT blocks, ResNet stages), then at the root.

    ModelParallelStrategy refuses a LightningModule without `configure_model`: this must run there, on
    every rank, after the process group exists and before Lightning builds the optimizer.
    Each block is its own all-gather/reduce-scatter unit, so only one block's full parameters live at a
    time. The root wrap takes what is left (stem, neck, decoder). Called on every rank with the same
    freshly initialised weights; the optimizer must be built after this (Lightning does so).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if "tensor_parallel" in (mesh.mesh_dim_names or ()):
        if mesh["tensor_parallel"].size() != 1:  # split first: TensorParallelStrategy.prepare_model
            raise InputError("FSDP2Strategy shards with FSDP only: set tensor_parallel_size=1, or use "
                             "configs/strategy/fsdp2_tp.yaml (eoscale.train.strategies.tp.TensorParallelStrategy)")
        mesh = mesh["data_parallel"]
    try:
        blocks = shardable_blocks(model)
    except InputError as err:
        raise InputError(f"cannot use FSDP here: {err}") from None
    checkpointing = bool(getattr(strategy, "activation_checkpointing", False))
    reshard = bool(getattr(strategy, "reshard_after_forward", True))
    # bf16 parameters for compute and fp32 gradient reduction on GPUs when asked for bf16; on CPUs fp32
    # (bf16 matmuls there are slow and gloo's reductions gain nothing)
    on_gpu = mesh.device_type == "cuda"
    bf16 = on_gpu and precision is not None and str(precision).startswith("bf16")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    for block in blocks:
        if checkpointing:
            _checkpoint(block)
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    # the root's parameters are needed again at once for the backward: no point freeing them
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return model


def _checkpoint(block: nn.Module) -> None:
    """Activation checkpointing of one block, in place (the module keeps its name and parameters)."""
    from torch.distributed._composable import checkpoint

    checkpoint(block)


def local_fraction(model: nn.Module) -> float:
    """The share of `model`'s parameter elements this rank holds (about 1/W under FSDP)."""
    local = total = 0
    for p in model.parameters():
        total += p.numel()
        local += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return local / max(total, 1)
