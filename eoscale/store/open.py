"""Opening a tile store read-only: validated, lazy, labelled.

Readers refuse what they cannot trust: a path with no store, a store whose ingest has not finished, a store
of a schema version this eoscale does not read, or one without the arrays and attributes of `eoscale.store.schema`.
Stores of schema version 1 (no time axis) open as stores of one date: `open_store` adds the time axis lazily,
nothing is rewritten.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import zarr

from eoscale.errors import IncompleteStoreError, StoreError, StoreNotFoundError
from eoscale.store import schema


def read_store_attrs(path: str | os.PathLike) -> dict:
    """The validated group attributes of the tile store at `path` (cheap: reads only metadata)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    if not path.exists():
        if partial.exists():
            raise IncompleteStoreError(
                f"the tile store {str(path)!r} is not finished (an interrupted ingest left {str(partial)!r}): "
                f"rerun the same 'eoscale ingest' command to finish it"
            )
        raise StoreNotFoundError(f"no tile store at {str(path)!r}: run 'eoscale ingest' first")
    try:
        group = zarr.open_group(path, mode="r")
    except (FileNotFoundError, zarr.errors.NodeTypeValidationError, ValueError, KeyError) as err:
        raise StoreError(f"{str(path)!r} is not a Zarr tile store ({type(err).__name__}): run 'eoscale ingest' to make one") from None
    attrs = group.attrs.asdict()
    version = attrs.get(schema.ATTR_SCHEMA)
    if version is None:
        raise StoreError(f"{str(path)!r} is a Zarr group but not an eoscale tile store: run 'eoscale ingest' to make one")
    if version not in schema.READABLE_VERSIONS:
        raise StoreError(
            f"tile store {str(path)!r} has schema version {version}, this eoscale reads versions "
            f"{', '.join(map(str, schema.READABLE_VERSIONS))}: ingest the scenes again with this eoscale"
        )
    if not attrs.get(schema.ATTR_COMPLETE, False):
        raise IncompleteStoreError(
            f"the tile store {str(path)!r} is not finished: rerun the same 'eoscale ingest' command to finish it"
        )
    since_v2 = version >= 2
    missing = [k for k in schema.REQUIRED_ATTRS + (schema.REQUIRED_ATTRS_V2 if since_v2 else ()) if k not in attrs]
    arrays = set(group.array_keys())
    missing += [a for a in (schema.IMAGES, schema.LABELS, *schema.TILE_COORDS, *(schema.TIME_COORDS if since_v2 else ()))
                if a not in arrays]
    if missing:
        raise StoreError(f"tile store {str(path)!r} lacks {', '.join(missing)}: it is damaged; ingest the scenes again")
    for name in (schema.IMAGES, schema.LABELS):
        for key, file in shard_files(group[name], path / name):
            if not file.is_file():
                # zarr reads a missing shard as fill values (label 0, a real class): never train on that
                raise StoreError(f"tile store {str(path)!r} is damaged: shard {name}/{key} is missing; "
                                 f"ingest the scenes again (eoscale ingest … --overwrite)")
    return attrs


def time_steps(attrs: dict) -> int:
    """T, the length of the store's time axis (1 for a store of schema version 1), from its attributes."""
    return int(attrs.get(schema.ATTR_TIME_STEPS, 1))


def shard_files(array: zarr.Array, folder: Path) -> list[tuple[str, Path]]:
    """(chunk key, file) of every shard of a sharded `array` stored under `folder`."""
    import itertools
    import math

    shards = array.shards or array.chunks
    grid = [range(math.ceil(n / s)) for n, s in zip(array.shape, shards, strict=True)]
    keys = [array.metadata.encode_chunk_key(coords) for coords in itertools.product(*grid)]
    return [(key, folder / key) for key in keys]


def check_shards(path: str | os.PathLike) -> int:
    """Read every shard of the store at `path` whole, through zarr, so each shard's index checksum (crc32c) and
    every tile's codec are verified; a damaged one is a `StoreError` naming it. Returns the shards read."""
    read_store_attrs(path)  # also: every shard file is there
    group = zarr.open_group(path, mode="r")
    checked = 0
    for name in (schema.IMAGES, schema.LABELS):
        array = group[name]
        step = (array.shards or array.chunks)[0]
        for start in range(0, array.shape[0], step):
            try:
                array[start : start + step]
            except Exception as err:  # a truncated or overwritten shard: zarr, blosc or the checksum says so
                key = array.metadata.encode_chunk_key((start // step,) + (0,) * (array.ndim - 1))
                raise StoreError(f"tile store {str(path)!r} is damaged: shard {name}/{key} does not read "
                                 f"({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}); "
                                 f"ingest the scenes again") from None
            checked += 1
    return checked


def open_store(path: str | os.PathLike, *, chunks: str | dict | None = "shards") -> xr.Dataset:
    """The tile store at `path` as a lazy, dask-backed Dataset, after validation.

    `chunks="shards"` (the default) gives dask chunks of one shard of tiles each, the unit worth reading;
    other values go to `xarray.open_zarr` as they are. Band names and class codes become coordinates.
    Whatever the schema version, ``images`` is (tile, time, band, y, x) and ``dates``/``date_valid`` are
    (tile, time) coordinates: a version-1 store gets a time axis of one step here, lazily (NaT dates, its
    ``valid_fraction`` as ``date_valid``).
    """
    attrs = read_store_attrs(path)
    if chunks == "shards":
        chunks = {schema.TILE: attrs[schema.ATTR_SHARD_TILES]}
    with warnings.catch_warnings():
        # xarray sees only the inner chunks (one tile) and warns that shard-sized dask chunks "separate" them;
        # they do not split any shard, which is the unit that matters on disk
        warnings.filterwarnings("ignore", message="The specified chunks separate the stored chunks")
        ds = xr.open_zarr(path, chunks=chunks, consolidated=True)
    if schema.TIME not in ds[schema.IMAGES].dims:  # schema version 1: one date, not recorded
        tiles = ds.sizes[schema.TILE]
        ds = ds.assign({schema.IMAGES: ds[schema.IMAGES].expand_dims(schema.TIME, axis=1)})
        ds = ds.assign_coords({
            schema.DATES: ((schema.TILE, schema.TIME), np.full((tiles, 1), np.datetime64("NaT", "ns"))),
            schema.DATE_VALID: ((schema.TILE, schema.TIME), ds[schema.VALID_FRACTION].data[:, None]),
        })
        ds.attrs[schema.ATTR_TIME_STEPS] = 1
    classes = attrs[schema.ATTR_CLASSES]
    return ds.assign_coords(
        {schema.BAND: attrs[schema.ATTR_BANDS], schema.CLASS: [c["code"] for c in classes]}
    )
