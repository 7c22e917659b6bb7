"""The first pass over each scene: which windows hold enough valid pixels, and the scene's labels.

It reads only the reference band (not all bands: that would cost as much as the whole ingest) and warps
the label rasters onto the scene grid once. Results go to the ingest's progress folder, so a resumed
ingest skips scenes already scanned and the shard writers memory-map the labels instead of shipping them
through the Dask scheduler.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.errors import InputError
from eoscale.ingest.labels import LabelRaster, reproject_labels
from eoscale.ingest.plan import window_valid_fraction
from eoscale.ingest.reader import SceneReader
from eoscale.ingest.sources import Scene


@dataclass(frozen=True)
class ScanResult:
    window_valid: np.ndarray  # (rows, cols) of windows, valid fraction on the reference band
    unmapped: dict[int, int]  # label codes not in the class table -> pixel count


def scan_paths(progress: Path, index: int) -> tuple[Path, Path, Path]:
    stem = progress / f"scene-{index:05d}"
    return stem.with_suffix(".valid.npy"), stem.with_suffix(".labels.npy"), stem.with_suffix(".json")


def scan_scene(
    scene: Scene,
    index: int,
    labels: list[LabelRaster],
    classes: ClassTable,
    *,
    tile_size: int,
    stride: int,
    progress: str,
) -> ScanResult:
    """Scan one scene and record the result under `progress` (atomically: the JSON is written last)."""
    valid_path, labels_path, done_path = scan_paths(Path(progress), index)
    if done_path.exists():
        return load_scan(Path(progress), index)
    with SceneReader(scene) as reader:
        reference = reader.read_reference()
    valid = reference != scene.nodata
    if not valid.any():
        raise InputError(f"scene {scene.id!r} ({scene.paths[0]}) holds only nodata ({scene.nodata:g}): leave it out")
    window_valid = window_valid_fraction(valid, tile_size, stride)
    if labels:
        label_array, unmapped = reproject_labels(scene, labels, classes)
    else:
        label_array, unmapped = np.full((scene.height, scene.width), IGNORE_INDEX, dtype=np.uint8), {}
    _save_npy(valid_path, window_valid)
    _save_npy(labels_path, label_array)
    tmp = done_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"unmapped": {str(k): v for k, v in unmapped.items()}}))
    os.replace(tmp, done_path)
    return ScanResult(window_valid, unmapped)


def load_scan(progress: Path, index: int) -> ScanResult:
    valid_path, _, done_path = scan_paths(progress, index)
    unmapped = {int(k): int(v) for k, v in json.loads(done_path.read_text())["unmapped"].items()}
    return ScanResult(np.load(valid_path), unmapped)


def load_scene_labels(progress: Path, index: int) -> np.ndarray:
    """The scene's labels on its grid, memory-mapped (shard writers slice their windows from it)."""
    return np.load(scan_paths(progress, index)[1], mmap_mode="r")


def _save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)
