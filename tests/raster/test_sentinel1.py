"""Sentinel-1 backscatter products as scenes (`eoscale.raster.formats.sentinel1`): STAC Items and folders, linear power
and decibels onto one store scale (resampled in linear power either way), noise removal's negative power as data at
the floor, the scale stated against the values, border noise, dates and orbits."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.enums import Resampling
from rasterio.warp import calculate_default_transform

from eoscale.errors import InputError
from eoscale.raster.formats import detect_format, sentinel1
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene, open_scenes
from eoscale.sensors.sentinel1 import DB_FLOOR, power_to_db
from eoscale.synth.landcover import generate_landcover
from eoscale.synth.sar import ENL, write_sentinel1
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
    assert [b.decode for b in scene.bands] == ["db", "db"]
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


FIELD = (64, 80)  # a speckled field of 20 m pixels
FIELD_TRANSFORM = Affine(20.0, 0.0, 300_000.0, 0.0, -20.0, 5_650_000.0)


def _field_files(folder, *, unit: str, power: list[np.ndarray], nodata: float | None = 0.0,
                 stated: bool = False) -> str:
    """`folder` holding vv.tif and vh.tif of `power` at 20 m (EPSG:32632): as it is (`unit` linear) or in dB (nodata
    kept); the band unit stated, or left for the values to say."""
    folder.mkdir(parents=True)
    for name, image in zip(("vv", "vh"), power, strict=True):
        fill = nodata if nodata is not None else 0.0
        values = image if unit == "linear" else np.where(image == fill, fill, power_to_db(image))
        with rasterio.open(folder / f"{name}.tif", "w", driver="GTiff", width=FIELD[1], height=FIELD[0], count=1,
                           dtype="float32", crs="EPSG:32632", transform=FIELD_TRANSFORM, nodata=nodata) as dst:
            dst.write(values.astype(np.float32)[None])
            if stated:
                dst.set_band_unit(1, unit)
    return str(folder)


def _speckled_power(seed: int) -> list[np.ndarray]:
    """VV and VH power of a smooth field (-14…-6 dB, VH 6 dB below) under speckle of the synthetic scenes' looks, a
    wedge of nodata (0) in one corner."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:FIELD[0], 0:FIELD[1]]
    level = -10.0 + 4.0 * np.sin(rows / 9.0) * np.cos(cols / 13.0)
    wedge = rows + cols < 20
    out = []
    for offset in (0.0, -6.0):
        power = 10 ** ((level + offset) / 10) * rng.gamma(ENL, 1.0 / ENL, FIELD)
        out.append(np.where(wedge, 0.0, power).astype(np.float32))
    return out


def _on_grid(scene, crs, transform, width, height):
    return replace(scene, crs=rasterio.crs.CRS.from_user_input(crs), transform=transform, width=width, height=height)


def _read_in_windows(scene, resampling, size=24):
    """The scene read window by window (as ingest and predict read it), joined: pixels and validity."""
    pixels = np.zeros((len(scene.bands), scene.height, scene.width), np.uint16)
    valid = np.zeros((scene.height, scene.width), bool)
    with SceneReader(scene, resampling=resampling) as reader:
        for row in range(0, scene.height, size):
            for col in range(0, scene.width, size):
                h, w = min(size, scene.height - row), min(size, scene.width - col)
                window = reader.read_masked(row, col, h, w)
                pixels[:, row:row + h, col:col + w], valid[row:row + h, col:col + w] = window.pixels, window.valid
    return pixels, valid


def _grids():
    """(CRS, transform, width, height, resampling) of grids to warp the 20 m field onto."""
    left, top = FIELD_TRANSFORM.c, FIELD_TRANSFORM.f
    zone33, width, height = calculate_default_transform("EPSG:32632", "EPSG:32633", FIELD[1], FIELD[0], left=left,
                                                        bottom=top - 20 * FIELD[0], right=left + 20 * FIELD[1], top=top,
                                                        resolution=15.0)
    return {
        "10 m, bilinear": ("EPSG:32632", FIELD_TRANSFORM @ Affine.scale(0.5), 2 * FIELD[1], 2 * FIELD[0],
                           Resampling.bilinear),
        "40 m, average": ("EPSG:32632", FIELD_TRANSFORM @ Affine.scale(2), FIELD[1] // 2, FIELD[0] // 2,
                          Resampling.average),
        "40 m, bilinear": ("EPSG:32632", FIELD_TRANSFORM @ Affine.scale(2), FIELD[1] // 2, FIELD[0] // 2,
                           Resampling.bilinear),
        "15 m in the next UTM zone": ("EPSG:32633", zone33, width, height, Resampling.bilinear),
    }


@pytest.mark.parametrize("grid", list(_grids()))
def test_db_and_linear_files_give_the_same_warped_power(grid, tmp_path):
    # guards issue 46 item 1: a dB file was warped in dB (bilinear or averaged logarithms of speckle: ~0.8 dB low on
    # average, several dB at a pixel); resampled in linear power, the two files give the same store values
    power = _speckled_power(7)
    linear = open_scene(_field_files(tmp_path / "linear", unit="linear", power=power))
    db = open_scene(_field_files(tmp_path / "db", unit="dB", power=power))
    crs, transform, width, height, resampling = _grids()[grid]
    from_linear, linear_valid = _read_in_windows(_on_grid(linear, crs, transform, width, height), resampling)
    from_db, db_valid = _read_in_windows(_on_grid(db, crs, transform, width, height), resampling)
    assert (db_valid == linear_valid).all() and 0.6 < linear_valid.mean() < 1  # the wedge is nodata in both
    difference_db = np.abs(from_db.astype(int) - from_linear.astype(int))[:, linear_valid] * 0.01
    assert difference_db.max() <= 0.05, f"{grid}: dB and linear files differ by up to {difference_db.max():.2f} dB"


def test_noise_removal_negatives_are_data_at_the_floor(tmp_path):
    # guards issue 46 item 2: power <= 0 was taken for nodata, so the small negative power that thermal-noise removal
    # leaves over calm water made a hole of every water body; only the file's nodata is nodata
    power = _speckled_power(3)
    rng = np.random.default_rng(4)
    water = (slice(40, 60), slice(50, 76))  # far (> 500 m) from the nodata wedge: no border noise
    for image in power:
        image[water] = rng.uniform(-3e-4, 2e-5, (20, 26)).astype(np.float32)
    floor = int(round(DB_FLOOR * 100 + 10_000))
    declared_zero = open_scene(_field_files(tmp_path / "zero", unit="linear", power=power, stated=True))
    window = _read(declared_zero)
    assert window.valid[water].all()
    for band, image in enumerate(power):
        assert (window.pixels[band][image < 0] == floor).all() and (image < 0).sum() > 300
    wedge = power[0] == 0
    wedge[water] = False
    assert not window.valid[wedge].any()  # the file's nodata (0) stays nodata
    nan_nodata = [np.where(image == 0, np.nan, image).astype(np.float32) for image in power]
    for image in nan_nodata:
        image[40, 50] = 0.0  # 0 power in a file whose nodata is NaN: data at the floor
    window = _read(open_scene(_field_files(tmp_path / "nan", unit="linear", power=nan_nodata, nodata=float("nan"),
                                           stated=True)))
    assert window.valid[40, 50] and (window.pixels[:, 40, 50] == floor).all()
    assert window.valid[water].all() and not window.valid[wedge].any()
    # warped onto a finer grid, the water is data still
    crs, transform, width, height, resampling = _grids()["10 m, bilinear"]
    pixels, valid = _read_in_windows(_on_grid(declared_zero, crs, transform, width, height), resampling)
    assert valid[82:118, 102:150].all() and (pixels[:, 82:118, 102:150] < floor + 300).all()
    # without a stated unit the values still say linear power: small negatives are no decibels
    unstated = open_scene(_field_files(tmp_path / "unstated", unit="linear", power=power))
    assert unstated.radiometry["bands"]["VV"] == {"source": "file vv.tif", "file": "linear", "from": "values",
                                                  "values": "linear"}
