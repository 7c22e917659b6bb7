"""The tiling plan: which windows of which scenes become tiles, their split, and their order in the store.

Tiles are full windows of `tile_size` pixels every `stride` pixels from the scene's top-left corner (a
remainder narrower than a tile at the right and bottom edges is left out). A window is kept when its valid
fraction on the scene's reference band reaches `min_valid`.

Splits are made of spatial blocks of `split_block`×`split_block` tile positions, so neighbouring tiles share
a split and validation does not leak through overlap or spatial autocorrelation. Blocks are shuffled with
`seed` and dealt to splits so that each split's share of tiles comes close to its fraction.
Tiles are then ordered by (split, scene, row, column): each split is one contiguous range of tiles, which
readers stream shard by shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eoscale.schema import SPLITS


@dataclass(frozen=True)
class TilePlan:
    """Per-tile arrays, in store order, and how they are grouped into shards."""

    scene: np.ndarray  # int32
    row_off: np.ndarray  # int32
    col_off: np.ndarray  # int32
    split: np.ndarray  # int8, index into SPLITS
    tile_size: int
    shard_tiles: int
    dropped_nodata: int  # windows under min_valid

    def __len__(self) -> int:
        return len(self.scene)

    @property
    def num_shards(self) -> int:
        return -(-len(self) // self.shard_tiles)

    def shard_range(self, shard: int) -> tuple[int, int]:
        start = shard * self.shard_tiles
        return start, min(start + self.shard_tiles, len(self))

    def split_ranges(self) -> dict[str, list[int]]:
        ranges = {}
        for index, name in enumerate(SPLITS):
            where = np.flatnonzero(self.split == index)
            ranges[name] = [int(where[0]), int(where[-1]) + 1] if len(where) else [0, 0]
        return ranges


def window_offsets(length: int, tile_size: int, stride: int) -> np.ndarray:
    """Offsets of the full windows along one axis."""
    return np.arange(0, length - tile_size + 1, stride, dtype=np.int32)


def window_valid_fraction(valid: np.ndarray, tile_size: int, stride: int) -> np.ndarray:
    """Valid fraction of every window of the tiling, from a boolean pixel mask (summed-area table)."""
    rows = window_offsets(valid.shape[0], tile_size, stride)
    cols = window_offsets(valid.shape[1], tile_size, stride)
    table = np.zeros((valid.shape[0] + 1, valid.shape[1] + 1), dtype=np.int64)
    np.cumsum(np.cumsum(valid, axis=0, dtype=np.int64), axis=1, out=table[1:, 1:])
    r0, c0 = rows[:, None], cols[None, :]
    r1, c1 = r0 + tile_size, c0 + tile_size
    sums = table[r1, c1] - table[r0, c1] - table[r1, c0] + table[r0, c0]
    return (sums / float(tile_size * tile_size)).astype(np.float32)


def make_plan(
    window_valid: list[np.ndarray],
    *,
    tile_size: int,
    stride: int,
    shard_tiles: int,
    min_valid: float,
    fractions: tuple[float, float, float],
    split_block: int,
    seed: int,
) -> TilePlan:
    """Plan the tiles of all scenes from each scene's window valid fractions (rows × columns of windows)."""
    scene_ids, rows, cols, blocks = [], [], [], []
    dropped = 0
    block_key = 0
    for scene, fractions_grid in enumerate(window_valid):
        keep = fractions_grid >= min_valid
        dropped += int((~keep).sum())
        r, c = np.nonzero(keep)
        n_block_cols = -(-fractions_grid.shape[1] // split_block)
        n_blocks = -(-fractions_grid.shape[0] // split_block) * n_block_cols
        scene_ids.append(np.full(len(r), scene, dtype=np.int32))
        rows.append((r * stride).astype(np.int32))
        cols.append((c * stride).astype(np.int32))
        blocks.append(block_key + (r // split_block) * n_block_cols + c // split_block)
        block_key += n_blocks
    scene_arr = np.concatenate(scene_ids)
    row_arr, col_arr, block_arr = np.concatenate(rows), np.concatenate(cols), np.concatenate(blocks)
    split_arr = _assign_splits(block_arr, fractions, seed)
    order = np.lexsort((col_arr, row_arr, scene_arr, split_arr))
    return TilePlan(
        scene=scene_arr[order],
        row_off=row_arr[order],
        col_off=col_arr[order],
        split=split_arr[order],
        tile_size=tile_size,
        shard_tiles=shard_tiles,
        dropped_nodata=dropped,
    )


def _assign_splits(block: np.ndarray, fractions: tuple[float, float, float], seed: int) -> np.ndarray:
    """Deal shuffled blocks to splits: each block goes where the midpoint of its tiles falls in the
    cumulative fractions, so split shares track the fractions to within one block."""
    unique, counts = np.unique(block, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(unique))
    bounds = np.cumsum(fractions)
    total = counts.sum()
    split_of_block = np.empty(len(unique), dtype=np.int8)
    seen = 0
    for i in order:
        mid = (seen + counts[i] / 2) / total
        split_of_block[i] = min(int(np.searchsorted(bounds, mid, side="right")), len(fractions) - 1)
        seen += counts[i]
    return split_of_block[np.searchsorted(unique, block)]
