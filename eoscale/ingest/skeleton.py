"""The tile store's skeleton: array metadata, codecs and the per-tile georeferencing, written before any shard.

Everything here is known from the plan, so it is written first, through xarray, which makes the store
exactly what `xarray.open_zarr` expects. Images and labels stay unwritten (the shard tasks fill them), and
so do the per-tile arrays that only the shard tasks can measure (valid fraction, class counts, each date's valid
share). The images have a time axis (`eoscale.store.schema`); each scene is one date today (T = 1), its date
the scene's `date` where its format records one, NaT where not.
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
from affine import Affine
from zarr.codecs import BloscCodec, ZstdCodec

from eoscale.errors import InputError
from eoscale.ingest.plan import TilePlan
from eoscale.raster.sources import Scene
from eoscale.store import schema

CODECS = ("blosc-zstd", "blosc-lz4", "zstd", "none")


def make_codec(name: str, *, typesize: int, level: int | None = None) -> list:
    """The zarr compressor list for `name` (see CODECS); byte shuffle helps 16-bit reflectance a lot."""
    if name == "blosc-zstd":
        return [BloscCodec(cname="zstd", clevel=3 if level is None else level, shuffle="shuffle", typesize=typesize)]
    if name == "blosc-lz4":
        return [BloscCodec(cname="lz4", clevel=5 if level is None else level, shuffle="shuffle", typesize=typesize)]
    if name == "zstd":
        return [ZstdCodec(level=3 if level is None else level)]
    if name == "none":
        return []
    raise InputError(f"unknown codec {name!r}: choose one of {', '.join(CODECS)}")


def tile_transforms(plan: TilePlan, scenes: list[Scene]) -> np.ndarray:
    out = np.empty((len(plan), 6), dtype=np.float64)
    for i, (s, r, c) in enumerate(zip(plan.scene, plan.row_off, plan.col_off, strict=True)):
        out[i] = list(scenes[s].transform @ Affine.translation(int(c), int(r)))[:6]
    return out


def tile_dates(plan: TilePlan, scenes: list[Scene]) -> np.ndarray:
    """(tile, time) datetime64[ns]: each tile's scene's date (T = 1), NaT where the scene's format records none."""
    dates = [getattr(scene, "date", None) for scene in scenes]
    per_scene = np.array([np.datetime64("NaT", "ns") if d is None else np.datetime64(d, "ns") for d in dates],
                         dtype="datetime64[ns]")
    return per_scene[np.asarray(plan.scene, dtype=np.int64)][:, None]


def create_skeleton(
    path: Path,
    plan: TilePlan,
    scenes: list[Scene],
    *,
    wavelengths: list[float],
    num_classes: int,
    codec: str,
    level: int | None,
    attrs: dict,
    targets: bool = False,
    dates: np.ndarray | None = None,
    observations: bool = False,
) -> None:
    """Write the store's metadata and per-tile coordinates; images and labels (and, with `targets`, the
    per-pixel values: `schema.TARGETS`, float32, NaN where unknown) stay unwritten. `dates` (tile, time) are a time
    series' (`eoscale.ingest.series`; default: each scene's date, T = 1); with `observations`, composites' clear
    observation counts (`schema.OBSERVATIONS`) are written later too."""
    n, bands, t, s = len(plan), len(scenes[0].bands), plan.tile_size, plan.shard_tiles
    dates = tile_dates(plan, scenes) if dates is None else dates
    steps = dates.shape[1]  # T: one date a scene today
    placeholder = dict(chunks=-1)
    ds = xr.Dataset(
        {
            schema.IMAGES: ((schema.TILE, schema.TIME, schema.BAND, schema.Y, schema.X),
                            da.zeros((n, steps, bands, t, t), dtype=np.uint16, chunks=(s, steps, bands, t, t))),
            schema.LABELS: ((schema.TILE, schema.Y, schema.X),
                            da.zeros((n, t, t), dtype=np.uint8, chunks=(s, t, t))),
        },
        coords={
            schema.TILE: np.arange(n, dtype=np.int64),
            "wavelength": (schema.BAND, np.asarray(wavelengths, dtype=np.float32)),
            schema.SCENE: (schema.TILE, plan.scene),
            schema.ROW_OFF: (schema.TILE, plan.row_off),
            schema.COL_OFF: (schema.TILE, plan.col_off),
            schema.TRANSFORM: ((schema.TILE, schema.AFFINE), tile_transforms(plan, scenes)),
            schema.SPLIT: (schema.TILE, plan.split),
            schema.VALID_FRACTION: (schema.TILE, da.zeros(n, dtype=np.float32, **placeholder)),
            schema.CLASS_COUNTS: ((schema.TILE, schema.CLASS), da.zeros((n, num_classes), dtype=np.int64, **placeholder)),
            schema.DATES: ((schema.TILE, schema.TIME), dates),
            schema.DATE_VALID: ((schema.TILE, schema.TIME), da.zeros((n, steps), dtype=np.float32, **placeholder)),
        },
        attrs={**attrs, schema.ATTR_TIME_STEPS: steps},
    )
    encoding = {
        # one tile (all its dates) per chunk (the unit a reader can fetch alone), shard_tiles tiles per shard (the
        # unit on disk); a tile's chunk holds the same bytes as a single-date tile of schema version 1
        schema.IMAGES: {"chunks": (1, steps, bands, t, t), "shards": (s, steps, bands, t, t),
                        "compressors": make_codec(codec, typesize=2, level=level)},
        schema.LABELS: {"chunks": (1, t, t), "shards": (s, t, t), "compressors": make_codec(codec, typesize=1, level=level)},
        # the dates in days, NaT as the smallest int64 (xarray's encoding, explicit so no store depends on a guess)
        schema.DATES: {"units": "days since 1970-01-01", "dtype": "int64"},
    }
    if observations:
        ds = ds.assign_coords({schema.OBSERVATIONS: ((schema.TILE, schema.TIME),
                                                     da.zeros((n, steps), dtype=np.int16, **placeholder))})
    if targets:
        ds[schema.TARGETS] = ((schema.TILE, schema.Y, schema.X), da.zeros((n, t, t), dtype=np.float32, chunks=(s, t, t)))
        encoding[schema.TARGETS] = {"chunks": (1, t, t), "shards": (s, t, t), "_FillValue": np.float32(np.nan),
                                    "compressors": make_codec(codec, typesize=4, level=level)}
    ds.to_zarr(path, mode="w-", compute=False, encoding=encoding, zarr_format=3, consolidated=False)
