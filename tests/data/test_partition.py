"""Partition: every tile of a split (or of a training subset) once per epoch across ranks and workers, within the
documented bound; training subsets of the exact size, in strips, from the seed."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from eoscale.data.partition import (
    SUBSET_RUN,
    epoch_runs,
    left_out,
    num_batches,
    plan_epoch,
    range_tiles,
    rank_length,
    shard_runs,
    split_runs,
    take,
    train_subset,
    without,
    worker_batches,
)


def test_shard_runs_cut_a_split_at_shard_boundaries():
    assert shard_runs(5, 21, 8).tolist() == [[5, 8], [8, 16], [16, 21]]
    assert shard_runs(8, 16, 8).tolist() == [[8, 16]]
    assert shard_runs(3, 3, 8).shape == (0, 2)


def test_take_wraps_around_for_padding():
    runs = np.array([[10, 13], [0, 2]])  # the sequence 10 11 12 0 1
    assert take(runs, 1, 3).tolist() == [[11, 13], [0, 1]]
    assert take(runs, 4, 3).tolist() == [[1, 2], [10, 12]]


def test_worker_batches_are_contiguous_and_cover_the_rank():
    for batches, workers in itertools.product(range(0, 12), range(1, 5)):
        blocks = [worker_batches(batches, w, workers) for w in range(workers)]
        assert blocks[0][0] == 0 and blocks[-1][1] == batches
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
        assert max(b - a for a, b in blocks) - min(b - a for a, b in blocks) <= 1


def _training_length(n: int, world: int, batch: int) -> int:
    """n // world tiles a rank, one fewer where the last batch would hold a single tile."""
    length = n // world
    return length - 1 if batch > 1 and length > batch and length % batch == 1 else length


def test_a_training_epoch_never_ends_in_a_batch_of_one():
    # 33 tiles a rank at batch 8 (the Slurm DDP job's case): 32, four whole batches; evaluation keeps all 33
    assert rank_length(66, 2, pad=False, batch_size=8) == 32 and rank_length(66, 2, pad=True, batch_size=8) == 33
    assert rank_length(34, 2, pad=False, batch_size=8) == 17 - 1 and rank_length(1, 1, pad=False, batch_size=8) == 1


def _epoch(split, *, world, workers, batch, epoch=0, seed=0, shuffle=True, shard=8):
    """Tiles per rank (in read order) and batches per rank, as the stream would make them."""
    tiles, batches = {}, {}
    for rank in range(world):
        got, count = [], 0
        for worker in range(workers):
            plan = plan_epoch(split, shard, batch_size=batch, rank=rank, world_size=world, worker=worker,
                              workers=workers, seed=seed, epoch=epoch, shuffle=shuffle, pad=not shuffle)
            ids = [t for a, b in plan.ranges for t in range(a, b)]
            assert len(ids) == plan.tiles <= plan.batches * batch
            assert plan.tiles > (plan.batches - 1) * batch or plan.batches == 0
            got += ids
            count += plan.batches
            assert plan.rank_batches == num_batches(rank_length(range_tiles(split), world, pad=not shuffle,
                                                                batch_size=batch), batch)
        tiles[rank], batches[rank] = got, count
    return tiles, batches


@pytest.mark.parametrize("world,workers,batch", list(itertools.product([1, 2, 3], [1, 2, 3], [1, 4, 8])))
@pytest.mark.parametrize("split", [(5, 101), (0, 64), (3, 10)])
def test_training_epoch_delivers_each_tile_at_most_once_and_drops_fewer_than_world_size(split, world, workers, batch):
    n = split[1] - split[0]
    tiles, batches = _epoch(split, world=world, workers=workers, batch=batch)
    delivered = [t for ids in tiles.values() for t in ids]
    assert len(delivered) == len(set(delivered))
    assert set(delivered) <= set(range(*split))
    per_rank = _training_length(n, world, batch)
    assert n - len(delivered) == n - world * per_rank and n % world <= world - 1
    assert len(set(batches.values())) == 1  # equal steps on every rank
    assert batches[0] == num_batches(per_rank, batch)
    assert all(len(ids) % batch != 1 or batch == 1 or len(ids) <= batch for ids in tiles.values())


@pytest.mark.parametrize("world,workers,batch", list(itertools.product([1, 2, 3], [1, 2], [1, 4, 8])))
def test_evaluation_epoch_delivers_every_tile_and_repeats_fewer_than_world_size(world, workers, batch):
    split = (5, 101)
    tiles, batches = _epoch(split, world=world, workers=workers, batch=batch, shuffle=False)
    counts = Counter(t for ids in tiles.values() for t in ids)
    assert set(counts) == set(range(*split))
    assert sum(c - 1 for c in counts.values()) == -(-96 // world) * world - 96 <= world - 1
    assert len(set(batches.values())) == 1
    again, _ = _epoch(split, world=world, workers=workers, batch=batch, shuffle=False, epoch=3)
    assert again == tiles  # a fixed order


def test_order_changes_with_the_epoch_and_repeats_with_the_seed():
    first, _ = _epoch((0, 200), world=2, workers=2, batch=4, epoch=0)
    assert _epoch((0, 200), world=2, workers=2, batch=4, epoch=0)[0] == first
    assert _epoch((0, 200), world=2, workers=2, batch=4, epoch=1)[0] != first
    assert _epoch((0, 200), world=2, workers=2, batch=4, epoch=0, seed=1)[0] != first


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.33, 0.5, 0.999, 1.0])
@pytest.mark.parametrize("split", [(5, 101), (0, 845), (3, 10)])
def test_train_subset_has_the_exact_count_in_strips_of_the_split(split, fraction):
    ranges = train_subset(split, fraction, seed=4)
    n = split[1] - split[0]
    assert range_tiles(ranges) == round(fraction * n)
    assert (ranges[:, 0] < ranges[:, 1]).all() and (ranges[1:, 0] > ranges[:-1, 1]).all()  # sorted, disjoint, merged
    assert ranges.size == 0 or (split[0] <= ranges[0, 0] and ranges[-1, 1] <= split[1])
    if 0 < round(fraction * n) < n:
        # spatially coherent: runs of neighbouring tiles, not scattered single tiles
        assert (ranges[:, 1] - ranges[:, 0]).mean() >= min(SUBSET_RUN, round(fraction * n)) / 2
    assert np.array_equal(train_subset(split, fraction, seed=4), ranges)  # deterministic
    if 0 < round(fraction * n) < n and n > 50:
        assert not np.array_equal(train_subset(split, fraction, seed=5), ranges)  # ... from the seed


def test_train_subset_refuses_fractions_outside_zero_to_one():
    for fraction in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="not in"):
            train_subset((0, 10), fraction, seed=0)


@pytest.mark.parametrize("world,workers,batch", list(itertools.product([1, 2, 3], [1, 2], [1, 4, 8])))
def test_a_list_of_ranges_is_delivered_once_and_each_shard_read_in_one_go(world, workers, batch):
    split = train_subset((5, 301), 0.3, seed=1)
    assert len(split) > 3
    wanted = {t for a, b in split for t in range(a, b)}
    n = len(wanted)
    tiles, batches = _epoch(split, world=world, workers=workers, batch=batch)
    delivered = [t for ids in tiles.values() for t in ids]
    assert len(delivered) == len(set(delivered)) and set(delivered) <= wanted
    assert n - len(delivered) == n - world * _training_length(n, world, batch)
    assert len(set(batches.values())) == 1 and batches[0] == num_batches(_training_length(n, world, batch), batch)
    evaluation, _ = _epoch(split, world=world, workers=workers, batch=batch, shuffle=False)
    assert {t for ids in evaluation.values() for t in ids} == wanted
    # the epoch's order keeps the runs of a shard together: one shard file read per shard (and worker edge)
    runs = epoch_runs(split_runs(split, 8), seed=0, epoch=2, shuffle=True, shard_tiles=8)
    shards = (runs[:, 0] // 8).tolist()
    assert sorted(shards) == (split_runs(split, 8)[:, 0] // 8).tolist()
    assert len({s for s in shards}) == sum(1 for a, b in zip([None] + shards, shards, strict=False) if a != b)


@pytest.mark.parametrize("split", [(0, 179), train_subset((5, 403), 0.45, seed=3)], ids=["range", "subset"])
@pytest.mark.parametrize("world,workers,batch", [(2, 2, 4), (3, 2, 4), (1, 3, 2), (4, 1, 8)])
def test_the_tiles_training_leaves_out_rotate_from_epoch_to_epoch(split, world, workers, batch):
    """Issue 32, fault 2 (179 train tiles, 2 ranks × 2 workers, batch 4: 3 left out an epoch). They were the last
    tiles of the epoch's shuffled order, the ends of whichever shard came last, so a shard's first tiles were
    never left out and its last ones again and again. Now `left_out` moves through the split in store order:
    each epoch delivers the rest exactly once, every tile is trained on in any two consecutive epochs, and none
    is left out twice within ⌊n / d⌋ consecutive epochs."""
    wanted = {t for a, b in np.asarray(split).reshape(-1, 2) for t in range(a, b)}
    n = len(wanted)
    d = n - world * _training_length(n, world, batch)
    assert d > 0  # the cases where something is left out
    epochs, missed = n // d, Counter()
    delivered_before = None
    for epoch in range(epochs + 1):
        tiles, batches = _epoch(split, world=world, workers=workers, batch=batch, epoch=epoch, seed=5)
        delivered = [t for ids in tiles.values() for t in ids]
        assert len(delivered) == len(set(delivered)) == n - d and set(delivered) <= wanted
        assert len(set(batches.values())) == 1
        out = wanted - set(delivered)
        assert out == {t for a, b in left_out(split, world, pad=False, batch_size=batch, epoch=epoch)
                       for t in range(a, b)}
        if epoch < epochs:
            missed.update(out)
        if delivered_before is not None:
            assert delivered_before | set(delivered) == wanted  # any two consecutive epochs train on every tile
        delivered_before = set(delivered)
    assert max(missed.values()) == 1 and len(missed) == epochs * d


def test_without_cuts_ranges_out_of_a_split():
    split = np.array([[0, 10], [20, 30]])
    assert without(split, np.array([[25, 30], [8, 12]])).tolist() == [[0, 8], [20, 25]]
    assert without(split, np.zeros((0, 2), dtype=np.int64)).tolist() == split.tolist()
    assert left_out((0, 10), 3, pad=False, batch_size=1, epoch=4).tolist() == [[4, 5]]  # 1 out, at 4·1
    assert left_out((0, 10), 3, pad=True, batch_size=1, epoch=4).shape == (0, 2)
