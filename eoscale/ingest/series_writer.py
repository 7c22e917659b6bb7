"""Writing one shard of a time series: each tile's steps read from its place's dated scenes on the reference grid.

A step of one scene is its pixels as they are; a composite step (`--composite`) is the per-pixel median of the step's
clear observations (pixels a scene's mask, or nodata in every band, leaves out take no part), rounded to the store's
integers. A pixel without a clear observation in a step is nodata in every band on that step; a tile's label is
ignored only where no step holds data. The marker adds each tile's per-step valid share (`date_valid`) and, for
composites, its clear observations (`observations`: scenes with data over the tile in the step).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    bands = len(places[0].grid.bands)
    nodata = int(places[0].grid.nodata)
    images = np.full((n, steps, bands, t, t), nodata, dtype=np.uint16)
    valid = np.zeros((n, steps, t, t), dtype=bool)
    observations = np.zeros((n, steps), dtype=np.int16)
    labels = np.empty((n, t, t), dtype=np.uint8)
    values = np.empty((n, t, t), dtype=np.float32) if targets else None
    masked = np.zeros((len(places), 2), dtype=np.int64)
    for p in np.unique(place_index):
        place = places[p]
        mine = np.flatnonzero(place_index == p)
        runs = list(_runs(mine, row_off, col_off, t))
        scene_labels = load_scene_labels(Path(progress), int(p))
        scene_values = load_scene_targets(Path(progress), int(p)) if targets else None
        for positions, row, col0, _ in runs:
            for k, q in enumerate(positions):
                labels[q] = scene_labels[row : row + t, col0 + k * t : col0 + (k + 1) * t]
                if scene_values is not None:
                    values[q] = scene_values[row : row + t, col0 + k * t : col0 + (k + 1) * t]
        for k, step in enumerate(place.steps):
            stack = []  # per observation: (pixels, valid) of every tile of the place in this shard
            for j in step.scenes:
                pixels = np.empty((len(mine), bands, t, t), dtype=np.uint16)
                clear = np.empty((len(mine), t, t), dtype=bool)
                where = {int(q): i for i, q in enumerate(mine)}
                with SceneReader(place.scenes[j]) as reader, gdal_cache(reader.cache_bytes()):
                    for positions, row, col0, count in runs:
                        block = reader.read_masked(row, col0, t, count * t)
                        masked[p] += (int(block.by_mask.sum()), int(block.by_nodata.sum()))
                        for m, q in enumerate(positions):
                            pixels[where[int(q)]] = block.pixels[:, :, m * t : (m + 1) * t]
                            clear[where[int(q)]] = block.valid[:, m * t : (m + 1) * t]
                stack.append((pixels, clear))
            if not stack:
                continue  # a composite interval without an acquisition: a masked step
            observations[mine, k] = np.sum([c.reshape(len(mine), -1).any(axis=1) for _, c in stack], axis=0)
            if len(stack) == 1:  # one observation (a date as it is, or alone in its interval): its own pixels
                images[mine, k], valid[mine, k] = stack[0]
            else:
                images[mine, k], valid[mine, k] = _median(stack, nodata)
    for k in range(steps):  # the store's nodata in every band of a pixel without data on that step
        images[:, k].transpose(1, 0, 2, 3)[:, ~valid[:, k]] = nodata
    any_valid = valid.any(axis=1)
    labels[~any_valid] = IGNORE_INDEX
    if values is not None:
        values[~any_valid] = np.nan
    valid_fraction = any_valid.reshape(n, -1).mean(axis=1).astype(np.float32)
    date_valid = valid.reshape(n, steps, -1).mean(axis=2).astype(np.float32)
    histograms = band_histograms(images.reshape(n * steps, bands, t, t), valid.reshape(n * steps, t, t))
    extra = {schema.DATE_VALID: date_valid, **({schema.OBSERVATIONS: observations} if composite else {})}
    write_and_mark(store, progress, shard, images, labels, values, valid_fraction, num_classes, histograms, masked,
                   **extra)
    return n
