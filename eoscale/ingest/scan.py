"""The first pass over each scene: which windows hold enough valid pixels, and the scene's labels.

`scan_validity` reads only the scene's mask bands or else its reference band (not all bands: that would cost
as much as the whole ingest) and is all the plan needs, so planning starts early; a large scene is scanned in
runs of window rows by several tasks at once (`scan_parts`). `warp_labels` reprojects the label rasters onto the
scene grid once, in strips; it runs in the same Dask graph as the shard writers, which wait only for the scenes they
cut. Both record their results in the ingest's progress folder, so a resumed ingest skips them, and shard
writers memory-map the labels instead of receiving them through the scheduler. Both work in strips of whole rows and under
a capped GDAL block cache, so a worker's memory does not grow with the scene's area.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.cluster.heap import large_arrays_from_the_heap
from eoscale.errors import InputError
from eoscale.ingest.labels import LabelRaster, reproject_labels, strip_rows
from eoscale.ingest.plan import window_offsets, window_valid_fraction
from eoscale.raster.reader import SceneReader, gdal_cache
from eoscale.raster.sources import Scene


def _paths(progress: Path, index: int) -> dict[str, Path]:
    stem = progress / f"scene-{index:05d}"
    return {name: stem.with_name(f"{stem.name}.{name}") for name in ("labels.npy", "labels.json")}


def scan_parts(height: int, tile_size: int, stride: int, parts: int) -> list[tuple[int, int]]:
    """The scene's rows of windows cut into at most `parts` runs of consecutive rows, [first, stop) each: one scan
    task each, so that one large scene is scanned by every worker at once."""
    rows = len(window_offsets(height, tile_size, stride))
    bounds = np.linspace(0, rows, min(max(parts, 1), max(rows, 1)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def scan_validity(scene: Scene, index: int, *, tile_size: int, stride: int, progress: str,
                  rows: tuple[int, int] | None = None) -> tuple[np.ndarray, bool]:
    """Valid fraction (on the reference band) of every window of the scene's tiling in the rows of windows `rows`
    ([first, stop), default all), rows × columns; and whether any pixel those rows read holds data."""
    large_arrays_from_the_heap()
    all_rows = window_offsets(scene.height, tile_size, stride)
    first, stop = rows if rows is not None else (0, len(all_rows))
    path = Path(progress) / f"scene-{index:05d}.valid-{first}-{stop}.npz"
    if path.exists():
        with np.load(path) as saved:
            return saved["fractions"], bool(saved["any_valid"])
    # whole window rows at a time, about STRIP_PIXELS pixels (a summed-area table costs ~19 bytes a pixel: the
    # whole of a 10,980² scene took ~2 GB); the counts are exact integers, so strips give the same fractions
    per_strip = max(1, (strip_rows(scene.width) - tile_size) // stride + 1)
    parts, any_valid = [], False
    with SceneReader(scene) as reader, gdal_cache(reader.cache_bytes()):
        for strip in range(first, stop, per_strip):
            top, last = int(all_rows[strip]), int(all_rows[min(strip + per_strip, stop) - 1])
            valid = reader.planning_mask(top, last + tile_size - top)
            any_valid = any_valid or bool(valid.any())
            parts.append(window_valid_fraction(valid, tile_size, stride))
    window_valid = np.concatenate(parts, axis=0)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, fractions=window_valid, any_valid=any_valid)
    os.replace(tmp, path)
    return window_valid, any_valid


def only_nodata(scene: Scene) -> InputError:
    """The error for a scene whose scan found no pixel with data."""
    with SceneReader(scene) as reader:
        validity = reader.describe_validity()
    return InputError(f"scene {scene.id!r} ({scene.paths[0]}) holds only nodata ({validity}): leave it out")


def warp_labels(scene: Scene, index: int, labels: list[LabelRaster], classes: ClassTable, *, progress: str) -> dict[int, int]:
    """Write the scene's class indices on its grid to the progress folder; returns the unmapped code counts.

    The labels are warped and written in strips (`reproject_labels`), never held whole."""
    large_arrays_from_the_heap()
    paths = _paths(Path(progress), index)
    if paths["labels.json"].exists():
        return {int(k): int(v) for k, v in json.loads(paths["labels.json"].read_text()).items()}
    unmapped: dict[int, int] = {}
    tmp = paths["labels.npy"].with_name(paths["labels.npy"].name + ".tmp")
    try:
        with gdal_cache(), open(tmp, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.dtype(np.uint8).str, "fortran_order": False,
                                                     "shape": (scene.height, scene.width)})
            if labels:
                for _, strip, counts in reproject_labels(scene, labels, classes):
                    f.write(strip.tobytes())
                    for code, count in counts.items():
                        unmapped[code] = unmapped.get(code, 0) + count
            else:
                row = np.full((strip_rows(scene.width), scene.width), IGNORE_INDEX, dtype=np.uint8)
                for top in range(0, scene.height, len(row)):
                    f.write(row[: scene.height - top].tobytes())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, paths["labels.npy"])
    tmp = paths["labels.json"].with_name(paths["labels.json"].name + ".tmp")
    tmp.write_text(json.dumps({str(k): v for k, v in unmapped.items()}))
    os.replace(tmp, paths["labels.json"])  # written last: its presence means the labels are complete
    return unmapped


def load_scene_labels(progress: Path, index: int) -> np.ndarray:
    """The scene's labels on its grid, memory-mapped (shard writers slice their windows from it)."""
    return np.load(_paths(progress, index)["labels.npy"], mmap_mode="r")
