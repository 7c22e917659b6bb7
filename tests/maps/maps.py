"""Small land-cover maps written directly (no model): class codes, the EOSCALE_CLASSES/EOSCALE_NODATA tags that
`eoscale predict` writes (`eoscale.infer.outputs.map_tags`), a real CRS and transform; and a "truth" raster that
differs from a map in known places."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import from_origin

from eoscale.classes import ClassTable, LandCoverClass

TABLE = ClassTable((
    LandCoverClass(10, "Tree cover", "#006400"),
    LandCoverClass(30, "Grassland", "#ffff4c"),
    LandCoverClass(40, "Cropland", "#f096ff"),
    LandCoverClass(80, "Permanent water bodies", "#0064c8"),
))
NODATA = 0
ORIGIN = (310_000.0, 5_650_000.0)  # UTM 32N


def blocky_codes(height: int, width: int, *, seed: int = 0, nodata_rows: int = 5) -> np.ndarray:
    """Blocks of the four classes, water rare (a class of about 5 % of the pixels), a nodata band on top."""
    rows = (np.arange(height) + 3 * seed) // 23
    cols = (np.arange(width) + 5 * seed) // 31
    index = np.add.outer(rows, cols) % 3  # trees, grass, crops
    codes = np.asarray(TABLE.codes, dtype=np.uint8)[index]
    codes[height // 2: height // 2 + max(1, height // 20), :] = 80  # a river
    codes[:nodata_rows] = NODATA
    return codes


def write_map(path: Path, codes: np.ndarray, *, crs: str = "EPSG:32632", resolution: float = 10.0,
              origin: tuple[float, float] = ORIGIN, table: ClassTable = TABLE, tags: bool = True,
              nodata: int = NODATA) -> Path:
    """A tiled GeoTIFF of `codes` with the tags of an eoscale map (or none, `tags=False`)."""
    from eoscale.infer.outputs import MapEncoding, map_tags

    height, width = codes.shape
    with rasterio.open(path, "w", driver="GTiff", height=height, width=width, count=1, dtype=codes.dtype.name,
                       nodata=nodata, crs=crs, transform=from_origin(*origin, resolution, resolution), tiled=True,
                       blockxsize=64, blockysize=64, compress="deflate") as dst:
        dst.write(codes, 1)
        if tags:
            dataset, band = map_tags(table, MapEncoding.from_table(table), {})
            dataset["EOSCALE_NODATA"] = str(nodata)
            dst.update_tags(**dataset)
            dst.update_tags(1, **band)
    return path


def truth_of(codes: np.ndarray, *, seed: int = 1, error_rate: float = 0.15) -> np.ndarray:
    """`codes` with a fraction of its valid pixels changed to another class (the map's errors, seeded)."""
    rng = np.random.default_rng(seed)
    truth = codes.copy()
    valid = codes != NODATA
    wrong = valid & (rng.random(codes.shape) < error_rate)
    others = np.asarray(TABLE.codes, dtype=codes.dtype)
    truth[wrong] = others[rng.integers(0, len(others), int(wrong.sum()))]
    return truth
