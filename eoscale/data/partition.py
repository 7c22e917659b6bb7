"""Who reads which tiles: a split's tiles dealt to ranks, then to DataLoader workers, epoch by epoch.

A split is one contiguous range of tiles `[start, stop)` (see `eoscale.schema`), or, for a training subset
(`train_subset`), a sorted list of disjoint ranges; shard boundaries cut them into *shard runs*, the units read
in one go. Each epoch:

0. **left out** (training only): every rank takes the same `L` tiles (below), so an epoch trains on `L·W` of the
   split's `n` tiles and leaves out `d = n − L·W`: `n mod W` (at most `W − 1`), and one a rank more where `L`
   would end in a batch of one (`rank_length`). Which ones rotates (`left_out`): epoch `e` leaves out the `d`
   tiles at positions `[e·d, e·d + d)` (mod `n`) of the split in store order, so a tile is left out once every
   `n / d` epochs, none twice within `⌊n / d⌋` consecutive epochs, and every tile is trained on in any two
   consecutive epochs (while `d ≤ n / 2`). (Before, the last `d` tiles of the epoch's shuffled sequence were
   left out: the tails of whichever shard came last, so the tiles at the start of a shard were never left out
   and those at its end were, again and again.) The rest are each delivered exactly once;
1. **order**: the shards are permuted with `rng(seed, epoch)` for training, each carrying its runs along in
   store order, so that a shard file is read once per epoch even when a subset holds several runs of it
   (validation, test and prediction keep store order), giving one sequence of the epoch's tiles, the
   same on every rank;
2. **ranks**: rank `r` of `W` takes positions `[r·L, (r+1)·L)` of that sequence. Training uses `L = n // W`, or
   one less where that would end in a batch of one, and its sequence holds `L·W` tiles (step 0);
   evaluation uses `L = ceil(n / W)` and wraps around, so the first `L·W − n` tiles (at most `W − 1`) are
   delivered twice and metrics see every tile. With `W = 1` nothing is left out or repeated (unless `n` would
   end in a batch of one: then one tile, rotating as above);
3. **batches**: every rank has `ceil(L / batch_size)` batches (only the last may be short), so every rank
   takes the same number of steps and DDP's collectives never wait on a rank that has run dry;
4. **workers**: a rank's batches are dealt to its `K` DataLoader workers as contiguous blocks of whole
   batches (worker `w` gets `B // K` or one more), so each worker reads long runs and no batch straddles two
   workers. The DataLoader takes batches from its workers in turn, so the rank still yields all of them.

Everything here is pure arithmetic on integers: the same inputs give the same plan on every rank and worker.

`train_subset` picks the tiles that `TileDataModule(train_fraction=f)` trains on: short runs of neighbouring
tiles (tiles are stored scene by scene, row by row, so a run is a strip of one row of tiles, or the end of one
row and the start of the next), drawn with `rng(seed)`, `round(f · n)` tiles in all. Strips keep the subset
spatially coherent, as labels drawn on a map are, rather than scattered single tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def shard_runs(start: int, stop: int, shard_tiles: int) -> np.ndarray:
    """The tile range `[start, stop)` cut at shard boundaries: an (R, 2) array of `[run_start, run_stop)`."""
    if stop <= start:
        return np.zeros((0, 2), dtype=np.int64)
    first = start // shard_tiles
    bounds = np.arange(first + 1, -(-stop // shard_tiles), dtype=np.int64) * shard_tiles
    edges = np.concatenate([[start], bounds, [stop]]).astype(np.int64)
    return np.stack([edges[:-1], edges[1:]], axis=1)


def split_runs(split, shard_tiles: int) -> np.ndarray:
    """The ranges of a split (`(start, stop)`, or a sorted list of disjoint `[start, stop)` ranges) cut at
    shard boundaries: an (R, 2) array of runs in store order."""
    parts = [shard_runs(int(a), int(b), shard_tiles) for a, b in as_ranges(split)]
    return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)


def as_ranges(split) -> np.ndarray:
    """`(start, stop)` or a list of `[start, stop)` ranges as an (R, 2) int64 array."""
    return np.asarray(split, dtype=np.int64).reshape(-1, 2)


def range_tiles(split) -> int:
    """How many tiles the ranges of a split hold."""
    ranges = as_ranges(split)
    return int((ranges[:, 1] - ranges[:, 0]).clip(min=0).sum())


def epoch_runs(runs: np.ndarray, *, seed: int, epoch: int, shuffle: bool, shard_tiles: int) -> np.ndarray:
    """The shard runs in the order of this epoch: their shards permuted by `rng(seed, epoch)` (the runs of a
    shard stay together, in store order), or as they are."""
    if not shuffle or len(runs) == 0:
        return runs
    shard = runs[:, 0] // shard_tiles
    firsts = np.flatnonzero(np.concatenate([[True], shard[1:] != shard[:-1]]))
    groups = np.split(np.arange(len(runs)), firsts[1:])
    order = np.random.default_rng([seed, epoch]).permutation(len(groups))
    return runs[np.concatenate([groups[i] for i in order])]


SUBSET_RUN = 8  # tiles per run of a training subset: a strip of about 8 neighbouring tiles of one row


def train_subset(split, fraction: float, *, seed: int, run: int = SUBSET_RUN) -> np.ndarray:
    """The `round(fraction · n)` tiles of a split to train on, as a sorted (R, 2) array of disjoint ranges:
    the split cut into runs of `run` neighbouring tiles, a random choice of them by `rng(seed)` (the last one
    chosen shortened to make the count exact), neighbouring runs merged. `fraction=1` gives the whole split."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction={fraction} is not in (0, 1]")
    ranges = as_ranges(split)
    if fraction == 1:
        return ranges
    cuts = np.concatenate([np.stack([np.arange(a, b, run), np.minimum(np.arange(a, b, run) + run, b)], axis=1)
                           for a, b in ranges] or [np.zeros((0, 2), dtype=np.int64)]).astype(np.int64)
    want = round(fraction * range_tiles(ranges))
    # a key of its own, apart from the epochs' rng([seed, epoch]): the subset stays the same every epoch
    order = np.random.default_rng([seed, 0x5B5E7]).permutation(len(cuts))
    sizes = cuts[order, 1] - cuts[order, 0]
    count = int(np.searchsorted(np.cumsum(sizes), want, side="left")) + 1 if want else 0
    chosen = cuts[order[:count]].copy()
    if count:
        chosen[-1, 1] -= int(sizes[:count].sum()) - want  # the last run chosen, shortened to the exact count
    chosen = chosen[np.argsort(chosen[:, 0])]
    merged: list[list[int]] = []
    for a, b in chosen.tolist():
        if merged and merged[-1][1] == a:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return np.asarray(merged, dtype=np.int64).reshape(-1, 2)


def rank_length(total: int, world_size: int, *, pad: bool, batch_size: int) -> int:
    """How many tiles each rank gets: `ceil(total / W)` (repeating some), or for training `total // W` (dropping
    the rest) and one fewer where that would end the epoch in a batch of one tile: BatchNorm cannot train on
    one tile whose feature maps have shrunk to 1×1 (32 px tiles through a ResNet), and one tile is no batch."""
    if pad:
        return -(-total // world_size)
    length = total // world_size
    return length - 1 if batch_size > 1 and length > batch_size and length % batch_size == 1 else length


def num_batches(length: int, batch_size: int) -> int:
    """Batches for `length` tiles; only the last one may be short."""
    return -(-length // batch_size)


def worker_batches(batches: int, worker: int, workers: int) -> tuple[int, int]:
    """The contiguous block `[first, stop)` of a rank's batches that worker `worker` of `workers` makes."""
    per, extra = divmod(batches, workers)
    first = worker * per + min(worker, extra)
    return first, first + per + (worker < extra)


def worker_delivered(delivered: int, worker: int, workers: int) -> int:
    """How many of worker `worker`'s batches are among the first `delivered` batches its rank yielded.

    The DataLoader takes one batch from each worker in turn, starting with worker 0, and drops a worker from
    the turns once it has run dry; `worker_batches` gives the extra batches to the first workers, so no worker
    runs dry before the last round and the first `delivered` batches are whole rounds plus workers
    `0 .. delivered mod workers − 1` (tests/data/test_resume.py checks it against the DataLoader)."""
    return delivered // workers + (worker < delivered % workers)


def left_out(split, world_size: int, *, pad: bool, batch_size: int, epoch: int) -> np.ndarray:
    """The store ranges of the tiles that `epoch` of training leaves out (step 0 of the module docstring):
    `d = n − L·W` tiles from position `epoch·d` (mod `n`) of the split's tiles in store order; none when padding."""
    total = range_tiles(split)
    count = 0 if pad else total - world_size * rank_length(total, world_size, pad=pad, batch_size=batch_size)
    if count <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    return take(as_ranges(split), (epoch * count) % total, count)


def without(split, out: np.ndarray) -> np.ndarray:
    """The sorted disjoint ranges of `split` less the tiles of the ranges `out` (disjoint, any order)."""
    ranges = as_ranges(split)
    if len(out) == 0:
        return ranges
    cuts = out[np.argsort(out[:, 0])].tolist()
    kept: list[tuple[int, int]] = []
    for a, b in ranges.tolist():
        for c, d in cuts:
            if d <= a or c >= b:
                continue
            if c > a:
                kept.append((a, c))
            a = max(a, d)
        if a < b:
            kept.append((a, b))
    return np.asarray(kept, dtype=np.int64).reshape(-1, 2)


def take(runs: np.ndarray, offset: int, length: int) -> np.ndarray:
    """Positions `[offset, offset + length)` of the tile sequence that `runs` spell out, as store ranges.

    Positions past the end wrap around to the start of the sequence (the padding of evaluation splits).
    """
    out = []
    sizes = runs[:, 1] - runs[:, 0]
    total = int(sizes.sum())
    if length <= 0 or total == 0:
        return np.zeros((0, 2), dtype=np.int64)
    ends = np.cumsum(sizes)
    position, remaining = offset % total, length
    while remaining > 0:
        i = int(np.searchsorted(ends, position, side="right"))
        into = position - (int(ends[i]) - int(sizes[i]))
        count = min(int(sizes[i]) - into, remaining)
        out.append((int(runs[i, 0]) + into, int(runs[i, 0]) + into + count))
        remaining -= count
        position = (position + count) % total
    return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True)
class EpochPlan:
    """One worker's share of one epoch: the store ranges it reads, in order, and the batches it makes."""

    ranges: np.ndarray  # (R, 2) [start, stop) tile ranges, each within one shard
    batches: int  # batches this worker yields
    rank_batches: int  # batches the whole rank yields (the same on every rank)

    @property
    def tiles(self) -> int:
        return int((self.ranges[:, 1] - self.ranges[:, 0]).sum())


def plan_epoch(
    split: tuple[int, int] | np.ndarray,
    shard_tiles: int,
    *,
    batch_size: int,
    rank: int,
    world_size: int,
    worker: int,
    workers: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    pad: bool,
) -> EpochPlan:
    """What worker `worker` of rank `rank` reads in `epoch` (see the module docstring for the rules); `split`
    is `(start, stop)` or a sorted list of disjoint ranges."""
    length = rank_length(range_tiles(split), world_size, pad=pad, batch_size=batch_size)
    kept = without(split, left_out(split, world_size, pad=pad, batch_size=batch_size, epoch=epoch))
    runs = epoch_runs(split_runs(kept, shard_tiles), seed=seed, epoch=epoch, shuffle=shuffle, shard_tiles=shard_tiles)
    rank_batches = num_batches(length, batch_size)
    first, stop = worker_batches(rank_batches, worker, workers)
    lo, hi = first * batch_size, min(stop * batch_size, length)
    ranges = take(runs, rank * length + lo, hi - lo)
    return EpochPlan(ranges=ranges, batches=stop - first, rank_batches=rank_batches)
