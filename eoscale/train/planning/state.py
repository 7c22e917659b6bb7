"""What one rank holds of the training state, measured: parameter, gradient and optimizer-state bytes.

The counterpart of `eoscale.train.planning.plan`'s predictions, read from the live objects of each strategy:

- DDP, one device: the module's parameters and their `.grad` (DDP's buckets, when gradients are bucket views,
  are the same memory), and the torch optimizer's state;
- FSDP2: the local shards of the DTensor parameters, gradients and optimizer state;
- DeepSpeed ZeRO: the engine's flat parameter groups (full under stage 1/2, this rank's partition under 3),
  its gradient partitions, and the optimizer's: the fp32 master partition (a copy even in fp32 under stage
  1/2; the parameters themselves under stage 3 in fp32) and the torch optimizer's state of it.

Each piece of memory counts once (by storage), in the first category that names it. Call it after a
backward and before the optimizer step (`on_before_optimizer_step`) of a step after the first, when
gradients and optimizer state both exist. Communication buffers (DDP's or ZeRO's buckets) are not state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

CATEGORIES = ("params", "grads", "optimizer")


@dataclass(frozen=True)
class StateBytes:
    """Bytes of training state on one rank."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"total": self.total}


def measure_state(module: nn.Module, optimizer: Any) -> StateBytes:
    """The state bytes this rank holds for `module` (a LightningModule or network) and its `optimizer`
    (torch's, or the DeepSpeed ZeRO optimizer Lightning hands back under `ZeroStrategy`)."""
    groups = _deepspeed_groups(optimizer) if _is_zero(optimizer) else _torch_groups(module, optimizer)
    seen: set[tuple[int, int]] = set()
    sizes = {}
    for category in CATEGORIES:
        total = 0
        for tensor in groups[category]:
            key = _storage_key(tensor)
            if key is not None and key not in seen:
                seen.add(key)
                total += key[1]
        sizes[category] = total
    return StateBytes(**sizes)


def _is_zero(optimizer: Any) -> bool:
    return hasattr(optimizer, "single_partition_of_fp32_groups") or hasattr(optimizer, "fp32_partitioned_groups_flat")


def _local(t: Tensor) -> Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _torch_groups(module: nn.Module, optimizer: Any) -> dict[str, list[Tensor]]:
    params = list(module.parameters())
    optimizer = getattr(optimizer, "optimizer", optimizer)  # Lightning's LightningOptimizer wraps torch's
    return {
        "params": [_local(p.detach()) for p in params],
        "grads": [_local(p.grad) for p in params if p.grad is not None],
        "optimizer": list(_state_tensors(optimizer)),
    }


def _deepspeed_groups(zero: Any) -> dict[str, list[Tensor]]:
    if hasattr(zero, "fp32_partitioned_groups_flat"):  # stage 3: everything partitioned
        params = list(zero.fp16_partitioned_groups_flat)
        grads = [zero.grad_partitions_flat_buffer]
        master = list(zero.fp32_partitioned_groups_flat)
    else:  # stages 1 and 2: full flat parameters, partitioned gradients and master weights
        params = list(zero.bit16_groups_flat)
        averaged = zero.averaged_gradients
        grads = [g for group in (averaged.values() if isinstance(averaged, dict) else averaged) if group
                 for g in group if g is not None]
        master = list(zero.single_partition_of_fp32_groups)
    return {"params": params, "grads": grads, "optimizer": master + list(_state_tensors(zero.optimizer))}


def _state_tensors(optimizer: Any) -> Iterable[Tensor]:
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield _local(value)


def _storage_key(t: Tensor) -> tuple[int, int] | None:
    """(address, bytes) of the memory `t` uses; a view counts its own extent, so two views of one flat buffer
    (DeepSpeed's groups, DDP's buckets) add up to the buffer, not twice the buffer."""
    if t is None or t.device.type == "meta":
        return None
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return None
    return (t.data_ptr(), nbytes)
