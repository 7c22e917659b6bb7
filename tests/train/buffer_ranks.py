"""Two gloo ranks whose BatchNorm statistics drift apart, then are checked and synced by
`eoscale.train.strategies.buffers` (`tests/train/test_buffers.py` reads what each rank writes).

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.train.buffer_ranks OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from eoscale.train.strategies.buffers import (
    ReplicaMismatchError,
    broadcast_running_statistics,
    check_buffers_equal,
)


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same weights on both ranks
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1), nn.BatchNorm2d(2))
    model.register_buffer("fixed", torch.arange(3.0))  # a buffer no forward changes: equal on both ranks
    with torch.no_grad():  # each rank its own batches: the running statistics drift apart
        for _ in range(2):
            model(torch.randn(4, 3, 8, 8) * (1 + rank) + rank)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        check_buffers_equal(model)
        refused = None
    except ReplicaMismatchError as err:
        refused = str(err)
    broadcast_running_statistics(model)
    check_buffers_equal(model)  # raises if the sync left any buffer apart
    probe = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        output = model.eval()(probe)
    torch.save({"before": before, "after": model.state_dict(), "refused": refused, "output": output},
               Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
