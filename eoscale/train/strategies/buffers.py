"""Replicas' buffers: BatchNorm's running statistics equal on every rank, and checked when a checkpoint is taken.

In training mode a BatchNorm normalises by the batch's own statistics and only *updates* its running mean and
variance, each rank from its own batches. A strategy that keeps a whole copy of those buffers on every rank must
also keep them equal, or the replicas drift apart: FSDP2's `fully_shard` shards parameters only and DeepSpeed
broadcasts parameters once, at the start (measured: fusion ResNet outputs up to 0.13 apart after 4 steps of FSDP2).
Validation then mixes models, the calibration averages the temperatures of different models and the checkpoint
holds whichever rank saved. `ReplicatedBuffers` (mixed into `FSDP2Strategy`, `TensorParallelStrategy` and
`ZeroStrategy`) implements the protocol's `sync_buffers` as DDP keeps them: rank 0's values on every rank
(`broadcast_running_statistics`), where they are read or saved: before validation, test and prediction, at the end
of training, and when a checkpoint is taken, which also checks that every buffer agrees (`check_buffers_equal`).
DDP broadcasts rank 0's buffers itself before each forward that follows a training one; pipeline stages hold
disjoint buffers: neither needs it (`PlainParallelism.sync_buffers` does nothing).

Rank 0's statistics, not SyncBatchNorm. torch's SyncBatchNorm cannot run on CPUs at all (no CPU kernel of
`batch_norm_stats`), so it could not serve the gloo ranks eoscale runs on CPUs, and it changes what is trained
(statistics of the global batch) away from DDP and one process. `eoscale bench bnsync` measures the choice (FSDP2 on
2 gloo CPU ranks: no sync, DDP's broadcast before each forward, this module's broadcast before evaluating, and
SyncBatchNorm's collectives re-implemented on CPU; step times and how far the ranks end apart, in
benchmarks/bnsync.json): the three broadcasts leave the ranks' outputs identical at the cost of no sync within the
noise, SyncBatchNorm's collectives cost more a step. Broadcasting where the statistics are read gives the running
statistics DDP's broadcast before every forward gives (rank 0's, updated from rank 0's batches: training mode never
reads them), with no collective a step.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn


class ReplicaMismatchError(RuntimeError):
    """The ranks' copies of a replicated buffer differ when a checkpoint is taken: a bug, not the user's."""


def _plain(tensor: Tensor | None) -> bool:
    """A buffer every rank holds whole (not None, not a DTensor, which keeps its own placement)."""
    return tensor is not None and not hasattr(tensor, "full_tensor")


def running_statistics(module: nn.Module) -> list[Tensor]:
    """The buffers that `module`'s forward updates in training mode: the running statistics (mean, variance, batch
    count) of every normalisation layer that tracks them (BatchNorm, SyncBatchNorm, InstanceNorm with
    `track_running_stats`; timm's BatchNormAct2d; not FrozenBatchNorm2d, which never updates them)."""
    return [b for m in module.modules()
            if getattr(m, "track_running_stats", False) and getattr(m, "running_mean", None) is not None
            for b in m.buffers(recurse=False) if _plain(b)]


def broadcast_running_statistics(module: nn.Module, *, src: int = 0, group: Any = None,
                                 device: torch.device | None = None) -> None:
    """Copy rank `src`'s running statistics of `module` into every rank's (a collective: every rank calls it).
    `device`: where the collective's tensors must be (NCCL: the rank's GPU); default: the buffers' own."""
    buffers = running_statistics(module)
    # one broadcast per dtype (float statistics, int64 batch counts), in the same order on every rank
    for dtype in sorted({b.dtype for b in buffers}, key=str):
        same = [b for b in buffers if b.dtype == dtype]
        flat = torch.cat([b.detach().reshape(-1).to(device or same[0].device) for b in same])
        dist.broadcast(flat, src, group=group)
        with torch.no_grad():
            for b, value in zip(same, flat.split([b.numel() for b in same]), strict=True):
                b.copy_(value.view_as(b))


def _digest(tensor: Tensor) -> int:
    """8 bytes of BLAKE2 over the tensor's bytes, as a signed int64."""
    data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def check_buffers_equal(module: nn.Module, *, group: Any = None, device: torch.device | None = None) -> None:
    """Raise `ReplicaMismatchError` unless every buffer of `module` that each rank holds whole is bit-identical on
    every rank (a collective: an all-gather of one checksum a buffer; `device` as `broadcast_running_statistics`)."""
    named = [(name, b) for name, b in module.named_buffers() if _plain(b)]
    if not named:
        return
    digests = torch.tensor([_digest(b) for _, b in named], dtype=torch.int64, device=device or named[0][1].device)
    gathered = [torch.empty_like(digests) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, digests, group=group)
    for rank, other in enumerate(gathered[1:], start=1):
        differ = [named[i][0] for i in torch.nonzero(other != gathered[0]).flatten().tolist()]
        if differ:
            raise ReplicaMismatchError(
                f"{len(differ)} buffer(s) differ between rank 0 and rank {rank} when saving a checkpoint "
                f"({', '.join(differ[:3])}{', …' if len(differ) > 3 else ''}): the strategy did not keep the replicas "
                "equal (eoscale.train.strategies.buffers); this is a bug in eoscale, please report it")


class ReplicatedBuffers:
    """The protocol's `sync_buffers` for a Lightning strategy whose ranks each hold every buffer and do not keep
    them equal themselves (FSDP2, FSDP2 × tensor parallelism, DeepSpeed ZeRO), and the Lightning strategy hooks
    that call it where the running statistics are read or saved. Mixed in before the protocol's other methods."""

    def sync_buffers(self, module: nn.Module, *, check: bool = False) -> None:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        device = getattr(self, "root_device", None)
        broadcast_running_statistics(module, device=device)
        if check:
            check_buffers_equal(module, device=device)

    def on_validation_start(self) -> None:
        super().on_validation_start()
        self.sync_buffers(self.lightning_module)

    def on_test_start(self) -> None:
        super().on_test_start()
        self.sync_buffers(self.lightning_module)

    def on_predict_start(self) -> None:
        super().on_predict_start()
        self.sync_buffers(self.lightning_module)

    def on_train_end(self) -> None:
        super().on_train_end()
        self.sync_buffers(self.lightning_module)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        # every rank builds the checkpoint (DCP writes each replicated buffer from the rank it picks; ZeRO from rank 0)
        self.sync_buffers(self.lightning_module, check=True)
        return super().lightning_module_state_dict()
