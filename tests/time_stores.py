"""Tiny seeded tile stores of several dates a tile, for the tests of the loader, the temporal models and fit.

`make_time_store` ingests a single-date store with the real `eoscale ingest` (`tests.stores.make_store`) and
writes a season of `steps` dates of its tiles through the store's own writer (`eoscale.store.writer`, the
layout `eoscale ingest` gives a time axis: xarray's skeleton, then whole shards): every class brightens or
darkens through the season at its own pace (a phase per class), each date has a cloud box (no data) on some
tiles, and one date of some tiles has no data at all (a masked step). Metadata (bands, statistics, splits,
classes) is the single-date store's, so a T-date store and its one-date source share a band contract.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from eoscale.ingest.skeleton import make_codec
from eoscale.store import schema
from eoscale.store.open import open_store, read_store_attrs
from eoscale.store.writer import write_whole_shard
from tests.stores import make_store


def season(images: np.ndarray, labels: np.ndarray, steps: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(tile, time, band, y, x) images of `steps` dates from single-date (tile, band, y, x) `images`, and the
    (tile, time) dates in days since 1970 (a month apart from 2024-03-01)."""
    rng = np.random.default_rng(seed)
    n, bands, t, _ = images.shape
    phase = rng.uniform(0, 2 * np.pi, 256)[labels.astype(np.int64)]  # (tile, y, x): each class its own pace
    out = np.empty((n, steps, bands, t, t), dtype=np.uint16)
    for step in range(steps):
        factor = 1.0 + 0.4 * np.sin(2 * np.pi * step / steps + phase)[:, None]
        out[:, step] = np.clip(images * factor, 1, 60000).astype(np.uint16)
    out[images[:, None].repeat(steps, axis=1) == 0] = 0  # the scenes' own nodata stays nodata on every date
    for step in range(steps):  # a cloud box on every third tile, at a place of its own each date
        for tile in range(step % 3, n, 3):
            y, x = rng.integers(0, t // 2, 2)
            out[tile, step, :, y : y + t // 3, x : x + t // 3] = 0
    out[1::5, steps // 2] = 0  # a date without a single observation: a masked step, not zeros that count
    start = np.datetime64("2024-03-01", "D").astype(np.int64)
    days = (start + 30 * np.arange(steps, dtype=np.int64))[None].repeat(n, axis=0)
    return out, days


def make_time_store(folder: Path, *, steps: int = 3, seed: int = 0, **store_kwargs) -> Path:
    """A store of `steps` dates a tile at `folder/season.zarr` (its single-date source at `folder/tiles.zarr`,
    made by `tests.stores.make_store(folder, **store_kwargs)`); returns its path."""
    source = make_store(folder, seed=seed, **store_kwargs)
    ds = open_store(source).load()
    attrs = read_store_attrs(source)
    images, days = season(ds[schema.IMAGES].values[:, 0], ds[schema.LABELS].values, steps, seed=seed)
    path = folder / "season.zarr"
    write_time_store(path, ds, images, days, attrs)
    return path


def write_time_store(path: Path, ds: xr.Dataset, images: np.ndarray, days: np.ndarray, attrs: dict) -> None:
    """Write `images` (tile, time, band, y, x) with the tiles, labels and metadata of the store dataset `ds`."""
    n, steps, bands, t, _ = images.shape
    s = int(attrs[schema.ATTR_SHARD_TILES])
    valid = (images != 0).any(axis=2)  # (tile, time, y, x)
    date_valid = valid.reshape(n, steps, -1).mean(axis=2).astype(np.float32)
    dates = days.astype("datetime64[D]").astype("datetime64[ns]")
    keep = [c for c in ds.coords if c not in (schema.DATES, schema.DATE_VALID, schema.BAND, schema.CLASS, schema.TIME)]
    coords = {c: ds.coords[c].variable for c in keep}
    coords[schema.VALID_FRACTION] = (schema.TILE, valid.any(axis=1).reshape(n, -1).mean(axis=1).astype(np.float32))
    coords[schema.DATES] = ((schema.TILE, schema.TIME), dates)
    coords[schema.DATE_VALID] = ((schema.TILE, schema.TIME), date_valid)
    labels = ds[schema.LABELS].values
    out = xr.Dataset(
        {schema.IMAGES: ((schema.TILE, schema.TIME, schema.BAND, schema.Y, schema.X),
                         da.zeros(images.shape, dtype=np.uint16, chunks=(s, steps, bands, t, t))),
         schema.LABELS: ((schema.TILE, schema.Y, schema.X), da.zeros(labels.shape, dtype=np.uint8, chunks=(s, t, t)))},
        coords=coords,
        attrs={**{k: v for k, v in attrs.items() if k != "coordinates"},  # xarray's own
               schema.ATTR_TIME_STEPS: steps, schema.ATTR_COMPLETE: False})
    encoding = {schema.IMAGES: {"chunks": (1, steps, bands, t, t), "shards": (s, steps, bands, t, t),
                                "compressors": make_codec("blosc-zstd", typesize=2)},
                schema.LABELS: {"chunks": (1, t, t), "shards": (s, t, t), "compressors": make_codec("zstd", typesize=1)},
                schema.DATES: {"units": "days since 1970-01-01", "dtype": "int64"}}
    out.to_zarr(path, mode="w-", compute=False, encoding=encoding, zarr_format=3, consolidated=False)
    group = zarr.open_group(str(path), mode="r+")
    for shard in range(-(-n // s)):
        rows = slice(shard * s, (shard + 1) * s)
        write_whole_shard(group[schema.IMAGES], shard, images[rows])
        write_whole_shard(group[schema.LABELS], shard, labels[rows])
    group.attrs.update({schema.ATTR_COMPLETE: True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
