"""Who reads which tiles: a split's tiles dealt to ranks, then to DataLoader workers, epoch by epoch.

A split is one contiguous range of tiles `[start, stop)` (see `eoscale.schema`); shard boundaries cut it into
*shard runs*, the units read in one go. Each epoch:

1. **order**: the shard runs are permuted with `rng(seed, epoch)` for training (kept in store order for
   validation, test and prediction), giving one sequence of the split's `n` tiles, the same on every rank;
2. **ranks**: rank `r` of `W` takes positions `[r·L, (r+1)·L)` of that sequence. Training uses `L = n // W` and
   drops the last `n mod W` tiles of the epoch's sequence (at most `W − 1` tiles, different ones each epoch);
   evaluation uses `L = ceil(n / W)` and wraps around, so the first `L·W − n` tiles (at most `W − 1`) are
   delivered twice and metrics see every tile. With `W = 1` nothing is dropped or repeated;
3. **batches**: every rank has `ceil(L / batch_size)` batches (only the last may be short), so every rank
   takes the same number of steps and DDP's collectives never wait on a rank that has run dry;
4. **workers**: a rank's batches are dealt to its `K` DataLoader workers as contiguous blocks of whole
   batches (worker `w` gets `B // K` or one more), so each worker reads long runs and no batch straddles two
   workers. The DataLoader takes batches from its workers in turn, so the rank still yields all of them.

Everything here is pure arithmetic on integers: the same inputs give the same plan on every rank and worker.
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


def epoch_runs(runs: np.ndarray, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The shard runs in the order of this epoch: permuted by `rng(seed, epoch)`, or as they are."""
    if not shuffle:
        return runs
    return runs[np.random.default_rng([seed, epoch]).permutation(len(runs))]


def rank_length(total: int, world_size: int, *, pad: bool) -> int:
    """How many tiles each rank gets: `total // W` (dropping the rest) or `ceil(total / W)` (repeating some)."""
    return -(-total // world_size) if pad else total // world_size


def num_batches(length: int, batch_size: int) -> int:
    """Batches for `length` tiles; only the last one may be short."""
    return -(-length // batch_size)


def worker_batches(batches: int, worker: int, workers: int) -> tuple[int, int]:
    """The contiguous block `[first, stop)` of a rank's batches that worker `worker` of `workers` makes."""
    per, extra = divmod(batches, workers)
    first = worker * per + min(worker, extra)
    return first, first + per + (worker < extra)


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
    split: tuple[int, int],
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
    """What worker `worker` of rank `rank` reads in `epoch` (see the module docstring for the rules)."""
    runs = epoch_runs(shard_runs(*split, shard_tiles), seed=seed, epoch=epoch, shuffle=shuffle)
    length = rank_length(split[1] - split[0], world_size, pad=pad)
    rank_batches = num_batches(length, batch_size)
    first, stop = worker_batches(rank_batches, worker, workers)
    lo, hi = first * batch_size, min(stop * batch_size, length)
    ranges = take(runs, rank * length + lo, hi - lo)
    return EpochPlan(ranges=ranges, batches=stop - first, rank_batches=rank_batches)
