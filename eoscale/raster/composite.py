"""Composites: the calendar of regular intervals a season's dates fall into (from the store's first day, which the
input spec records, so a place whose dates begin elsewhere is composited on the same intervals), and the per-pixel
median of an interval's clear observations, shared by ingest (`ingest --composite`: `eoscale.ingest.series_writer`) and predict (raw scenes of
a checkpoint fitted on composites: `eoscale.raster.fused_season`).

A pixel's observation is clear where its scene holds data (its masks: SCL, QA_PIXEL, nodata, a radar's border noise);
the median of the clear ones is rounded to the store's integers, and a pixel without a clear observation is nodata in
every band. Radar on the store's dB scale (`eoscale.sensors.sentinel1`) takes its median in linear power.
"""

from __future__ import annotations

import datetime as dt
import os
import warnings
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.windows import Window

from eoscale.raster.reader import SceneReader, gdal_cache
from eoscale.raster.scene import Scene
from eoscale.sensors.sentinel1 import STORE_AT_0_DB, STORE_PER_DB

STRIP_PIXELS = 1_000_000  # pixels of one scene's bands read at a time while compositing


def calendar_start(dates, composite: int | str) -> dt.date:
    """The first day of the composite calendar of `dates` (a store's, every place's dates together): the earliest
    date, or the first of its month for "monthly". Ingest records it in the input spec (`Timeline.start`), so predict
    lays each place's intervals on the calendar training's were laid on."""
    first = min(dates)
    return first.replace(day=1) if composite == "monthly" else first


def composite_starts(first: dt.date, last: dt.date, composite: int | str, *, start: dt.date | None = None
                     ) -> list[dt.date]:
    """The first days of the composite intervals that cover `first` through `last`: calendar months, or the intervals
    of `composite` days of the calendar that begins at `start` (`start + k * composite` for whole k, negative too;
    None: at `first`). The one rule of ingest (`start`: the store's `calendar_start`) and predict (`start`: the one
    the checkpoint's input spec records), so that a place whose first date falls elsewhere gets the intervals of the
    store's calendar, not intervals of another phase; months need no start."""
    starts = []
    if composite == "monthly":
        day = first.replace(day=1)
        while day <= last:
            starts.append(day)
            day = (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
        return starts
    days = int(composite)
    anchor = first if start is None else start
    day = anchor + dt.timedelta(days=((first - anchor).days // days) * days)  # the interval that holds `first`
    while day <= last:
        starts.append(day)
        day += dt.timedelta(days=days)
    return starts


def median_of_clear(stack: list[tuple[np.ndarray, np.ndarray]], nodata: int, *, power: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The per-pixel median of the clear observations (pixels `(..., band, y, x)` and where each is clear `(..., y, x)`
    an observation), and where any was clear; with `power` (radar stored in dB, `eoscale.sensors.sentinel1`), the
    median in linear power taken back to the store's dB (the same as the dB's median for an odd number of
    observations, not for an even one)."""
    values = np.stack([np.where(clear[..., None, :, :], pixels.astype(np.float64), np.nan) for pixels, clear in stack])
    if power:  # store -> dB -> linear power
        values = 10.0 ** ((values / STORE_PER_DB - STORE_AT_0_DB / STORE_PER_DB) / 10.0)
    clear = np.stack([c for _, c in stack]).any(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels: no clear observation, set below
        median = np.nanmedian(values, axis=0)
    if power:  # linear power -> dB -> store
        with np.errstate(divide="ignore", invalid="ignore"):
            median = 10.0 * np.log10(median) * STORE_PER_DB + STORE_AT_0_DB
    out = np.where(clear[..., None, :, :], np.rint(np.nan_to_num(median, nan=nodata)), nodata)
    return out.clip(0, 65535).astype(np.uint16), clear


def write_composite(grid: Scene, scenes: list[tuple[Scene, Resampling]], path: Path, *, power: bool = False) -> None:
    """The median of the clear observations of `scenes` (one sensor's, each described on `grid`'s grid with the
    resampling its pixels call for) as a uint16 GeoTIFF on `grid` at `path` (nodata: `grid`'s), in strips of rows,
    written to a temporary name and moved."""
    first = scenes[0][0]
    count, nodata = len(first.bands), int(grid.nodata)
    rows = max(1, STRIP_PIXELS // max(grid.width * count, 1))
    profile = {"driver": "GTiff", "width": grid.width, "height": grid.height, "count": count, "dtype": "uint16",
               "crs": grid.crs, "transform": grid.transform, "nodata": nodata, "compress": "deflate", "predictor": 2}
    tmp = path.with_name(path.name + ".tmp")
    readers = []
    try:
        for scene, resampling in scenes:
            readers.append(SceneReader(scene, resampling=resampling))
        with gdal_cache(sum(r.cache_bytes() for r in readers)), rasterio.open(tmp, "w", **profile) as dst:
            for top in range(0, grid.height, rows):
                height = min(rows, grid.height - top)
                blocks = [r.read_masked(top, 0, height, grid.width) for r in readers]
                pixels, _ = median_of_clear([(b.pixels, b.valid) for b in blocks], nodata, power=power)
                dst.write(pixels, window=Window(0, top, grid.width, height))
            dst.descriptions = tuple(first.band_names)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        for reader in readers:
            reader.close()


__all__ = ["calendar_start", "composite_starts", "median_of_clear", "write_composite"]
