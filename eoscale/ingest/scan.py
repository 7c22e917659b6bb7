"""The first pass over each scene: which windows hold enough valid pixels, and the scene's labels.

`scan_validity` reads only the scene's mask bands or else its reference band (not all bands: that would cost
as much as the whole ingest) and is all the plan needs, so planning starts early. `warp_labels` reprojects the label rasters onto the
scene grid once; it runs in the same Dask graph as the shard writers, which wait only for the scenes they
cut. Both record their results in the ingest's progress folder, so a resumed ingest skips them, and shard
writers memory-map the labels instead of receiving them through the scheduler.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.errors import InputError
from eoscale.ingest.labels import LabelRaster, reproject_labels
from eoscale.ingest.plan import window_valid_fraction
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import Scene


def _paths(progress: Path, index: int) -> dict[str, Path]:
    stem = progress / f"scene-{index:05d}"
    return {name: stem.with_name(f"{stem.name}.{name}") for name in ("valid.npy", "labels.npy", "labels.json")}


def scan_validity(scene: Scene, index: int, *, tile_size: int, stride: int, progress: str) -> np.ndarray:
    """Valid fraction (on the reference band) of every window of the scene's tiling, rows × columns."""
    path = _paths(Path(progress), index)["valid.npy"]
    if path.exists():
        return np.load(path)
    with SceneReader(scene) as reader:
        valid = reader.planning_mask()
        if not valid.any():
            raise InputError(f"scene {scene.id!r} ({scene.paths[0]}) holds only nodata ({reader.describe_validity()}): "
                             "leave it out")
    window_valid = window_valid_fraction(valid, tile_size, stride)
    _save_npy(path, window_valid)
    return window_valid


def warp_labels(scene: Scene, index: int, labels: list[LabelRaster], classes: ClassTable, *, progress: str) -> dict[int, int]:
    """Write the scene's class indices on its grid to the progress folder; returns the unmapped code counts."""
    paths = _paths(Path(progress), index)
    if paths["labels.json"].exists():
        return {int(k): int(v) for k, v in json.loads(paths["labels.json"].read_text()).items()}
    if labels:
        label_array, unmapped = reproject_labels(scene, labels, classes)
    else:
        label_array, unmapped = np.full((scene.height, scene.width), IGNORE_INDEX, dtype=np.uint8), {}
    _save_npy(paths["labels.npy"], label_array)
    tmp = paths["labels.json"].with_name(paths["labels.json"].name + ".tmp")
    tmp.write_text(json.dumps({str(k): v for k, v in unmapped.items()}))
    os.replace(tmp, paths["labels.json"])  # written last: its presence means the labels are complete
    return unmapped


def load_scene_labels(progress: Path, index: int) -> np.ndarray:
    """The scene's labels on its grid, memory-mapped (shard writers slice their windows from it)."""
    return np.load(_paths(progress, index)["labels.npy"], mmap_mode="r")


def _save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)
