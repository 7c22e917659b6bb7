"""`eoscale synth --sensors s2,s1,dem`: Sentinel-1 backscatter that says the land cover as C band sees it, with
speckle; a DEM whose water lies in valleys and whose wetlands are flat and low; COGs with STAC Items; the optical set
unchanged."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pystac
import pytest
import rasterio
from rasterio.warp import Resampling, reproject
from rio_cogeo.cogeo import cog_validate
from scipy import ndimage

from eoscale.cli import main
from eoscale.synth import synthesize
from eoscale.synth.landcover import BUILT, CROP, GRASS, TREE, WATER, WETLAND, generate_landcover
from eoscale.synth.sar import ENL, backscatter

SHAPE = (192, 224)


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("fused") / "set", scenes=2, size=SHAPE, seed=4, layout="cog",
                      sensors=("s2", "s1", "dem"))


def _db(power):
    return 10 * np.log10(np.mean(power))


def test_backscatter_follows_the_land_cover():
    landcover = generate_landcover((384, 384), np.random.default_rng([1, 0]))
    vv, vh = backscatter(landcover, np.random.default_rng(2))
    classes = landcover.classes
    mean_vv = {c: _db(vv[classes == c]) for c in (TREE, GRASS, CROP, BUILT, WATER)}
    mean_vh = {c: _db(vh[classes == c]) for c in (TREE, GRASS, CROP, BUILT, WATER)}
    assert mean_vv[WATER] < -20 and mean_vh[WATER] < -25  # a mirror: the pulse goes away
    assert mean_vv[BUILT] == max(mean_vv.values())  # double bounce
    ratio = {c: mean_vv[c] - mean_vh[c] for c in mean_vv}
    assert ratio[TREE] < ratio[GRASS] and ratio[TREE] < ratio[BUILT]  # volume scattering depolarises
    assert mean_vv[WATER] < mean_vv[GRASS] < mean_vv[TREE]


def test_speckle_has_the_equivalent_number_of_looks():
    landcover = generate_landcover((256, 256), np.random.default_rng([1, 1]))
    flat = type(landcover)(np.full((256, 256), GRASS, np.uint8), np.zeros((256, 256), np.int32), 1)
    vv, _ = backscatter(flat, np.random.default_rng(3))
    # ENL = mean² / variance of intensity over a homogeneous area (texture adds a little variance)
    enl = vv.mean() ** 2 / vv.var()
    assert 0.7 * ENL < enl <= 1.05 * ENL


def test_radar_and_dem_are_cogs_with_items(fused):
    assert len(fused.sar_items) == len(fused.dem_items) == 2
    # one pass of each direction, in date order ('in (ascending, descending)' held for two of one direction)
    assert [pystac.Item.from_file(str(p)).properties["sat:orbit_state"] for p in fused.sar_items] == [
        "ascending", "descending"]
    for path in fused.sar_items:
        item = pystac.Item.from_file(str(path))
        assert item.properties["sar:polarizations"] == ["VV", "VH"] and item.collection_id == "sentinel-1-rtc"
        for key in ("vv", "vh"):
            file = path.parent / item.assets[key].href
            assert cog_validate(str(file), quiet=True)[0]
            with rasterio.open(file) as src:
                assert src.dtypes[0] == "float32" and src.nodata == 0 and src.units[0] == "linear"
    for path in fused.dem_items:
        file = path.parent / pystac.Item.from_file(str(path)).assets["data"].href
        assert cog_validate(str(file), quiet=True)[0]
        with rasterio.open(file) as src:
            assert src.crs.to_epsg() == 4326 and src.nodata == -32767 and src.dtypes[0] == "float32"
            assert src.res == pytest.approx((1.5 / 3600, 1 / 3600))


def test_the_dem_puts_water_in_valleys_and_wetlands_flat_and_low(fused):
    manifest = json.loads(fused.manifest_path.read_text())
    for record, labels in zip(manifest["scenes"], fused.label_paths, strict=True):
        with rasterio.open(labels) as src:
            classes = src.read(1)
            heights = np.full(classes.shape, np.nan, np.float32)
            with rasterio.open(fused.out_dir / record["dem"]["file"]) as dem:
                reproject(rasterio.band(dem, 1), heights, dst_transform=src.transform, dst_crs=src.crs,
                          resampling=Resampling.bilinear, dst_nodata=np.nan)
        classes[~np.isfinite(heights)] = 0  # the labels reach beyond the scene's DEM
        land = np.isin(classes, (TREE, GRASS, CROP, BUILT))
        filled = np.where(land, heights, 0.0)
        around = ndimage.uniform_filter(filled, 31) / np.maximum(ndimage.uniform_filter(land * 1.0, 31), 1e-6)
        for cls in (WATER, WETLAND):  # lower than the land within 300 m of it
            inside = (classes == cls) & (ndimage.uniform_filter(land * 1.0, 31) > 0.2)
            if inside.sum() > 50:
                assert np.median(around[inside] - heights[inside]) > 2
        # wetlands lie just above the water beside them, land beside the water rises
        water = classes == WATER
        if water.sum() > 50:
            distance, (rows, cols) = ndimage.distance_transform_edt(~water, return_indices=True)
            above = heights - heights[rows, cols]
            near = (distance > 2) & (distance < 10)  # 40-200 m from the water, off the shore's mixed pixels
            wet, dry = near & (classes == WETLAND), near & land
            if wet.sum() > 20 and dry.sum() > 20:
                assert np.nanmedian(above[wet]) < 0.5 * np.nanmedian(above[dry])


def test_the_optical_set_is_unchanged_by_other_sensors(fused, tmp_path):
    plain = synthesize(tmp_path / "plain", scenes=2, size=SHAPE, seed=4, layout="cog")
    for ours, theirs in zip(plain.item_paths, fused.item_paths, strict=True):
        for file in ours.parent.iterdir():
            assert hashlib.sha256(file.read_bytes()).digest() == \
                hashlib.sha256((theirs.parent / file.name).read_bytes()).digest()
    assert "sensors" not in json.loads(plain.manifest_path.read_text())


def test_synth_refuses_a_set_without_optical_scenes(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "x"), "--sensors", "s1,dem"]) == 2
    assert "give s2" in capsys.readouterr().err and not (tmp_path / "x").exists()
