"""A small scene gets a validation split (issue 46, item 7): when blocks of `--split-block` tiles leave a split that
asks for tiles without any, the split is dealt in smaller blocks (halved down to one tile); a store whose blocks deal
every split keeps its split exactly as before."""

from __future__ import annotations

import numpy as np
from affine import Affine

from eoscale.ingest.plan import _assign_splits, _cell_size, _ground_cells, make_plan

# the Zion scene's grid (Landsat 8, UTM 12N, 30 m: /work/shared/data/zion), at a 250 × 450 px window 600 px from its
# left edge: 3 × 7 tiles of 64 px, which 4-tile blocks dealt all to train ("train 21, val 0, test 0")
ZION = (Affine(30.0, 0.0, 301_905.0 + 600 * 30.0, 0.0, -30.0, 4_154_085.0), "EPSG:32612")


def _plan(windows: tuple[int, int], ground=ZION, split_block: int = 4):
    return make_plan([np.ones(windows, dtype=np.float32)], tile_size=64, stride=64, shard_tiles=256, min_valid=0.5,
                     fractions=(0.8, 0.1, 0.1), split_block=split_block, seed=0, grounds=[ground])


def test_a_small_scene_is_split_in_smaller_blocks_so_that_val_gets_tiles():
    plan = _plan((3, 7))
    counts = np.bincount(plan.split, minlength=3)
    assert counts.tolist() == [17, 2, 2] and plan.split_block == 1  # before: [21, 0, 0], no validation at all
    assert _plan((3, 7)).split.tolist() == plan.split.tolist()  # deterministic


def test_a_scene_whose_blocks_deal_every_split_keeps_its_split():
    plan = _plan((40, 40))
    assert plan.split_block == 4
    # the split as the blocks of 4 tiles deal it, computed from the plan's own pieces as before the fallback
    cells = _ground_cells(ZION, plan.row_off, plan.col_off, 64, _cell_size([ZION], 64, 4))
    blocks = np.unique(cells, axis=0, return_inverse=True)[1].ravel()
    np.testing.assert_array_equal(plan.split, _assign_splits(blocks, (0.8, 0.1, 0.1), 0))


def test_too_few_tiles_for_every_split_keep_the_best_dealing():
    plan = _plan((1, 3))  # three tiles: no block size deals all three splits; val first, then the largest blocks
    assert plan.split_block == 2 and np.bincount(plan.split, minlength=3).tolist() == [2, 1, 0]
    without_georeferencing = make_plan([np.ones((3, 7), dtype=np.float32)], tile_size=64, stride=64, shard_tiles=256,
                                       min_valid=0.5, fractions=(0.8, 0.1, 0.1), split_block=4, seed=0)
    assert without_georeferencing.split_block == 2  # a scene's own blocks, halved alike
    assert np.bincount(without_georeferencing.split, minlength=3).tolist() == [16, 4, 1]
