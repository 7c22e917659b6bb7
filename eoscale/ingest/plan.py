"""The tiling plan: which windows of which scenes become tiles, their split, and their order in the store.

Tiles are full windows of `tile_size` pixels every `stride` pixels from the scene's top-left corner (a
remainder narrower than a tile at the right and bottom edges is left out). A window is kept when its valid
fraction on the scene's reference band reaches `min_valid`.

Splits are made of spatial blocks of ground, `split_block` tiles wide, so neighbouring tiles share a split and
validation does not leak through overlap or spatial autocorrelation. The blocks are cells of one map grid
shared by every scene (`GROUND_CRS`, an equal-area projection of the whole Earth), so two acquisitions of the
same place, on the same grid or in different CRSs, give the tiles over one piece of ground the same split: a
multi-date stack never trains on the ground it validates on. A tile belongs to the cell of its centre. Blocks
are shuffled with `seed` and dealt to splits so that each split's share of tiles comes close to its fraction.
A small scene holds few blocks, and dealing a handful of blocks can leave a split without any (a 250 × 450 px scene
at 64 px tiles: about 20 tiles in 4-tile blocks, often all of them train): then the blocks are halved (`split_block`
4, 2, 1 tiles wide) until every split of a positive fraction gets tiles, or the validation split at least (of equal
dealings, the largest blocks), and the plan says which block it used (`TilePlan.split_block`). Smaller blocks put
validation tiles beside training ones, so their scores read optimistic: better that than none, and ingest says so.
A store whose blocks deal every split keeps its split as it was.
Tiles are then ordered by (split, scene, row, column): each split is one contiguous range of tiles, which
readers stream shard by shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from affine import Affine
from pyproj import CRS, Transformer

from eoscale.store.schema import SPLITS

GROUND_CRS = "EPSG:6933"  # WGS 84 / EASE-Grid 2.0 Global: equal-area metres, defined everywhere on Earth
METRES_PER_DEGREE = 111_320.0  # the size of a pixel of a geographic CRS, at the equator, for the cell size only


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
    split_block: int = 0  # the block edge in tiles the split was dealt in: the one asked for, or a smaller one

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
    grounds: Sequence[tuple[Affine, object]] | None = None,
) -> TilePlan:
    """Plan the tiles of all scenes from each scene's window valid fractions (rows × columns of windows).

    `grounds` gives each scene's (transform, CRS), so that blocks are cells of the shared ground grid; without
    it (scenes with no georeferencing known here) a block is `split_block`² window positions of its own scene.
    """
    scene_ids, rows, cols, shapes = [], [], [], []
    dropped = 0
    for scene, fractions_grid in enumerate(window_valid):
        keep = fractions_grid >= min_valid
        dropped += int((~keep).sum())
        r, c = np.nonzero(keep)
        scene_ids.append(np.full(len(r), scene, dtype=np.int32))
        rows.append((r * stride).astype(np.int32))
        cols.append((c * stride).astype(np.int32))
        shapes.append(fractions_grid.shape)
    scene_arr = np.concatenate(scene_ids)
    row_arr, col_arr = np.concatenate(rows), np.concatenate(cols)
    best = None
    for block in _block_sizes(split_block):
        if grounds is None:
            blocks = [_scene_blocks(scene, rows[scene] // stride, cols[scene] // stride, shape[1], block)
                      for scene, shape in enumerate(shapes)]
        else:
            cell = _cell_size(grounds, tile_size, block)
            blocks = [_ground_cells(grounds[scene], rows[scene], cols[scene], tile_size, cell)
                      for scene in range(len(shapes))]
        block_arr = np.unique(np.concatenate(blocks), axis=0, return_inverse=True)[1].ravel()
        split_arr = _assign_splits(block_arr, fractions, seed)
        score = _dealt(split_arr, fractions)
        if best is None or score > best[0]:
            best = (score, block, split_arr)
        if score == (True, sum(f > 0 for f in fractions)):  # every split that asks for tiles has some
            break
    _, used, split_arr = best
    order = np.lexsort((col_arr, row_arr, scene_arr, split_arr))
    return TilePlan(
        scene=scene_arr[order],
        row_off=row_arr[order],
        col_off=col_arr[order],
        split=split_arr[order],
        tile_size=tile_size,
        shard_tiles=shard_tiles,
        dropped_nodata=dropped,
        split_block=used,
    )


def _block_sizes(split_block: int) -> list[int]:
    """The block edges tried, largest first: `split_block`, then halved down to one tile."""
    sizes = [split_block]
    while sizes[-1] > 1:
        sizes.append(sizes[-1] // 2)
    return sizes


def _dealt(split: np.ndarray, fractions: tuple[float, float, float]) -> tuple[bool, int]:
    """How well a split deals the tiles: whether validation got any (when it asks for a share), and how many of the
    splits that ask for a share got tiles."""
    counts = np.bincount(split, minlength=len(fractions))
    val = SPLITS.index("val")
    return (bool(counts[val] > 0 or fractions[val] == 0),
            int(sum(1 for f, n in zip(fractions, counts, strict=True) if f > 0 and n > 0)))


def _scene_blocks(scene: int, r: np.ndarray, c: np.ndarray, window_cols: int, block: int) -> np.ndarray:
    """Each tile's block of its own scene (scenes without georeferencing): (scene, `block`² window positions)."""
    n_block_cols = -(-window_cols // block)
    return np.stack([np.full(len(r), scene), r // block * n_block_cols + c // block], 1)


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


def _cell_size(grounds: Sequence[tuple[Affine, object]], tile_size: int, split_block: int) -> float:
    """The side of a ground cell in metres: `split_block` tiles of the finest scene's pixels."""
    sizes = []
    for transform, crs in grounds:
        pixel = float(np.hypot(transform.a, transform.d))
        sizes.append(pixel * METRES_PER_DEGREE if CRS.from_user_input(crs).is_geographic else pixel)
    return max(min(sizes) * tile_size * split_block, 1e-6)


def _ground_cells(ground: tuple[Affine, object], row_off: np.ndarray, col_off: np.ndarray, tile_size: int,
                  cell: float) -> np.ndarray:
    """The (column, row) of the ground-grid cell under each tile's centre."""
    transform, crs = ground
    x, y = transform @ (col_off + tile_size / 2, row_off + tile_size / 2)
    to_ground = Transformer.from_crs(CRS.from_user_input(crs), CRS.from_user_input(GROUND_CRS), always_xy=True)
    gx, gy = to_ground.transform(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    return np.stack([np.floor(np.asarray(gx) / cell), np.floor(np.asarray(gy) / cell)], 1).astype(np.int64)

