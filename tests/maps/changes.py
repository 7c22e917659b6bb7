"""Two dates' land-cover maps of one place with known changes (forest lost to cropland, grassland built over), written
as eoscale class maps (`tests.maps.maps.write_map`: class codes, EOSCALE_CLASSES/EOSCALE_NODATA tags, UTM 32N)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eoscale.classes import ClassTable, LandCoverClass

TABLE = ClassTable((
    LandCoverClass(10, "Tree cover", "#006400"),
    LandCoverClass(30, "Grassland", "#ffff4c"),
    LandCoverClass(40, "Cropland", "#f096ff"),
    LandCoverClass(50, "Built-up", "#fa0000"),
    LandCoverClass(80, "Permanent water bodies", "#0064c8"),
))
NODATA = 0
TREES, GRASS, CROPS, BUILT, WATER = TABLE.codes


@dataclass(frozen=True)
class ChangePair:
    before: np.ndarray  # map A's codes
    after: np.ndarray  # map B's codes, on A's grid
    forest_loss: np.ndarray  # bool: trees in A, cropland in B
    new_built: np.ndarray  # bool: grassland in A, built-up in B

    def transitions(self) -> dict[tuple[int, int], int]:
        """(from code, to code) → pixels, where both maps have a class."""
        valid = (self.before != NODATA) & (self.after != NODATA)
        pairs, counts = np.unique(np.stack([self.before[valid], self.after[valid]]), axis=1, return_counts=True)
        return {(int(a), int(b)): int(n) for (a, b), n in zip(pairs.T, counts, strict=True)}


def change_pair(height: int = 120, width: int = 150, *, seed: int = 0) -> ChangePair:
    """Blocks of trees, grass and crops with a river (seeded); in the later map a clearing (trees → cropland) and a
    new district (grassland → built-up). Map A has no data on its top rows, map B none on its left columns."""
    rng = np.random.default_rng(seed)
    rows = (np.arange(height) + rng.integers(0, 20)) // 17
    cols = (np.arange(width) + rng.integers(0, 20)) // 23
    before = np.asarray([TREES, GRASS, CROPS], dtype=np.uint8)[np.add.outer(rows, cols) % 3]
    before[height // 2: height // 2 + 4] = WATER
    after = before.copy()
    clearing = np.zeros(before.shape, dtype=bool)
    clearing[height // 5: height // 5 + 30, width // 3: width // 3 + 40] = True
    forest_loss = clearing & (before == TREES)
    after[forest_loss] = CROPS
    district = np.zeros(before.shape, dtype=bool)
    district[-35:-5, -50:-8] = True
    new_built = district & (before == GRASS)
    after[new_built] = BUILT
    before[:4] = NODATA
    after[:, :3] = NODATA
    valid = (before != NODATA) & (after != NODATA)
    return ChangePair(before, after, forest_loss & valid, new_built & valid)
