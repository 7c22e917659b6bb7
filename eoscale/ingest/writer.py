"""Writing the tile store: its skeleton, one whole shard per task, and the finishing touches.

The skeleton (array metadata and the per-tile georeferencing, all known from the plan) is written first
through xarray, so the store is exactly what `xarray.open_zarr` expects. Each shard task then reads its
tiles from the scenes and assigns one whole shard region of `images` and `labels`, which zarr encodes and
writes as one shard object: no two tasks ever touch the same shard. A task records what it measured
(valid fractions, class counts, band histograms) in a marker file written *after* the shard, atomically,
so a resumed ingest trusts exactly the shards that have a marker and rewrites the rest.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from affine import Affine
from zarr.codecs import BloscCodec, ZstdCodec

from eoscale import schema
from eoscale.classes import IGNORE_INDEX
from eoscale.errors import InputError
from eoscale.ingest.plan import TilePlan
from eoscale.ingest.reader import SceneReader
from eoscale.ingest.scan import load_scene_labels
from eoscale.ingest.sources import Scene
from eoscale.ingest.stats import band_histograms

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
) -> None:
    """Write the store's metadata and per-tile coordinates; images and labels stay unwritten."""
    n, bands, t, s = len(plan), len(scenes[0].bands), plan.tile_size, plan.shard_tiles
    placeholder = dict(chunks=-1)
    ds = xr.Dataset(
        {
            schema.IMAGES: ((schema.TILE, schema.BAND, schema.Y, schema.X),
                            da.zeros((n, bands, t, t), dtype=np.uint16, chunks=(s, bands, t, t))),
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
        },
        attrs=attrs,
    )
    encoding = {
        # one tile per chunk (the unit a reader can fetch alone), shard_tiles tiles per shard (the unit on disk)
        schema.IMAGES: {"chunks": (1, bands, t, t), "shards": (s, bands, t, t),
                        "compressors": make_codec(codec, typesize=2, level=level)},
        schema.LABELS: {"chunks": (1, t, t), "shards": (s, t, t), "compressors": make_codec(codec, typesize=1, level=level)},
    }
    ds.to_zarr(path, mode="w-", compute=False, encoding=encoding, zarr_format=3, consolidated=False)


def marker_path(progress: Path, shard: int) -> Path:
    return progress / f"shard-{shard:06d}.npz"


def write_shard(
    store: str,
    progress: str,
    shard: int,
    start: int,
    scene_index: np.ndarray,
    row_off: np.ndarray,
    col_off: np.ndarray,
    scenes: list[Scene],
    tile_size: int,
    num_classes: int,
) -> int:
    """Read the shard's tiles, write them as one shard, then record its marker. Returns the tile count."""
    n, t = len(scene_index), tile_size
    images = np.empty((n, len(scenes[0].bands), t, t), dtype=np.uint16)
    labels = np.empty((n, t, t), dtype=np.uint8)
    for s in np.unique(scene_index):
        scene = scenes[s]
        scene_labels = load_scene_labels(Path(progress), int(s))
        with SceneReader(scene) as reader:
            for positions, row, col0, count in _runs(np.flatnonzero(scene_index == s), row_off, col_off, t):
                block = reader.read(row, col0, t, count * t)
                label_block = scene_labels[row : row + t, col0 : col0 + count * t]
                for k, p in enumerate(positions):
                    images[p] = block[:, :, k * t : (k + 1) * t]
                    labels[p] = label_block[:, k * t : (k + 1) * t]
    nodata = int(scenes[0].nodata)
    valid = (images != nodata).all(axis=1)
    labels[~valid] = IGNORE_INDEX
    valid_fraction = valid.reshape(n, -1).mean(axis=1).astype(np.float32)
    class_counts = np.stack([np.bincount(lab[lab != IGNORE_INDEX], minlength=num_classes)[:num_classes] for lab in labels])
    group = zarr.open_group(store, mode="r+")
    group[schema.IMAGES][start : start + n] = images
    group[schema.LABELS][start : start + n] = labels
    marker = marker_path(Path(progress), shard)
    tmp = marker.with_name(marker.stem + ".tmp.npz")
    np.savez_compressed(tmp, valid_fraction=valid_fraction, class_counts=class_counts, histograms=band_histograms(images))
    os.replace(tmp, marker)
    return n


def _runs(positions: np.ndarray, row_off: np.ndarray, col_off: np.ndarray, t: int):
    """Group tile positions (one scene) into runs of side-by-side tiles in one row: one read per run."""
    order = positions[np.lexsort((col_off[positions], row_off[positions]))]
    run = [order[0]]
    for p in order[1:]:
        last = run[-1]
        if row_off[p] == row_off[last] and col_off[p] == col_off[last] + t:
            run.append(p)
        else:
            yield run, int(row_off[run[0]]), int(col_off[run[0]]), len(run)
            run = [p]
    yield run, int(row_off[run[0]]), int(col_off[run[0]]), len(run)


def gather_markers(progress: Path, plan: TilePlan) -> dict[str, np.ndarray]:
    """The per-tile valid fractions and class counts, and the summed band histograms, from all markers."""
    valid_fraction = np.empty(len(plan), dtype=np.float32)
    class_counts, histograms = None, None
    for shard in range(plan.num_shards):
        start, stop = plan.shard_range(shard)
        with np.load(marker_path(progress, shard)) as m:
            if class_counts is None:
                class_counts = np.empty((len(plan), m["class_counts"].shape[1]), dtype=np.int64)
                histograms = np.zeros_like(m["histograms"])
            valid_fraction[start:stop] = m["valid_fraction"]
            class_counts[start:stop] = m["class_counts"]
            histograms += m["histograms"]
    return {"valid_fraction": valid_fraction, "class_counts": class_counts, "histograms": histograms}


def finalize(store: Path, progress: Path, gathered: dict[str, np.ndarray], attrs: dict) -> None:
    """Write the gathered per-tile arrays and the last attributes, mark the store complete, consolidate
    its metadata, and remove the progress folder."""
    group = zarr.open_group(store, mode="r+")
    group[schema.VALID_FRACTION][:] = gathered["valid_fraction"]
    group[schema.CLASS_COUNTS][:] = gathered["class_counts"]
    group.attrs.update({**attrs, schema.ATTR_COMPLETE: True})
    with warnings.catch_warnings():
        # consolidated metadata is not in the v3 spec yet, but xarray reads it and warns without it
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(store))
    shutil.rmtree(progress)
