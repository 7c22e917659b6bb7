"""Replicas' buffers (`eoscale.train.strategies.buffers`, issue 45): BatchNorm's running statistics made rank 0's on
every rank, and a checkpoint refused when any buffer differs across ranks. The fits that hold it end to end under
DDP and FSDP2 are `tests/train/test_fusion.py` and `tests/train/test_temporal.py` (slow)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from timm.layers import BatchNormAct2d
from torch import nn
from torchvision.ops import FrozenBatchNorm2d

from eoscale.errors import InputError
from eoscale.train.strategies.buffers import ReplicatedBuffers, running_statistics
from eoscale.train.strategies.fsdp import FSDP2Strategy, MeshParallelism
from eoscale.train.strategies.pipeline import PipelineStrategy
from eoscale.train.strategies.tp import TensorParallelStrategy
from eoscale.train.strategies.zero import ZeroStrategy
from tests.processes import torchrun


@pytest.mark.slow  # two ranks started under torchrun: about 20 s on this shared machine
def test_two_ranks_statistics_are_refused_apart_and_synced_to_rank_0s(tmp_path: Path):
    # guards the save-time check (a mismatch must raise, naming the buffers) and the sync (rank 0's values, every
    # buffer of every BatchNorm, the int64 batch counts included)
    result = torchrun("tests.train.buffer_ranks", [str(tmp_path)], tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for rank in ranks:
        assert rank["refused"] is not None and "4 buffer(s) differ between rank 0 and rank 1" in rank["refused"]
        assert "1.running_mean, 1.running_var, 4.running_mean" in rank["refused"]
    assert not torch.equal(ranks[0]["before"]["1.running_mean"], ranks[1]["before"]["1.running_mean"])
    for key, value in ranks[0]["before"].items():
        assert torch.equal(ranks[0]["after"][key], value) and torch.equal(ranks[1]["after"][key], value), key
    assert int(ranks[1]["after"]["1.num_batches_tracked"]) == 2
    assert torch.equal(ranks[0]["output"], ranks[1]["output"])


def test_running_statistics_are_those_a_forward_updates():
    model = nn.Sequential(nn.BatchNorm2d(2), BatchNormAct2d(3), nn.SyncBatchNorm(4), nn.InstanceNorm2d(5),
                          nn.InstanceNorm2d(6, track_running_stats=True), FrozenBatchNorm2d(7), nn.BatchNorm1d(8, track_running_stats=False))
    sizes = [b.numel() for b in running_statistics(model)]
    # mean, variance and the batch count of each tracking layer; neither FrozenBatchNorm2d nor untracked norms
    assert sizes == [2, 2, 1, 3, 3, 1, 4, 4, 1, 6, 6, 1]


def test_the_strategies_that_hold_replicated_buffers_keep_them_equal():
    for cls in (FSDP2Strategy, TensorParallelStrategy, ZeroStrategy):
        assert issubclass(cls, ReplicatedBuffers), cls
    assert not issubclass(PipelineStrategy, ReplicatedBuffers)  # stages hold disjoint buffers
    ReplicatedBuffers().sync_buffers(nn.BatchNorm2d(2), check=True)  # one process: nothing to sync


def test_lightnings_own_model_parallel_strategy_refuses_batchnorm_in_one_line():
    # guards the refusal: Lightning's ModelParallelStrategy has no hook where eoscale could sync the statistics
    lent = MeshParallelism(SimpleNamespace(_device_mesh=object()))
    with pytest.raises(InputError, match="BatchNorm layers.*configs/strategy/fsdp.yaml") as err:
        lent.prepare_model(None, nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
    assert "\n" not in str(err.value)
