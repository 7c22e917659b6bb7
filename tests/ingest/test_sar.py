"""`eoscale ingest` of Sentinel-1 backscatter: a radar-only store from STAC Items and from folders, in dB with the
scale recorded; a scale stated against the values is refused in one line, nothing written."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from eoscale.sensors.sentinel1 import power_to_db
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("s1set") / "set", scenes=2, size=(128, 160), seed=2,
                      sensors=("s2", "s1"))


def _ingest(tmp_path, name, *inputs, fused):
    out = tmp_path / name
    code = main(["ingest", *inputs, "--labels", *map(str, fused.label_paths), "--classes", str(fused.class_table_path),
                 "--output", str(out), "--tile-size", "32", "--workers", "1", "--quiet"])
    return code, out


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_a_radar_store_from_items_and_from_folders(fused, tmp_path):
    code, store = _ingest(tmp_path, "items.zarr", "--stac", *map(str, fused.sar_items), fused=fused)
    assert code == 0
    ds = open_store(store)
    attrs = ds.attrs
    assert attrs[schema.ATTR_SENSOR] == "sentinel-1" and attrs[schema.ATTR_BANDS] == ["VV", "VH"]
    scenes = attrs[schema.ATTR_SCENES]
    assert [s["acquisition"]["orbit_state"] for s in scenes] == ["ascending", "descending"]
    assert all(s["radiometry"]["units"] == "dB" and s["radiometry"]["scale"] == 0.01 and
               s["radiometry"]["offset"] == -100 for s in scenes)
    mean_db = np.array(attrs[schema.ATTR_STATISTICS]["mean"]) * 0.01 - 100
    assert -16 < mean_db[0] < -6 and mean_db[1] < mean_db[0] - 4  # VV over farmland and forest; VH below it
    assert ds[schema.DATES].values.astype("datetime64[D]").astype(str)[:, 0].tolist().count("2024-06-02") > 0

    folders = [str(p.parent) for p in fused.sar_items]
    code, from_folders = _ingest(tmp_path, "folders.zarr", "--scenes", *folders, fused=fused)
    assert code == 0
    np.testing.assert_array_equal(open_store(from_folders)[schema.IMAGES].values, ds[schema.IMAGES].values)


def test_db_files_labelled_linear_are_refused_and_nothing_written(fused, tmp_path, capsys):
    folder = tmp_path / fused.sar_items[0].parent.name
    shutil.copytree(fused.sar_items[0].parent, folder)
    for name in ("vv.tif", "vh.tif"):
        with rasterio.open(folder / name) as src:
            power, profile = src.read(1), src.profile
        with rasterio.open(folder / name, "w", **{**profile, "driver": "GTiff"}) as dst:
            dst.write(np.where(power > 0, power_to_db(power), 0).astype("float32"), 1)
    item = next(folder.glob("*.json"))
    assert json.loads(item.read_text())["assets"]["vv"]["raster:bands"][0]["unit"] == "linear"
    code, out = _ingest(tmp_path, "bad.zarr", "--stac", str(item), fused=fused)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "stated to be linear power but its values are in dB" in err and len(err.splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob("bad.zarr*"))
