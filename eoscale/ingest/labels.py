"""Label rasters: reprojected onto each scene's grid with nearest neighbour, codes remapped to class indices.

Land-cover products rarely share the imagery's grid (ESA WorldCover is EPSG:4326, CORINE EPSG:3035 at
100 m), so each label raster is warped onto the scene's reference grid. Where several label rasters cover
a scene, the first one (in the order given) with data at a pixel wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.warp import reproject, transform_bounds

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.errors import InputError
from eoscale.raster.sources import Scene, check_crs, open_raster


@dataclass(frozen=True)
class LabelRaster:
    path: str
    crs: CRS
    bounds: tuple[float, float, float, float]
    nodata: float | None


def describe_label_rasters(paths: list[str]) -> list[LabelRaster]:
    """Open and check each label raster (one band, a CRS) without reading its pixels."""
    rasters = []
    for path in paths:
        with open_raster(path) as src:
            crs = check_crs(path, src.crs)
            if src.count != 1:
                raise InputError(f"label raster {path!r} has {src.count} bands: it must have one band of class codes")
            if not np.issubdtype(np.dtype(src.dtypes[0]), np.integer):
                raise InputError(f"label raster {path!r} holds {src.dtypes[0]} values: class codes must be integers")
            rasters.append(LabelRaster(path, crs, tuple(src.bounds), src.nodata))
    return rasters


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def labels_for_scene(scene: Scene, rasters: list[LabelRaster]) -> list[LabelRaster]:
    """The label rasters that overlap `scene`; an error names the scene when none does."""
    hits = []
    for raster in rasters:
        scene_bounds = transform_bounds(scene.crs, raster.crs, *scene.bounds, densify_pts=21)
        if _overlaps(scene_bounds, raster.bounds):
            hits.append(raster)
    if not hits:
        raise InputError(
            f"no label raster overlaps scene {scene.id!r} ({scene.paths[0]}): checked "
            f"{', '.join(r.path for r in rasters)}; give a label raster that covers it"
        )
    return hits


# pixels of the scene grid warped at a time: ~10 bytes each (the warped codes, masks, indices), so a label task
# holds ~20 MB whatever the scene's area (a whole 10,980² Sentinel-2 tile at once took ~2.5 GB)
STRIP_PIXELS = 1 << 21


def strip_rows(width: int, pixels: int = STRIP_PIXELS) -> int:
    """Rows of a strip of `width` pixels that holds about `pixels` pixels (at least one row)."""
    return max(1, pixels // max(width, 1))


def reproject_labels(scene: Scene, rasters: list[LabelRaster], classes: ClassTable, *,
                     pixels: int = STRIP_PIXELS) -> Iterator[tuple[int, np.ndarray, dict[int, int]]]:
    """Class indices on the scene's grid (uint8, `IGNORE_INDEX` where unknown), in strips of whole rows from the
    top: (first row, the strip, counts of its unmapped codes). An error names the scene when no strip holds label
    data (raised after the last strip).

    Strips span the whole width: GDAL warps a destination row by row, and a row's source coordinates depend
    only on the row (its approximate transformer interpolates along the row), so strips give the codes of one
    warp of the whole scene while holding only `pixels` pixels at a time."""
    step = strip_rows(scene.width, pixels)
    seen_data = False
    sources = [open_raster(r.path) for r in rasters]
    try:
        for row in range(0, scene.height, step):
            height = min(step, scene.height - row)
            transform = scene.transform @ Affine.translation(0, row)
            codes = None
            for raster, src in zip(rasters, sources, strict=True):
                # int32 destination holds every integer code type GDAL warps; -1 marks "no data here"
                warped = np.full((height, scene.width), -1, dtype=np.int32)
                reproject(
                    source=rasterio.band(src, 1),
                    destination=warped,
                    src_transform=src.transform,
                    src_crs=src.crs,
                    src_nodata=raster.nodata,
                    dst_transform=transform,
                    dst_crs=scene.crs,
                    dst_nodata=-1,
                    resampling=Resampling.nearest,
                )
                if codes is None:
                    codes = warped
                else:  # the first raster with data at a pixel wins
                    np.copyto(codes, warped, where=codes == -1)
            have = codes != -1
            seen_data = seen_data or bool(have.any())
            labels = class_indices(codes, classes, none=-1)
            values, counts = np.unique(codes[have & (labels == IGNORE_INDEX)], return_counts=True)
            yield row, labels, {int(v): int(c) for v, c in zip(values, counts, strict=True)}
    finally:
        for src in sources:
            src.close()
    if not seen_data:
        raise InputError(
            f"label raster(s) {', '.join(r.path for r in rasters)} hold no data over scene {scene.id!r}: "
            f"give a label raster that covers it"
        )


def class_indices(codes: np.ndarray, classes: ClassTable, *, none: int | None = None) -> np.ndarray:
    """The class index of every code (uint8), `IGNORE_INDEX` for codes not in the table (and for the value
    `none`), whatever their sign or size: a sorted search, not a lookup table indexed by the code (a negative
    code wrapped around such a table into a class, and one huge code made it gigabytes long), except for codes
    that all lie in 0..65535 (land-cover products' uint8/uint16), where a table of at most 65,536 entries gives
    the same indices several times faster."""
    table = np.asarray(classes.codes, dtype=np.int64)
    if codes.size and np.issubdtype(codes.dtype, np.integer):
        low, high = int(codes.min()), int(codes.max())
        if low >= min(0, none if none is not None else 0) and high < 65536:
            lookup = np.full(high - low + 1, IGNORE_INDEX, dtype=np.uint8)
            inside = (table >= low) & (table <= high) & (table != (none if none is not None else low - 1))
            # the first of duplicate codes wins, as in the sorted search (a stable sort keeps table order)
            for index in np.flatnonzero(inside)[::-1]:
                lookup[table[index] - low] = index
            return lookup[codes - low] if low else lookup[codes]
    order = np.argsort(table, kind="stable")
    ranked = table[order]
    position = np.clip(np.searchsorted(ranked, codes), 0, len(ranked) - 1)
    found = ranked[position] == codes
    if none is not None:
        found &= codes != none
    return np.where(found, order[position], IGNORE_INDEX).astype(np.uint8)
