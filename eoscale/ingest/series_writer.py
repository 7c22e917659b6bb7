"""Writing one shard of a time series: each tile's steps read from its place's dated scenes on the reference grid.

A step of one scene is its pixels as they are; a composite step (`--composite`) is the per-pixel median of the step's
clear observations (pixels a scene's mask, or nodata in every band, leaves out take no part), rounded to the store's
integers. A pixel without a clear observation in a step is nodata in every band on that step; a tile's label is
ignored only where no step holds data. A place of several sensors (`eoscale.ingest.fused_series`) is read sensor by
sensor: each sensor's scenes of a step fill its own bands (a radar sensor's median taken in linear power), and its bands
are nodata where it has no clear observation while the others' are not; the DEM's layers (`--static`) are the same on
every step, where some sensor has data on it. The marker adds each tile's per-step valid share (`date_valid`) and, for
composites, its clear observations (`observations`: scenes with data over the tile in the step).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window

from eoscale.classes import IGNORE_INDEX
from eoscale.cluster.heap import large_arrays_from_the_heap
from eoscale.ingest.scan import load_scene_labels
from eoscale.ingest.series import Place
from eoscale.ingest.stats import band_histograms
from eoscale.ingest.targets import load_scene_targets
from eoscale.ingest.writer import _runs, write_and_mark
from eoscale.raster.composite import (
    median_of_clear as _median,  # the reducer predict composites raw scenes with
)
from eoscale.raster.reader import SceneReader, gdal_cache
from eoscale.raster.scene import Scene
from eoscale.sensors.sentinel1 import SENTINEL1
from eoscale.store import schema


def write_series_shard(
    store: str,
    progress: str,
    shard: int,
    start: int,
    place_index: np.ndarray,
    row_off: np.ndarray,
    col_off: np.ndarray,
    places: list[Place],
    tile_size: int,
    num_classes: int,
    steps: int,
    composite: bool,
    *ready: object,
    targets: bool = False,
) -> int:
    """Read the shard's tiles at each of their `steps` time steps, write them as one shard, then its marker. Returns
    the tile count. `ready` are the results of the label (and target) tasks of its places."""
    large_arrays_from_the_heap()
    n, t = len(place_index), tile_size
    grid = places[0].grid
    bands = len(grid.bands)
    nodata = int(grid.nodata)
    groups = sensor_slices(grid)  # each sensor's bands (one sensor: all of the grid's own), then the static layers'
    images = np.full((n, steps, bands, t, t), nodata, dtype=np.uint16)
    # where each sensor has data on each step (group, tile, time, y, x); a pixel has data where any sensor does
    present = np.zeros((len(groups), n, steps, t, t), dtype=bool)
    observations = np.zeros((n, steps), dtype=np.int16)
    labels = np.empty((n, t, t), dtype=np.uint8)
    values = np.empty((n, t, t), dtype=np.float32) if targets else None
    masked = np.zeros((len(places), 2), dtype=np.int64)
    static = static_slice(grid)
    for p in np.unique(place_index):
        place = places[p]
        mine = np.flatnonzero(place_index == p)
        runs = list(_runs(mine, row_off, col_off, t))
        where = {int(q): i for i, q in enumerate(mine)}
        scene_labels = load_scene_labels(Path(progress), int(p))
        scene_values = load_scene_targets(Path(progress), int(p)) if targets else None
        for positions, row, col0, _ in runs:
            for k, q in enumerate(positions):
                labels[q] = scene_labels[row : row + t, col0 + k * t : col0 + (k + 1) * t]
                if scene_values is not None:
                    values[q] = scene_values[row : row + t, col0 + k * t : col0 + (k + 1) * t]
        for k, step in enumerate(place.steps):
            stacks: dict[int, list] = {}  # per sensor group, per observation: (pixels, valid) of the place's tiles
            for j in step.scenes:
                scene = place.scenes[j]
                g = next(i for i, (name, _) in enumerate(groups) if name == scene.sensor)
                pixels = np.empty((len(mine), len(scene.bands), t, t), dtype=np.uint16)
                clear = np.empty((len(mine), t, t), dtype=bool)
                with SceneReader(scene) as reader, gdal_cache(reader.cache_bytes()):
                    for positions, row, col0, count in runs:
                        block = reader.read_masked(row, col0, t, count * t)
                        masked[p] += (int(block.by_mask.sum()), int(block.by_nodata.sum()))
                        for m, q in enumerate(positions):
                            pixels[where[int(q)]] = block.pixels[:, :, m * t : (m + 1) * t]
                            clear[where[int(q)]] = block.valid[:, m * t : (m + 1) * t]
                stacks.setdefault(g, []).append((pixels, clear))
            if not stacks:
                continue  # a composite interval without an acquisition: a masked step
            observations[mine, k] = np.sum([c.reshape(len(mine), -1).any(axis=1) for stack in stacks.values()
                                            for _, c in stack], axis=0)
            for g, stack in stacks.items():
                # one observation (a date as it is, or alone in its interval): its own pixels; else the median
                pixels, clear = stack[0] if len(stack) == 1 else _median(stack, nodata, power=groups[g][0] == SENTINEL1)
                images[mine, k, groups[g][1]], present[g][mine, k] = pixels, clear
        if static is not None:  # the DEM's layers, the same on every step (nodata below where no sensor has data)
            layers = _static_layers(place.grid, runs, t, len(mine), where)
            images[mine, :, static] = layers[:, None]
    valid = present.any(axis=0)
    for g, (_, channels) in enumerate(groups):  # each sensor's bands at nodata where it has no data on that step
        images[:, :, channels].transpose(2, 0, 1, 3, 4)[:, ~present[g]] = nodata
    if static is not None:  # static layers where some sensor has data on that step
        images[:, :, static].transpose(2, 0, 1, 3, 4)[:, ~valid] = nodata
    any_valid = valid.any(axis=1)
    labels[~any_valid] = IGNORE_INDEX
    if values is not None:
        values[~any_valid] = np.nan
    valid_fraction = any_valid.reshape(n, -1).mean(axis=1).astype(np.float32)
    date_valid = valid.reshape(n, steps, -1).mean(axis=2).astype(np.float32)
    histograms = _histograms(images, present, valid, groups, static)
    extra = {schema.DATE_VALID: date_valid, **({schema.OBSERVATIONS: observations} if composite else {})}
    write_and_mark(store, progress, shard, images, labels, values, valid_fraction, num_classes, histograms, masked,
                   **extra)
    return n


def sensor_slices(grid: Scene) -> list[tuple[str, slice]]:
    """The grid's sensors and their channels (not the static layers): its own bands (all but the static layers for
    one sensor), then each other sensor's (`BandFile.sensor`), in band order."""
    out: list[tuple[str, slice]] = []
    for c, band in enumerate(grid.bands):
        if band.static:
            continue
        name = band.sensor or grid.sensor
        if out and out[-1][0] == name and out[-1][1].stop == c:
            out[-1] = (name, slice(out[-1][1].start, c + 1))
        else:
            out.append((name, slice(c, c + 1)))
    return out


def static_slice(grid: Scene) -> slice | None:
    """The grid's static layers' channels (a DEM's, last), or None."""
    positions = [c for c, band in enumerate(grid.bands) if band.static]
    return slice(positions[0], positions[-1] + 1) if positions else None


def _static_layers(grid: Scene, runs: list, t: int, count: int, where: dict[int, int]) -> np.ndarray:
    """(tile, layer, y, x): the grid's static layers over the tiles of `runs`, read from their file on the grid."""
    static = [b for b in grid.bands if b.static]
    out = np.empty((count, len(static), t, t), dtype=np.uint16)
    with rasterio.open(static[0].path) as src:
        for positions, row, col0, run in runs:
            block = src.read([b.index for b in static], window=Window(col0, row, run * t, t))
            for m, q in enumerate(positions):
                out[where[int(q)]] = block[:, :, m * t : (m + 1) * t]
    return out


def _histograms(images: np.ndarray, present: np.ndarray, valid: np.ndarray, groups: list, static: slice | None
                ) -> np.ndarray:
    """Each band's histogram over the pixels where its own sensor has data on a step (a static layer's: where any
    sensor has), in band order."""
    n, steps, bands, t, _ = images.shape
    flat = images.reshape(n * steps, bands, t, t)
    parts = [(channels, present[g].reshape(n * steps, t, t)) for g, (_, channels) in enumerate(groups)]
    if static is not None:
        parts.append((static, valid.reshape(n * steps, t, t)))
    parts.sort(key=lambda part: part[0].start)
    if len(parts) == 1:
        return band_histograms(flat, parts[0][1])
    return np.concatenate([band_histograms(flat[:, channels], mask) for channels, mask in parts])

