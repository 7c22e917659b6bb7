"""Tensor parallelism × FSDP2 (2-D) for ViT backbones, through Lightning's `ModelParallelStrategy`.

The world is a `data_parallel_size × tensor_parallel_size` mesh. Inside each tensor-parallel group every
ViT block is split Megatron-style with DTensor's `parallelize_module`: `attn.qkv` and `mlp.fc1` column-wise,
`attn.proj` and `mlp.fc2` row-wise, so a block costs two all-reduces forward and two backward and each rank
computes `num_heads / tp` heads and `hidden / tp` MLP features. FSDP2 (`eoscale.train.strategies.fsdp.shard_model`)
then shards every block over the data-parallel dimension (`parallelize_and_shard`, the strategy's
`prepare_model`); what is not in a block (patch embedding, norms,
the decoder) is replicated over the tensor-parallel ranks and sharded over the data-parallel ones.

A column-wise `qkv` hands rank r a contiguous block of output rows, but timm stores them `[q; k; v]`: rank 0
would get all of q and half of k. So the rows are reordered first, `[q_0 k_0 v_0 | q_1 k_1 v_1 | ...]` where
`x_r` are the rows of heads `r·H/tp .. (r+1)·H/tp`, and each block's attention runs with `H/tp` heads.
Checkpoints keep timm's order: `TensorParallelStrategy` writes `qkv` (and its AdamW moments) back in the
model's own order and reorders them again when it resumes, so a sharded checkpoint consolidates and predicts
like any other and resumes under any `tensor_parallel_size`.

    trainer:
      strategy:
        class_path: eoscale.train.strategies.tp.TensorParallelStrategy
        init_args: {tensor_parallel_size: 2}     # data_parallel_size: the rest of the world
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh

from eoscale._compat.lightning import (
    checkpoint_metadata_file,
    distributed_checkpoint_load,
    is_sharded_checkpoint,
)
from eoscale.errors import InputError
from eoscale.models import shardable_blocks
from eoscale.train.strategies.fsdp import FSDP2Strategy, shard_model

HEAD_ORDERED = "_eoscale_tp_size"  # set on a reordered `qkv` Linear: its tensor-parallel size


@contextlib.contextmanager
def _quiet_redistribute() -> Iterator[None]:
    """Gathering over the 2-D mesh makes DTensor warn that it takes two collectives (it does; these are a
    clip norm per step and a checkpoint's qkv): not the user's concern."""
    log = logging.getLogger("torch.distributed.tensor._redistribute")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def head_order(rows: int, tp: int) -> Tensor:
    """Row `i` of the reordered qkv is row `order[i]` of timm's `[q; k; v]` (`rows` = 3 × embed dim)."""
    return torch.arange(rows).view(3, tp, rows // (3 * tp)).transpose(0, 1).reshape(-1)


def model_order(rows: int, tp: int) -> Tensor:
    """The inverse of `head_order`: row `i` of timm's qkv is row `model_order[i]` of the reordered one."""
    return torch.argsort(head_order(rows, tp))


def check_divisible(model: nn.Module, tp: int) -> list[nn.Module]:
    """The ViT blocks of `model`, after checking each splits into `tp` whole shares; else one-line InputError."""
    fix = "pick a tensor_parallel_size that divides it (or 1: configs/strategy/fsdp.yaml)"
    try:
        blocks = shardable_blocks(model)
    except InputError as err:
        raise InputError(f"cannot use tensor parallelism here: {err}") from None
    for i, block in enumerate(blocks):
        attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        layers = [getattr(attn, "qkv", None), getattr(attn, "proj", None), getattr(mlp, "fc1", None),
                  getattr(mlp, "fc2", None)]
        if not all(type(layer) is nn.Linear for layer in layers) or not hasattr(attn, "num_heads"):
            raise InputError(f"tensor parallelism splits plain ViT blocks (attn.qkv/proj, mlp.fc1/fc2 Linear layers); "
                             f"block {i} is a {type(block).__name__} without them (LoRA adapters, another backbone): "
                             "use configs/strategy/fsdp.yaml")
        if not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity) or getattr(attn, "gate", None) is not None:
            raise InputError(f"block {i}'s attention normalises or gates its heads together, which tensor "
                             "parallelism cannot split: use configs/strategy/fsdp.yaml")
        if attn.num_heads % tp:
            raise InputError(f"block {i} has {attn.num_heads} attention heads, not divisible by "
                             f"tensor_parallel_size={tp}: {fix}")
        if mlp.fc1.out_features % tp:
            raise InputError(f"block {i}'s MLP has {mlp.fc1.out_features} hidden features, not divisible by "
                             f"tensor_parallel_size={tp}: {fix}")
    return blocks


def parallelize_vit(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Split every ViT block of `model` over the 1-D `tp_mesh`, in place: qkv rows in head order, H/tp heads."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = tp_mesh.size()
    for block in check_divisible(model, tp):
        attn = block.attn
        qkv = attn.qkv
        order = head_order(qkv.out_features, tp).to(qkv.weight.device)
        with torch.no_grad():
            qkv.weight.copy_(qkv.weight[order])
            if qkv.bias is not None:
                qkv.bias.copy_(qkv.bias[order])
        setattr(qkv, HEAD_ORDERED, tp)
        attn.num_heads //= tp
        if hasattr(attn, "attn_dim"):  # timm ≥ 1.0.20 reshapes the heads' output by it
            attn.attn_dim //= tp
        parallelize_module(block, tp_mesh, {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
                                            "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()})
    return model


def parallelize_and_shard(model: nn.Module, mesh: DeviceMesh, *, strategy: Any = None,
                          precision: str | None = None) -> nn.Module:
    """Split the ViT blocks over the mesh's `tensor_parallel` dimension, then shard them with FSDP2 over its
    `data_parallel` one (`eoscale.train.strategies.fsdp.shard_model`), in place."""
    parallelize_vit(model, mesh["tensor_parallel"])  # the blocks split first, then sharded by FSDP2
    return shard_model(model, mesh["data_parallel"], strategy=strategy, precision=precision)


def head_ordered_keys(module: nn.Module) -> dict[str, int]:
    """State-dict keys of `module` held in head order, with their tensor-parallel size."""
    keys = {}
    for name, sub in module.named_modules():
        tp = getattr(sub, HEAD_ORDERED, None)
        if tp:
            for pname, _ in sub.named_parameters(recurse=False):
                keys[f"{name}.{pname}" if name else pname] = tp
    return keys


def clip_grad_norm(parameters: Any, max_norm: float) -> Tensor:
    """`torch.nn.utils.clip_grad_norm_` (2-norm) for gradients on several device meshes: the tensor-parallel
    blocks' on the (data, tensor) mesh, the rest on the data-parallel one. Returns the total norm."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    by_mesh: dict[Any, list[Tensor]] = {}
    for g in grads:
        by_mesh.setdefault(g.device_mesh if isinstance(g, DTensor) else None, []).append(g)
    squares = []
    for group in by_mesh.values():
        with _quiet_redistribute():
            norm = torch.nn.utils.get_total_norm(group, 2.0)
            norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
        squares.append(norm.float().square())
    total = torch.stack(squares).sum().sqrt() if squares else torch.zeros(())
    coef = min(1.0, max_norm / (float(total) + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total


# -- checkpoints in the model's own row order ------------------------------------------------------------
def _reorder(t: Tensor, order: Tensor, like: Tensor | None = None) -> Tensor:
    """`t` with its rows taken in `order`; a DTensor is gathered, reordered and laid out again: as `like`
    (a parameter of the live model), else sharded by rows over all its mesh dimensions (what DCP saves)."""
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    if not isinstance(t, DTensor):
        return t[order.to(t.device)]
    with _quiet_redistribute():
        full = t.full_tensor()[order.to(t.device)]
    if like is not None and isinstance(like, DTensor):
        return distribute_tensor(full, like.device_mesh, like.placements, src_data_rank=None)
    return distribute_tensor(full, t.device_mesh, [Shard(0)] * t.device_mesh.ndim, src_data_rank=None)


def to_model_order(state: dict[str, Any], keys: dict[str, int]) -> dict[str, Any]:
    """A model state dict (or an optimizer's per-parameter state, keyed alike) with head-ordered rows put back."""
    out = dict(state)
    for key, tp in keys.items():
        value = state.get(key)
        if isinstance(value, Tensor):
            out[key] = _reorder(value, model_order(value.shape[0], tp))
        elif isinstance(value, dict):  # an optimizer's state of one parameter: exp_avg, exp_avg_sq, step
            out[key] = {k: _reorder(v, model_order(v.shape[0], tp)) if isinstance(v, Tensor) and v.ndim else v
                        for k, v in value.items()}
    return out


def to_head_order(state: dict[str, Any], keys: dict[str, int], like: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `to_model_order`, laid out as the live tensors of `like`."""
    out = dict(state)
    for key, tp in keys.items():
        value, live = state.get(key), like.get(key)
        if isinstance(value, Tensor):
            out[key] = _reorder(value, head_order(value.shape[0], tp), live)
        elif isinstance(value, dict):
            out[key] = {k: _reorder(v, head_order(v.shape[0], tp), live[k]) if isinstance(v, Tensor) and v.ndim else v
                        for k, v in value.items()}
    return out


def _optimizer_in_model_order(state: dict[str, Any], keys: dict[str, int]) -> dict[str, Any]:
    return {**state, "state": to_model_order(state["state"], keys)}


class TensorParallelStrategy(FSDP2Strategy):
    """FSDP2 over `data_parallel_size` ranks × tensor parallelism over `tensor_parallel_size` ranks.

    Args:
        tensor_parallel_size: ranks that split each ViT block (keep it within a node: every block all-reduces
            its activations four times a step over them); must divide the heads and MLP width.
        data_parallel_size: the rest of the world ("auto": world size / tensor_parallel_size).
        Other arguments as `FSDP2Strategy`. Checkpoints are sharded folders (`save_distributed_checkpoint`).
    """

    def prepare_model(self, task: Any, model: nn.Module) -> nn.Module:
        return parallelize_and_shard(model, self.device_mesh, strategy=self, precision=task.trainer.precision)

    def clip_gradients(self, module: nn.Module, max_norm: float) -> bool:
        # tensor parallelism leaves gradients on two device meshes, which torch's clip_grad_norm_ cannot mix
        clip_grad_norm(module.parameters(), max_norm)
        return True

    def __init__(self, tensor_parallel_size: int = 2, data_parallel_size: int | str = "auto", **kwargs: Any) -> None:
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise InputError(f"tensor_parallel_size={tensor_parallel_size!r}: give a positive whole number")
        if kwargs.get("save_distributed_checkpoint") is False:
            raise InputError("save_distributed_checkpoint=false is not supported with tensor parallelism: leave it "
                             "true and make one file with 'eoscale consolidate DIR OUT.ckpt'")
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size, **kwargs)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        return to_model_order(super().lightning_module_state_dict(), head_ordered_keys(self.model))

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        return _optimizer_in_model_order(super().optimizer_state(optimizer), head_ordered_keys(self.model))

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Resume from a sharded folder written in the model's row order, into this run's head order."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(self.broadcast(checkpoint_path))
        keys = head_ordered_keys(self.model)
        if not is_sharded_checkpoint(path):
            raise InputError(f"{str(path)!r} is not a sharded checkpoint folder: a tensor-parallel run resumes from "
                             "the folder 'eoscale fit' wrote (a consolidated file starts a run with finetune_from)")
        module = self.model
        live = get_model_state_dict(module)
        saved = {"state_dict": to_model_order(live, keys)}
        distributed_checkpoint_load(saved, path)
        module.load_state_dict(to_head_order(saved["state_dict"], keys, live),
                               strict=self.lightning_module.strict_loading)
        for idx, optimizer in enumerate(self.optimizers):
            live = get_optimizer_state_dict(module, optimizer)
            saved = {f"optimizer_{idx}": _optimizer_in_model_order(live, keys)}
            distributed_checkpoint_load(saved, path)
            state = saved[f"optimizer_{idx}"]
            state = {**state, "state": to_head_order(state["state"], keys, live["state"])}
            set_optimizer_state_dict(module, optimizer, optim_state_dict=state, options=StateDictOptions(cpu_offload=True))
        return torch.load(checkpoint_metadata_file(path), weights_only=weights_only)
