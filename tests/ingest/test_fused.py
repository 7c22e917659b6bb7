"""`eoscale ingest` of scenes of several sensors: Sentinel-2 and Sentinel-1 given together become one store on the
Sentinel-2 grids with the radar bands beside (`eoscale.raster.fused`); STAC Items and folders of the same set give the
same store; the `sensors` attribute; each band's statistics over the pixels where its own sensor has data; a pixel
without data is one where every sensor has none; refusals in one line with nothing written."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from affine import Affine
from rasterio.crs import CRS

from eoscale.cli import main
from eoscale.ingest.stats import statistics_from_histograms
from eoscale.raster.fused import choose
from eoscale.raster.scene import BandFile, Scene
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize

S2 = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("fusedset") / "set", scenes=2, size=(128, 160), seed=2,
                      sensors=("s2", "s1", "dem"), layout="cog")


def _ingest(out, fused, *inputs):
    return main(["ingest", *inputs, "--labels", *map(str, fused.label_paths), "--classes", str(fused.class_table_path),
                 "--output", str(out), "--tile-size", "32", "--workers", "1", "--quiet"])


def _items(fused):
    return ["--stac", *map(str, fused.item_paths), *map(str, fused.sar_items)]


def test_items_and_folders_give_one_store_of_both_sensors(fused, tmp_path, capsys):
    assert _ingest(tmp_path / "items.zarr", fused, *_items(fused)) == 0
    folders = [str(p.parent) for p in fused.sar_items]
    assert _ingest(tmp_path / "folders.zarr", fused, "--stac", *map(str, fused.item_paths), "--scenes", *folders) == 0
    items, from_folders = open_store(tmp_path / "items.zarr"), open_store(tmp_path / "folders.zarr")
    for name in (schema.IMAGES, schema.LABELS):
        np.testing.assert_array_equal(items[name].values, from_folders[name].values)
    attrs = items.attrs
    assert attrs[schema.ATTR_STATISTICS] == from_folders.attrs[schema.ATTR_STATISTICS]
    assert attrs[schema.ATTR_SENSOR] == "sentinel-2" and attrs[schema.ATTR_BANDS] == S2 + ["VV", "VH"]
    assert attrs[schema.ATTR_SENSORS] == [{"name": "sentinel-2", "bands": S2}, {"name": "sentinel-1",
                                                                              "bands": ["VV", "VH"]}]
    assert attrs[schema.ATTR_SENSORS] == from_folders.attrs[schema.ATTR_SENSORS]
    # each reference scene records the radar scene used, its date and orbit
    records = [s["fused"][0] for s in attrs[schema.ATTR_SCENES]]
    assert [r["orbit_state"] for r in records] == ["ascending", "descending"]
    assert [r["date"] for r in records] == ["2024-06-02", "2024-06-08"] and all(r["overlap"] == 1.0 for r in records)
    # the radar files are inputs of the store (its lineage and the resume fingerprint)
    assert any(p["path"].endswith("vv.tif") for p in attrs[schema.ATTR_INPUTS])
    capsys.readouterr()
    assert main(["info", "--json", str(tmp_path / "items.zarr")]) == 0
    assert json.loads(capsys.readouterr().out)["sensors"] == attrs[schema.ATTR_SENSORS]


def test_each_sensor_keeps_its_own_nodata_and_statistics(fused, tmp_path):
    assert _ingest(tmp_path / "s.zarr", fused, *_items(fused)) == 0
    store = open_store(tmp_path / "s.zarr")
    images, labels = store[schema.IMAGES].values[:, 0], store[schema.LABELS].values
    nodata = store.attrs[schema.ATTR_NODATA]
    optical_missing = (images[:, :10] == nodata).all(axis=1)
    radar_missing = (images[:, 10:] == nodata).all(axis=1)
    # the optical swath's gap and the radar's are not the same pixels: each sensor's bands at nodata only where it has
    # none; a pixel without data (labels ignored) is one where both have none
    assert (optical_missing & ~radar_missing).any() and (radar_missing & ~optical_missing).any()
    assert (labels[optical_missing & radar_missing] == store.attrs[schema.ATTR_IGNORE_INDEX]).all()
    assert ((images[:, :10] == nodata) == optical_missing[:, None]).all()  # no optical band at nodata alone
    # each band's statistics over the pixels where its own sensor has data, exactly
    stats = store.attrs[schema.ATTR_STATISTICS]
    for band, missing in ((0, optical_missing), (10, radar_missing)):
        values = images[:, band][~missing]
        assert stats["valid_pixels"][band] == values.size
        assert stats["mean"][band] == pytest.approx(values.mean(), rel=1e-9)
    assert stats["valid_pixels"][0] != stats["valid_pixels"][10]
    mean_db = np.array(stats["mean"][10:]) * 0.01 - 100
    assert -16 < mean_db[0] < -6 and mean_db[1] < mean_db[0] - 4  # VV, and VH below it


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_one_sensor_keeps_no_sensors_record_and_a_dem_makes_two_groups(fused, tmp_path):
    assert _ingest(tmp_path / "one.zarr", fused, "--stac", *map(str, fused.item_paths)) == 0
    assert schema.ATTR_SENSORS not in open_store(tmp_path / "one.zarr").attrs
    dems = [str(p.with_suffix(".tif")) for p in fused.dem_items]
    assert _ingest(tmp_path / "dem.zarr", fused, "--stac", *map(str, fused.item_paths), "--static", *dems) == 0
    assert open_store(tmp_path / "dem.zarr").attrs[schema.ATTR_SENSORS] == [
        {"name": "sentinel-2", "bands": S2}, {"name": "copdem", "bands": ["ELEVATION", "SLOPE", "ASPECT_SIN",
                                                                      "ASPECT_COS"]}]
    assert _ingest(tmp_path / "all.zarr", fused, *_items(fused), "--static", *dems) == 0
    assert [g["name"] for g in open_store(tmp_path / "all.zarr").attrs[schema.ATTR_SENSORS]] == [
        "sentinel-2", "sentinel-1", "copdem"]


def test_the_radar_as_reference_sensor(fused, tmp_path):
    assert _ingest(tmp_path / "r.zarr", fused, *_items(fused), "--reference-sensor", "sentinel-1") == 0
    attrs = open_store(tmp_path / "r.zarr").attrs
    assert attrs[schema.ATTR_SENSOR] == "sentinel-1" and attrs[schema.ATTR_BANDS] == ["VV", "VH"] + S2


@pytest.mark.parametrize(("case", "expected"), [
    ("no-overlap", "has no sentinel-1 data: none of the Sentinel-1 C-SAR scenes given overlaps it"),
    # a season of several sensors is ingested (tests/ingest/test_fused_season.py); a place without radar still refused
    ("time-series", "has no sentinel-1 data: none of the Sentinel-1 C-SAR scenes given covers half of it"),
    ("reference", "--reference-sensor 'landsat-oli': no scene of it was given"),
    ("dem-scene", "is a DEM (Copernicus DEM): give its file with --static DEM.tif"),
    ("twice", "two scenes share an id"),
])
def test_refusals_are_one_line_and_nothing_is_written(fused, tmp_path, capsys, case, expected):
    optical = ["--stac", *map(str, fused.item_paths)]
    inputs = {
        "no-overlap": [*optical, str(fused.sar_items[0])],  # the second optical scene has no radar scene over it
        "time-series": [*optical, str(fused.sar_items[0]), "--time-series"],
        "reference": [*_items(fused), "--reference-sensor", "landsat-oli"],
        "dem-scene": [*_items(fused), str(fused.dem_items[0])],
        "twice": [*_items(fused), "--scenes", str(fused.sar_items[0].parent)],
    }[case]
    out = tmp_path / "bad.zarr"
    assert _ingest(out, fused, *inputs) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("bad.zarr*"))


def _scene(name, left, width, date, sensor="sentinel-1"):
    return Scene(name, (BandFile("VV", f"{name}.tif", 1),), CRS.from_epsg(32632), Affine(10, 0, left, 0, -10, 1000),
                 width, 100, 0.0, sensor=sensor, date=dt.date(2024, 6, date))


def test_a_reference_scene_takes_the_most_overlapping_then_the_nearest_scene():
    ref = _scene("ref", 0, 100, 10, sensor="sentinel-2")
    half, whole_far, whole_near, away = (_scene("half", 500, 100, 10), _scene("far", 0, 100, 1),
                                         _scene("near", -10, 110, 12), _scene("away", 5000, 100, 10))
    assert choose(ref, [half, whole_far])[0] is whole_far  # overlap first: all of it beats half of it
    assert choose(ref, [whole_far, whole_near, half])[0] is whole_near  # then the nearest date
    assert choose(ref, [away]) is None
    assert choose(ref, [half])[1] == pytest.approx(0.5)


def test_a_band_without_valid_pixels_has_zero_statistics_not_nan():
    # a band with no valid pixel in the whole store: its statistics are zeros, not NaN. json.dumps
    # writes NaN unless told not to, and the store's attributes must be strict JSON
    empty = statistics_from_histograms(np.zeros((1, 65536), np.int64))
    json.dumps(empty, allow_nan=False)
    assert all(v == [0.0] for v in empty.values()), empty
