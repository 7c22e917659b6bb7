"""The tile store's time axis (schema version 2): new stores are `images(tile, time, band, y, x)` with
`dates`/`date_valid(tile, time)`; version-1 stores (written before, tests/store/data) open as one date, stream
the same batches and describe themselves; a store of T dates written through the writer reads back exactly; a
schema version this eoscale does not know is refused in one line; and the image bytes did not change."""

from __future__ import annotations

import datetime
import hashlib
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from eoscale.data import TileDataModule
from eoscale.data.info import describe
from eoscale.data.stream import TileStream
from eoscale.errors import StoreError
from eoscale.ingest.skeleton import make_codec, tile_dates
from eoscale.store import schema
from eoscale.store.open import open_store, read_store_attrs, time_steps
from eoscale.store.reader import ShardReader, open_images
from eoscale.store.writer import write_whole_shard
from tests.store.conftest import V1_IMAGE_SHARDS, V1_STORE


def test_the_old_module_paths_are_the_new_ones():
    from eoscale import schema as old_schema
    from eoscale.data import store as old_store
    from eoscale.data import stream

    assert old_schema.SCHEMA_VERSION == schema.SCHEMA_VERSION == 2 and old_schema.tile_georef is schema.tile_georef
    assert old_store.open_store is open_store and stream.ShardReader is ShardReader
    assert schema.READABLE_VERSIONS == (1, 2)


def test_a_version_1_store_opens_as_one_date():
    raw = zarr.open_array(str(V1_STORE / schema.IMAGES), mode="r")
    assert raw.ndim == 4  # the fixture is what it was: never rewritten
    attrs = read_store_attrs(V1_STORE)
    assert attrs[schema.ATTR_SCHEMA] == 1 and time_steps(attrs) == 1
    ds = open_store(V1_STORE)
    assert ds[schema.IMAGES].dims == (schema.TILE, schema.TIME, schema.BAND, schema.Y, schema.X)
    assert ds.sizes[schema.TIME] == 1 and ds.attrs[schema.ATTR_TIME_STEPS] == 1
    assert isinstance(ds[schema.IMAGES].data, __import__("dask").array.Array)  # lazily
    np.testing.assert_array_equal(ds[schema.IMAGES].values[:, 0], raw[:])
    assert np.isnat(ds[schema.DATES].values).all() and ds[schema.DATES].shape == (32, 1)
    np.testing.assert_array_equal(ds[schema.DATE_VALID].values[:, 0], ds[schema.VALID_FRACTION].values)


def test_the_shard_reader_reads_a_version_1_store_as_one_date():
    raw = zarr.open_array(str(V1_STORE / schema.IMAGES), mode="r")[:]
    for direct in (True, False):
        images = open_images(V1_STORE, direct=direct)
        assert images.direct is direct and images.tile_shape == (1, 4, 32, 32)
        np.testing.assert_array_equal(images.read(5, 30), raw[5:30, None])


def _batches(store, **kw) -> list[dict]:
    dm = TileDataModule(str(store), batch_size=5, num_workers=0, seed=3, **kw)
    dm.setup("fit")
    return list(dm.train_dataloader()) + list(dm.val_dataloader())


@pytest.mark.parametrize("bands", [None, ["B08", "B02"]])
def test_the_loader_yields_a_version_1_stores_arrays(bands):
    images = zarr.open_array(str(V1_STORE / schema.IMAGES), mode="r")[:]
    labels = zarr.open_array(str(V1_STORE / schema.LABELS), mode="r")[:]
    picked = [0, 1, 2, 3] if bands is None else [3, 0]
    batches = _batches(V1_STORE, bands=bands)
    assert sum(len(b["tile"]) for b in batches) >= 26
    for batch in batches:
        tiles = batch["tile"].numpy()
        assert batch["image"].shape == (len(tiles), len(picked), 32, 32) and "date_valid" not in batch
        np.testing.assert_array_equal(batch["image"].numpy(), images[tiles][:, picked])
        nodata = (images[tiles] == 0).all(axis=1)
        expected = np.where(nodata, schema.IGNORE_INDEX, labels[tiles])
        np.testing.assert_array_equal(batch["label"].numpy(), expected)


def test_a_version_1_and_a_version_2_store_of_the_same_inputs_give_the_same_batches(v2_store):
    old, new = _batches(V1_STORE), _batches(v2_store)
    assert len(old) == len(new) > 0
    for a, b in zip(old, new, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_info_describes_a_version_1_store(capsys):
    from eoscale.cli import main

    summary = describe(str(V1_STORE))
    assert summary["tiles"] == 32 and summary["shards"] == summary["shard_files"] == 3 and summary["time_steps"] == 1
    assert main(["info", str(V1_STORE), "--check"]) == 0
    assert "32 tiles" in capsys.readouterr().out


def test_ingest_writes_the_time_axis_with_the_same_image_bytes(v2_store):
    attrs = read_store_attrs(v2_store)
    assert attrs[schema.ATTR_SCHEMA] == 2 and attrs[schema.ATTR_TIME_STEPS] == 1
    group = zarr.open_group(str(v2_store), mode="r")
    images = group[schema.IMAGES]
    assert images.shape == (32, 1, 4, 32, 32) and images.chunks == (1, 1, 4, 32, 32) and images.shards == (12, 1, 4, 32, 32)
    assert group[schema.DATES].shape == group[schema.DATE_VALID].shape == (32, 1)
    ds = open_store(v2_store)
    assert ds[schema.IMAGES].dims == (schema.TILE, schema.TIME, schema.BAND, schema.Y, schema.X)
    assert ds[schema.DATES].dtype == np.dtype("datetime64[ns]") and np.isnat(ds[schema.DATES].values).all()  # synth: no date
    np.testing.assert_array_equal(ds[schema.DATE_VALID].values[:, 0], ds[schema.VALID_FRACTION].values)
    # only the metadata changed: each image shard holds the very bytes the version-1 ingest wrote, and so do labels
    for shard, digest in V1_IMAGE_SHARDS.items():
        assert hashlib.sha256((v2_store / f"images/c/{shard}/0/0/0/0").read_bytes()).hexdigest() == digest
        assert (v2_store / f"labels/c/{shard}/0/0").read_bytes() == (V1_STORE / f"labels/c/{shard}/0/0").read_bytes()
    np.testing.assert_array_equal(open_store(V1_STORE)[schema.IMAGES].values, ds[schema.IMAGES].values)


def test_each_tile_takes_its_scenes_date():
    plan = SimpleNamespace(scene=np.array([1, 0, 1]))
    scenes = [SimpleNamespace(date=datetime.date(2024, 5, 17)), SimpleNamespace()]  # the second: no date known
    dates = tile_dates(plan, scenes)
    assert dates.shape == (3, 1) and dates.dtype == np.dtype("datetime64[ns]")
    assert np.isnat(dates[[0, 2], 0]).all() and dates[1, 0] == np.datetime64("2024-05-17")


def _write_store(path: Path, images: np.ndarray, labels: np.ndarray, dates: np.ndarray, date_valid: np.ndarray,
                 attrs: dict, shard_tiles: int) -> None:
    """A store of T dates laid out as ingest lays one out (xarray's skeleton, then whole shards by the writer)."""
    n, steps, bands, t, _ = images.shape
    import dask.array as da

    ds = xr.Dataset(
        {schema.IMAGES: ((schema.TILE, schema.TIME, schema.BAND, schema.Y, schema.X),
                         da.zeros(images.shape, dtype=np.uint16, chunks=(shard_tiles, steps, bands, t, t))),
         schema.LABELS: ((schema.TILE, schema.Y, schema.X), da.zeros(labels.shape, dtype=np.uint8, chunks=(shard_tiles, t, t)))},
        coords={schema.TILE: np.arange(n), schema.SCENE: (schema.TILE, np.zeros(n, np.int32)),
                schema.ROW_OFF: (schema.TILE, np.zeros(n, np.int32)), schema.COL_OFF: (schema.TILE, np.zeros(n, np.int32)),
                schema.TRANSFORM: ((schema.TILE, schema.AFFINE), np.zeros((n, 6))),
                schema.SPLIT: (schema.TILE, np.zeros(n, np.int8)),
                schema.VALID_FRACTION: (schema.TILE, date_valid.max(axis=1)),
                schema.CLASS_COUNTS: ((schema.TILE, schema.CLASS), np.zeros((n, 8), np.int64)),
                schema.DATES: ((schema.TILE, schema.TIME), dates), schema.DATE_VALID: ((schema.TILE, schema.TIME), date_valid)},
        attrs=attrs)
    encoding = {schema.IMAGES: {"chunks": (1, steps, bands, t, t), "shards": (shard_tiles, steps, bands, t, t),
                                "compressors": make_codec("blosc-zstd", typesize=2)},
                schema.LABELS: {"chunks": (1, t, t), "shards": (shard_tiles, t, t), "compressors": make_codec("zstd", typesize=1)},
                schema.DATES: {"units": "days since 1970-01-01", "dtype": "int64"}}
    ds.to_zarr(path, mode="w-", compute=False, encoding=encoding, zarr_format=3, consolidated=False)
    group = zarr.open_group(str(path), mode="r+")
    for shard in range(-(-n // shard_tiles)):
        rows = slice(shard * shard_tiles, (shard + 1) * shard_tiles)
        write_whole_shard(group[schema.IMAGES], shard, images[rows])
        write_whole_shard(group[schema.LABELS], shard, labels[rows])
    group.attrs.update({schema.ATTR_COMPLETE: True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))


@pytest.fixture(scope="module")
def three_dates(tmp_path_factory) -> tuple[Path, dict]:
    """A store of 3 dates a tile: 20 tiles, 4 bands of 16 px, shards of 8; nodata on some dates of some tiles."""
    rng = np.random.default_rng(7)
    n, steps, bands, t = 20, 3, 4, 16
    images = rng.integers(1, 5000, (n, steps, bands, t, t), dtype=np.uint16)
    images[2, 1] = 0  # tile 2 has no data on its second date
    images[5, :, :, :4, :] = 0  # tile 5: its top rows have no data on any date
    images[6, 0, :, :, :8] = 0  # tile 6: its left half has none on the first date only
    labels = rng.integers(0, 8, (n, t, t), dtype=np.uint8)
    dates = np.array(["2024-04-01", "2024-05-01", "NaT"], dtype="datetime64[ns]")[None].repeat(n, axis=0)
    valid = (images != 0).any(axis=2)  # (tile, time, y, x)
    date_valid = valid.reshape(n, steps, -1).mean(axis=2).astype(np.float32)
    with open(V1_STORE / "zarr.json") as f:
        attrs = {k: v for k, v in json.load(f)["attributes"].items() if k != "coordinates"}  # xarray's own
    attrs = {**attrs, schema.ATTR_SCHEMA: 2, schema.ATTR_TIME_STEPS: steps, schema.ATTR_TILE_SIZE: t,
             schema.ATTR_SHARD_TILES: 8, schema.ATTR_SPLITS: {"train": [0, 20], "val": [20, 20], "test": [20, 20]},
             schema.ATTR_COMPLETE: False}
    path = tmp_path_factory.mktemp("t3") / "t3.zarr"
    _write_store(path, images, labels, dates, date_valid, attrs, shard_tiles=8)
    return path, {"images": images, "labels": labels, "dates": dates, "date_valid": date_valid, "valid": valid}


def test_a_store_of_three_dates_reads_back_exactly(three_dates):
    path, expected = three_dates
    ds = open_store(path)
    assert ds.sizes[schema.TIME] == 3 and ds.attrs[schema.ATTR_TIME_STEPS] == 3
    np.testing.assert_array_equal(ds[schema.IMAGES].values, expected["images"])
    np.testing.assert_array_equal(ds[schema.LABELS].values, expected["labels"])
    np.testing.assert_array_equal(ds[schema.DATES].values, expected["dates"])
    np.testing.assert_array_equal(ds[schema.DATE_VALID].values, expected["date_valid"])
    for direct in (True, False):
        images = open_images(path, direct=direct)
        assert images.direct is direct and images.tile_shape == (3, 4, 16, 16)
        np.testing.assert_array_equal(images.read(3, 19), expected["images"][3:19])


@pytest.mark.parametrize("bands", [None, [2, 0]])
def test_the_stream_yields_every_date_with_its_validity(three_dates, bands):
    path, expected = three_dates
    stream = TileStream(path, (0, 20), shard_tiles=8, batch_size=6, nodata=0, ignore_index=schema.IGNORE_INDEX,
                        bands=bands, shuffle=False)
    seen, ignored = [], 0
    picked = [0, 1, 2, 3] if bands is None else bands
    for batch in stream:
        tiles = batch["tile"].numpy()
        seen += tiles.tolist()
        assert batch["image"].shape == (len(tiles), 3, len(picked), 16, 16)
        np.testing.assert_array_equal(batch["image"].numpy(), expected["images"][tiles][:, :, picked])
        np.testing.assert_array_equal(batch["date_valid"].numpy(), expected["date_valid"][tiles])
        missing = ~expected["valid"][tiles].any(axis=1)  # no data on any date: ignored
        np.testing.assert_array_equal(batch["label"].numpy(), np.where(missing, schema.IGNORE_INDEX, expected["labels"][tiles]))
        ignored += int(missing.sum())
    assert sorted(seen) == list(range(20)) and ignored == 4 * 16  # tile 5's top rows; tiles 2 and 6 have data each pixel


def test_the_datamodule_trains_on_several_dates(three_dates):
    # once refused in one line; the loader's T > 1 batches are tested in tests/data/test_time_batches.py
    dm = TileDataModule(str(three_dates[0]), batch_size=4, num_workers=0, augment=False)
    dm.setup("fit")
    batch = dm.normalise(next(iter(dm.train_dataloader())))
    assert batch["image"].shape == (4, 3, 4, 16, 16) and batch["date_valid"].shape == batch["dates"].shape == (4, 3)


def test_a_schema_version_it_does_not_read_is_refused_in_one_line(v1_copy):
    meta = json.loads((v1_copy / "zarr.json").read_text())
    meta["attributes"][schema.ATTR_SCHEMA] = 3
    (v1_copy / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"has schema version 3, this eoscale reads versions 1, 2") as err:
        open_store(v1_copy)
    assert "\n" not in str(err.value)


def test_a_version_2_store_without_its_dates_is_damaged(three_dates, tmp_path):
    import shutil

    path = Path(shutil.copytree(three_dates[0], tmp_path / "t3.zarr"))
    shutil.rmtree(path / schema.DATE_VALID)
    meta = json.loads((path / "zarr.json").read_text())
    meta.get("consolidated_metadata", {}).get("metadata", {}).pop(schema.DATE_VALID, None)
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="lacks date_valid"):
        read_store_attrs(path)
