"""Value rasters (`ingest --targets`): per-pixel regression targets resampled onto each scene's grid.

A continuous variable (canopy height, tree cover fraction, biomass) is resampled by a rule for values, never
nearest-neighbour class codes: a raster coarser than the scene (or as fine) bilinearly, a finer one by the
average of the source pixels under each scene pixel. Each raster keeps its own nodata; pixels without a value
are NaN in the store's ``targets(tile, y, x)`` float32 (`eoscale.store.schema.TARGETS`). Where several rasters
cover a scene, the first one (in the order given) with a value at a pixel wins. A raster with a colour table, or
a class table given as a target, is refused: those hold classes (use --labels).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.warp import reproject, transform_bounds

from eoscale.cluster.heap import large_arrays_from_the_heap
from eoscale.errors import InputError
from eoscale.ingest.labels import STRIP_PIXELS, _overlaps, strip_rows
from eoscale.raster.reader import gdal_cache
from eoscale.raster.sources import Scene, check_crs, open_raster

TABLE_SUFFIXES = (".csv", ".json", ".txt", ".qml", ".clr")


@dataclass(frozen=True)
class TargetRaster:
    path: str
    crs: CRS
    bounds: tuple[float, float, float, float]
    nodata: float | None
    resolution: tuple[float, float]  # pixel size in its CRS's units


def describe_target_rasters(paths: list[str]) -> list[TargetRaster]:
    """Open and check each value raster (one band of numbers, no colour table, a CRS) without reading its pixels."""
    rasters = []
    for path in paths:
        if Path(path).suffix.lower() in TABLE_SUFFIXES:
            raise InputError(f"--targets {path!r} is a table, not a value raster: a class table goes with --labels "
                             f"and --classes")
        with open_raster(path) as src:
            crs = check_crs(path, src.crs)
            if src.count != 1:
                raise InputError(f"value raster {path!r} has {src.count} bands: a target raster has one band of values")
            try:
                src.colormap(1)
                has_colours = True
            except ValueError:
                has_colours = False
            if has_colours:
                raise InputError(f"value raster {path!r} has a colour table: it holds classes, not values; give it "
                                 f"as --labels")
            if np.dtype(src.dtypes[0]).kind not in "iuf":
                raise InputError(f"value raster {path!r} holds {src.dtypes[0]} values: targets must be numbers")
            rasters.append(TargetRaster(path, crs, tuple(src.bounds), src.nodata, tuple(map(abs, src.res))))
    return rasters


def targets_for_scene(scene: Scene, rasters: list[TargetRaster]) -> list[TargetRaster]:
    """The value rasters that overlap `scene`; an error names the scene when none does."""
    hits = [r for r in rasters
            if _overlaps(transform_bounds(scene.crs, r.crs, *scene.bounds, densify_pts=21), r.bounds)]
    if not hits:
        raise InputError(
            f"no target raster overlaps scene {scene.id!r} ({scene.paths[0]}): checked "
            f"{', '.join(r.path for r in rasters)}; give a value raster that covers it"
        )
    return hits


def resampling_for(scene: Scene, raster: TargetRaster) -> Resampling:
    """Bilinear for a raster as coarse as the scene or coarser; the average of the source pixels for a finer one."""
    left, bottom, right, top = transform_bounds(raster.crs, scene.crs, *raster.bounds, densify_pts=21)
    with open_raster(raster.path) as src:
        size = min((right - left) / max(src.width, 1), (top - bottom) / max(src.height, 1))
    scene_size = min(abs(scene.transform.a), abs(scene.transform.e))
    return Resampling.average if size < scene_size * 0.999 else Resampling.bilinear


def reproject_targets(scene: Scene, rasters: list[TargetRaster], *,
                      pixels: int = STRIP_PIXELS) -> Iterator[tuple[int, np.ndarray]]:
    """Values on the scene's grid (float32, NaN where unknown), in strips of whole rows from the top (as
    `eoscale.ingest.labels.reproject_labels`); an error names the scene when no strip holds a value."""
    step = strip_rows(scene.width, pixels)
    seen = False
    rules = [resampling_for(scene, r) for r in rasters]
    sources = [open_raster(r.path) for r in rasters]
    try:
        for row in range(0, scene.height, step):
            height = min(step, scene.height - row)
            transform = scene.transform @ Affine.translation(0, row)
            values = None
            for raster, src, rule in zip(rasters, sources, rules, strict=True):
                warped = np.full((height, scene.width), np.nan, dtype=np.float32)
                reproject(source=rasterio.band(src, 1), destination=warped, src_transform=src.transform,
                          src_crs=src.crs, src_nodata=raster.nodata, dst_transform=transform, dst_crs=scene.crs,
                          dst_nodata=np.nan, resampling=rule)
                if values is None:
                    values = warped
                else:  # the first raster with a value at a pixel wins
                    np.copyto(values, warped, where=np.isnan(values))
            seen = seen or bool(np.isfinite(values).any())
            yield row, values
    finally:
        for src in sources:
            src.close()
    if not seen:
        raise InputError(f"target raster(s) {', '.join(r.path for r in rasters)} hold no value over scene "
                         f"{scene.id!r}: give a value raster that covers it")


def _path(progress: Path, index: int) -> Path:
    return progress / f"scene-{index:05d}.targets.npy"


def warp_targets(scene: Scene, index: int, rasters: list[TargetRaster], *, progress: str) -> int:
    """Write the scene's values on its grid to the progress folder (in strips, never held whole); returns the
    count of pixels with a value. Skipped when a resumed ingest finds them written."""
    large_arrays_from_the_heap()
    path = _path(Path(progress), index)
    done = path.with_name(path.name + ".json")
    if done.exists():
        return int(json.loads(done.read_text())["valid"])
    tmp = path.with_name(path.name + ".tmp")
    valid = 0
    try:
        with gdal_cache(), open(tmp, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.dtype(np.float32).str, "fortran_order": False,
                                                     "shape": (scene.height, scene.width)})
            for _, strip in reproject_targets(scene, rasters):
                valid += int(np.isfinite(strip).sum())
                f.write(strip.tobytes())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    done.write_text(json.dumps({"valid": valid}))
    return valid


def load_scene_targets(progress: Path, index: int) -> np.ndarray:
    """The scene's values on its grid, memory-mapped (shard writers slice their windows from it)."""
    return np.load(_path(progress, index), mmap_mode="r")


def target_moments(values: np.ndarray) -> np.ndarray:
    """(count, sum, sum of squares, min, max) of the finite values, float64: shards' summaries add up."""
    finite = values[np.isfinite(values)].astype(np.float64)
    if not finite.size:
        return np.array([0.0, 0.0, 0.0, np.inf, -np.inf])
    return np.array([finite.size, finite.sum(), np.square(finite).sum(), finite.min(), finite.max()])


def target_statistics(moments: np.ndarray) -> dict:
    """The store's target statistics (`schema.ATTR_TARGET_STATISTICS`) from summed `target_moments`."""
    count, total, squares, low, high = (float(v) for v in moments)
    if count == 0:
        raise InputError("no stored tile holds a target value: the value rasters do not cover the kept tiles")
    mean = total / count
    std = float(np.sqrt(max(squares / count - mean * mean, 0.0)))
    return {"mean": mean, "std": std, "min": low, "max": high, "valid_pixels": int(count)}
