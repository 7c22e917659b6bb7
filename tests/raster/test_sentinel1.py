"""Sentinel-1 backscatter products as scenes (`eoscale.raster.formats.sentinel1`): STAC Items and folders, linear power
and decibels onto one store scale, the scale stated against the values, border noise, dates and orbits."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import numpy as np
import pytest
import rasterio

from eoscale.errors import InputError
from eoscale.raster.formats import detect_format, sentinel1
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene, open_scenes
from eoscale.sensors.sentinel1 import power_to_db
from eoscale.synth.landcover import generate_landcover
from eoscale.synth.sar import write_sentinel1
from eoscale.synth.scene import scene_transform

SHAPE = (160, 192)


@pytest.fixture(scope="module")
def radar(tmp_path_factory):
    """Two synthetic Sentinel-1 folders (vv.tif, vh.tif, Item), the second with a swath edge and border noise."""
    root = tmp_path_factory.mktemp("s1")
    written = []
    for index in range(2):
        landcover = generate_landcover(SHAPE, np.random.default_rng([5, index]))
        written.append(write_sentinel1(root, index, landcover, scene_transform(index, SHAPE), seed=5,
                                       edge_share=float(index)))
    return root, written


def _to_db(source, target, *, unit: str) -> None:
    """`source`'s linear power written as dB (nodata 0 kept) to `target`, its band unit set to `unit`."""
    with rasterio.open(source) as src:
        power, profile = src.read(1), src.profile
    with rasterio.open(target, "w", **{**profile, "driver": "GTiff"}) as dst:
        dst.write(np.where(power > 0, power_to_db(power), 0).astype("float32"), 1)
        dst.set_band_unit(1, unit)


def _read(scene):
    with SceneReader(scene) as reader:
        return reader.read_masked(0, 0, scene.height, scene.width)


def test_an_item_opens_as_a_scene_in_db_with_its_orbit(radar):
    root, written = radar
    scene = open_scenes([], stac=[str(root / written[0]["item"])])[0]
    assert scene.sensor == "sentinel-1" and scene.band_names == ["VV", "VH"] and scene.platform == "sentinel-1a"
    assert scene.date == dt.date(2024, 6, 2)
    assert scene.acquisition["orbit_state"] == "ascending" and scene.acquisition["relative_orbit"] == 88
    assert scene.radiometry["units"] == "dB" and scene.radiometry["backscatter"].startswith("gamma0")
    assert scene.radiometry["bands"]["VV"] == {"source": "asset vv", "file": "linear", "from": "metadata",
                                              "values": "linear"}
    window = _read(scene)
    with rasterio.open(root / written[0]["bands"]["VV"]) as src:
        power = src.read(1)
    expected = np.rint(power_to_db(power) * 100 + 10_000)
    valid = window.valid
    np.testing.assert_array_equal(window.pixels[0][valid], expected[valid])
    assert (window.pixels[0][~valid] == 0).all()
    assert scene.to_attrs()["acquisition"]["orbit_state"] == "ascending"


def test_a_folder_with_or_without_its_item_gives_the_same_pixels(radar, tmp_path):
    root, written = radar
    folder = root / written[1]["folder"]
    assert detect_format(str(folder)) is sentinel1.FORMAT
    with_item = open_scene(str(folder))
    bare = tmp_path / folder.name
    bare.mkdir()
    for name in ("vv.tif", "vh.tif"):
        shutil.copy(folder / name, bare / name)
    without = open_scene(str(bare))
    assert without.date == with_item.date == dt.date(2024, 6, 8)  # the product name's start of sensing
    assert without.acquisition["orbit_state"] == "descending" and without.radiometry["bands"]["VV"]["from"] == "metadata"
    np.testing.assert_array_equal(_read(without).pixels, _read(with_item).pixels)


def test_decibel_files_land_on_the_same_store_values(radar, tmp_path):
    root, written = radar
    folder = root / written[0]["folder"]
    db = tmp_path / "S1A_IW_GRDH_1SDV_20240602T171524_db"
    db.mkdir()
    for name in ("vv.tif", "vh.tif"):
        _to_db(folder / name, db / name, unit="")
    scene = open_scene(str(db))
    assert [b.decode for b in scene.bands] == ["float", "float"]
    assert scene.radiometry["bands"]["VV"]["from"] == "values"  # no unit stated: the values decide
    linear = _read(open_scene(str(folder)))
    from_db = _read(scene)
    assert (from_db.valid == linear.valid).all()
    assert np.abs(from_db.pixels.astype(int) - linear.pixels.astype(int)).max() <= 1  # 0.01 dB


def test_a_scale_stated_against_the_values_is_refused(radar, tmp_path):
    root, written = radar
    folder = tmp_path / "wrong"
    shutil.copytree(root / written[0]["folder"], folder)
    item = next(folder.glob("*.json"))
    for name in ("vv.tif", "vh.tif"):  # the files hold dB, the Item still says linear
        _to_db(folder / name, folder / name, unit="")
    with pytest.raises(InputError, match="stated to be linear power but its values are in dB"):
        open_scenes([], stac=[str(item)])
    data = json.loads(item.read_text())
    for key in ("vv", "vh"):
        data["assets"][key]["raster:bands"][0]["unit"] = "dB"
    item.write_text(json.dumps(data))
    assert open_scenes([], stac=[str(item)])[0].radiometry["bands"]["VV"]["file"] == "dB"


def test_digital_numbers_are_refused(tmp_path):
    folder = tmp_path / "S1A_IW_GRDH_1SDV_20230615T171524_20230615T171549_049000_05E4A1_1F2B.SAFE_measurement"
    folder.mkdir()
    for pol in ("vv", "vh"):
        with rasterio.open(folder / f"iw-{pol}.tiff", "w", driver="GTiff", width=32, height=32, count=1,
                           dtype="uint16", crs="EPSG:32632", transform=scene_transform(0, (32, 32))) as dst:
            dst.write(np.full((1, 32, 32), 120, "uint16"))
    with pytest.raises(InputError, match="digital numbers, not calibrated backscatter"):
        open_scene(str(folder))


def test_border_noise_along_the_swath_edge_is_masked(radar):
    root, written = radar
    scene = open_scenes([], stac=[str(root / written[1]["item"])])[0]
    window = _read(scene)
    noise = window.by_mask & ~window.by_nodata
    assert noise.sum() > 100  # the strip beside the nodata wedge
    assert (window.pixels[:, noise] <= 6500).all()  # every band at or below -35 dB
    with SceneReader(scene) as reader:
        # the rule is decided on a halo: the same pixels in small windows as in the whole scene
        part = reader.read_masked(40, 50, 32, 32)
        assert (part.by_mask == window.by_mask[40:72, 50:82]).all()
        assert part.by_mask.any() and not part.by_mask.all()  # the window holds both: the comparison says something
        assert (reader.planning_mask() == window.valid).all()
