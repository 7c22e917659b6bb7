"""`eoscale ingest` and `eoscale info` as a user runs them, and what the store holds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rasterio
import xarray as xr
import zarr
from affine import Affine
from rasterio.enums import Resampling
from rasterio.warp import reproject
from rasterio.windows import Window
from rasterio.windows import transform as window_transform

from eoscale import schema
from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.cli import main
from eoscale.data import open_store
from tests.rasters import write_band_directory


def run_ingest(rasters, out, *extra: str) -> int:
    return main([
        "ingest", "--scenes", str(rasters / "scenes" / "*.tif"), "--labels", str(rasters / "labels" / "*.tif"),
        "--classes", str(rasters / "classes.csv"), "--output", str(out), "--tile-size", "32", "--shard-tiles", "16",
        "--workers", "1", "--quiet", *extra,
    ])


@pytest.fixture(scope="module")
def store(rasters, tmp_path_factory):
    out = tmp_path_factory.mktemp("stores") / "tiles.zarr"
    assert run_ingest(rasters, out) == 0
    return out


def test_cli_ingest_then_info(store, capsys):
    assert main(["info", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["complete"] is True
    assert info["bands"] == ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    assert sum(s["tiles"] for s in info["splits"].values()) == info["tiles"] > 50
    assert main(["info", str(store)]) == 0
    assert "classes" in capsys.readouterr().out


def test_store_opens_with_xarray_and_zarr_and_shards_are_real(store):
    ds = xr.open_zarr(store)
    assert ds[schema.IMAGES].dims == ("tile", "time", "band", "y", "x")  # one date a scene: time 1
    assert ds.attrs[schema.ATTR_TIME_STEPS] == 1 and ds[schema.DATES].dims == ds[schema.DATE_VALID].dims == ("tile", "time")
    assert ds[schema.LABELS].dims == ("tile", "y", "x")
    assert ds[schema.IMAGES].dtype == np.uint16 and ds[schema.LABELS].dtype == np.uint8
    group = zarr.open_group(store, mode="r")
    images = group[schema.IMAGES]
    assert images.chunks == (1, 1, 10, 32, 32) and images.shards == (16, 1, 10, 32, 32)
    n = images.shape[0]
    shard_files = [f for f in (store / schema.IMAGES).rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert len(shard_files) == -(-n // 16)  # one file per shard, each holding many tiles
    assert max(f.stat().st_size for f in shard_files) > 16 * 10 * 32 * 32 * 2 / 20
    opened = open_store(store)
    assert opened[schema.IMAGES].data.chunks[0][0] == 16  # dask chunks are shards
    assert list(opened[schema.BAND].values) == ds.attrs[schema.ATTR_BANDS]


def test_tiles_keep_their_georeferencing_and_pixels(store):
    ds = xr.open_zarr(store)
    attrs = ds.attrs
    rng = np.random.default_rng(0)
    for t in rng.choice(ds.sizes["tile"], size=12, replace=False):
        tile = ds.isel(tile=int(t))
        geo = schema.tile_georef(attrs, tile.scene.values, tile.row_off.values, tile.col_off.values, tile.transform.values)
        path = attrs[schema.ATTR_SCENES][int(tile.scene)]["paths"][0]
        with rasterio.open(path) as src:
            window = Window(geo.col_off, geo.row_off, 32, 32)
            assert geo.transform == window_transform(window, src.transform)
            assert geo.crs == src.crs
            np.testing.assert_array_equal(tile[schema.IMAGES].isel(time=0).values, src.read(window=window))


def test_labels_match_a_full_reprojection(store, rasters):
    ds = xr.open_zarr(store)
    table = ClassTable.load(rasters / "classes.csv")
    lut = table.lookup_table()
    for scene_index, scene in enumerate(ds.attrs[schema.ATTR_SCENES]):
        label_path = rasters / "labels" / f"{scene['id']}_lc.tif"
        expected = np.full((scene["height"], scene["width"]), -1, dtype=np.int32)
        with rasterio.open(label_path) as lab:
            reproject(rasterio.band(lab, 1), expected, dst_transform=Affine(*scene["transform"]), dst_crs=scene["crs"],
                      dst_nodata=-1, resampling=Resampling.nearest)
        tiles = np.flatnonzero(ds.scene.values == scene_index)
        for t in tiles[:: max(1, len(tiles) // 10)]:
            r, c = int(ds.row_off[t]), int(ds.col_off[t])
            want = expected[r : r + 32, c : c + 32]
            want = np.where(want >= 0, lut[np.clip(want, 0, None)], IGNORE_INDEX)
            image = ds[schema.IMAGES][t, 0].values
            want[(image == 0).any(axis=0)] = IGNORE_INDEX  # nodata pixels are ignored
            np.testing.assert_array_equal(ds[schema.LABELS][t].values, want)


def test_attributes_statistics_and_splits(store):
    ds = xr.open_zarr(store)
    attrs = ds.attrs
    assert attrs[schema.ATTR_SCHEMA] == schema.SCHEMA_VERSION and attrs[schema.ATTR_COMPLETE] is True
    assert [c["code"] for c in attrs[schema.ATTR_CLASSES]] == [10, 30, 40, 80]
    images = ds[schema.IMAGES].values
    band = images[:, 0, 3]
    valid = band[band != 0].astype(np.float64)
    assert attrs[schema.ATTR_STATISTICS]["mean"][3] == pytest.approx(valid.mean())
    assert attrs[schema.ATTR_STATISTICS]["std"][3] == pytest.approx(valid.std())
    assert attrs[schema.ATTR_STATISTICS]["p50"][3] == np.percentile(valid, 50, method="inverted_cdf")
    # splits are contiguous ranges that cover every tile in order
    ranges = [attrs[schema.ATTR_SPLITS][s] for s in schema.SPLITS]
    assert ranges[0][0] == 0 and ranges[-1][1] == ds.sizes["tile"]
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    split = ds[schema.SPLIT].values
    for i, (start, stop) in enumerate(ranges):
        assert (split[start:stop] == i).all()
    counts = ds[schema.CLASS_COUNTS].values
    labels = ds[schema.LABELS].values
    np.testing.assert_array_equal(counts[5], np.bincount(labels[5][labels[5] != IGNORE_INDEX], minlength=4))


def test_band_directories_resample_20m_bands_onto_the_10m_grid(rasters, tmp_path):
    source = rasters / "scenes" / "scene0.tif"
    write_band_directory(source, tmp_path / "scene0")
    out = tmp_path / "perband.zarr"
    assert main(["ingest", "--scenes", str(tmp_path / "scene0"), "--labels", str(rasters / "labels" / "scene0_lc.tif"),
                 "--classes", str(rasters / "classes.csv"), "--output", str(out), "--tile-size", "32",
                 "--workers", "1", "-q"]) == 0
    ds = xr.open_zarr(out)
    assert ds.attrs[schema.ATTR_BANDS] == ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    with rasterio.open(source) as src:
        original = src.read()
    for t in range(0, ds.sizes["tile"], 7):
        r, c = int(ds.row_off[t]), int(ds.col_off[t])
        tile = ds[schema.IMAGES][t, 0].values.astype(np.float64)
        truth = original[:, r : r + 32, c : c + 32].astype(np.float64)
        np.testing.assert_array_equal(tile[[0, 1, 2, 6]], truth[[0, 1, 2, 6]])  # the 10 m bands, untouched
        inner = (slice(2, -2), slice(2, -2))
        valid = (truth != 0).all(axis=0)[inner]
        error = np.abs(tile[3][inner] - truth[3][inner])[valid]
        assert np.median(error) < 250  # 20 m band upsampled bilinearly: close to the 10 m truth (noise ±200)


def test_ingest_on_an_existing_dask_scheduler_matches_the_local_cluster(rasters, store, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        out = tmp_path / "remote.zarr"
        assert run_ingest(rasters, out, "--scheduler", cluster.scheduler_address) == 0
    def tree(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert tree(out) == tree(store)


def test_a_failed_shard_leaves_no_scene_open_on_the_users_cluster(rasters, tmp_path, monkeypatch, capsys):
    """Shard tasks keep their thread's scene open between tasks (`writer.open_reader`); when one fails, the
    ingest still closes them on every worker, or a long-lived cluster would hold the files until its next ingest."""
    from distributed import LocalCluster

    from eoscale.ingest import run as ingest_run
    from eoscale.ingest import writer

    real = ingest_run.write_shard

    def second_shard_fails(store, progress, k, *args):
        if k == 1:
            raise OSError(28, "No space left on device")
        return real(store, progress, k, *args)

    monkeypatch.setattr(ingest_run, "write_shard", second_shard_fails)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        assert run_ingest(rasters, tmp_path / "x.zarr", "--scheduler", cluster.scheduler_address) == 1
        # the task's own error (not "cancelled"), in one line: a full disk is not a bug
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "eoscale ingest: error: No space left on device: free space (or ask for more quota) or write to another "
            "file system, then run the command again")
        assert not writer._held  # the worker's thread wrote shard 0 with a reader it kept, then shard 1 failed


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_an_unreachable_scheduler_is_one_line(rasters, tmp_path, capsys):
    assert run_ingest(rasters, tmp_path / "x.zarr", "--scheduler", "tcp://127.0.0.1:9") == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err


def test_a_tile_carries_its_scenes_utc_acquisition_day_never_the_files_writing_time(rasters, tmp_path):
    # guards issue 46 item 3: an acquisition at 23:30 -02:00 is the next day in UTC (the offset was dropped), and a
    # GeoTIFF's TIFFTAG_DATETIME (when the file was written) was taken for an acquisition date
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for name, tags in (("scene0.tif", {"ns": "IMAGERY", "ACQUISITIONDATETIME": "2024-06-10T23:30:00-02:00"}),
                       ("scene1.tif", {"TIFFTAG_DATETIME": "2021:07:04 10:00:00"})):
        with rasterio.open(rasters / "scenes" / name) as src:
            profile, pixels, descriptions = src.profile, src.read(), src.descriptions
        with rasterio.open(scenes / name, "w", **profile) as dst:
            dst.write(pixels)
            dst.descriptions = descriptions
            dst.update_tags(**tags)
    out = tmp_path / "dated.zarr"
    assert main(["ingest", "--scenes", str(scenes / "*.tif"), "--labels", str(rasters / "labels" / "*.tif"),
                 "--classes", str(rasters / "classes.csv"), "--output", str(out), "--tile-size", "32",
                 "--workers", "1", "--quiet"]) == 0
    ds = open_store(out)
    dates, scene = ds[schema.DATES].values[:, 0], ds[schema.SCENE].values
    assert (scene == 0).any() and (scene == 1).any()
    assert (dates[scene == 0].astype("datetime64[D]") == np.datetime64("2024-06-11")).all()
    assert np.isnat(dates[scene == 1]).all()
