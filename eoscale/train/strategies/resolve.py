"""`parallelism(strategy)`: any Lightning strategy seen through eoscale's protocol (`strategies.protocol`)."""

from __future__ import annotations

from typing import Any

from eoscale._compat.lightning import device_mesh
from eoscale.train.strategies.protocol import Parallelism, PlainParallelism


class _Plain(PlainParallelism):
    """A Lightning strategy of its own (DDP, single device, Ray's DDP) seen through the protocol."""

    def __init__(self, strategy: Any) -> None:
        self.global_rank = int(getattr(strategy, "global_rank", 0))
        self.world_size = int(getattr(strategy, "world_size", 1))


def parallelism(strategy: Any) -> Parallelism:
    """`strategy` as the protocol: itself when it implements it, else the plain behaviour (None: one process)."""
    if isinstance(strategy, Parallelism):
        return strategy
    if device_mesh(strategy) is not None:  # Lightning's own ModelParallelStrategy: shard as eoscale's FSDP2 does
        from eoscale.train.strategies.fsdp import MeshParallelism

        return MeshParallelism(strategy)
    return _Plain(strategy)
