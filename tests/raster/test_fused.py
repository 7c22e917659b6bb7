"""`eoscale.raster.fused`: another sensor's scene on another grid is warped onto the reference scene's grid once (a
radar band averaged in linear power, then taken to dB), its nodata kept in its own bands; the file is reused when it
is there (a resumed ingest)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import rasterio
from rasterio.enums import Resampling
from rasterio.warp import reproject

from eoscale.raster.fused import pair_scenes, with_other_sensors
from eoscale.raster.sources import open_scene
from eoscale.synth import synthesize


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("warp") / "set", scenes=1, size=(96, 128), seed=4,
                      sensors=("s2", "s1"))


def _coarser(folder, out):
    """A copy of a radar folder at 20 m (the linear power averaged), without its Item."""
    out.mkdir(parents=True)
    for name in ("vv.tif", "vh.tif"):
        with rasterio.open(folder / name) as src:
            profile, power = src.profile, src.read(1)
            transform = src.transform * src.transform.scale(2, 2)
            coarse = np.zeros((src.height // 2, src.width // 2), np.float32)
            reproject(power, coarse, src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                      dst_crs=src.crs, src_nodata=0, dst_nodata=0, resampling=Resampling.average)
            units = src.units
        profile.update(driver="GTiff", width=coarse.shape[1], height=coarse.shape[0], transform=transform)
        with rasterio.open(out / name, "w", **profile) as dst:
            dst.write(coarse, 1)
            dst.units = units
    return out


def test_a_coarser_radar_scene_is_warped_onto_the_reference_grid(place, tmp_path):
    ref = open_scene(str(place.scene_paths[0]))
    fine = open_scene(str(place.sar_items[0].parent))
    coarse = open_scene(str(_coarser(place.sar_items[0].parent, tmp_path / "coarse" / place.sar_items[0].parent.name)))
    assert abs(coarse.transform.a) == 2 * abs(ref.transform.a)
    (on_fine,) = with_other_sensors([ref], pair_scenes([ref], {"sentinel-1": [fine]}), tmp_path / "fine")
    (on_coarse,) = with_other_sensors([ref], pair_scenes([ref], {"sentinel-1": [coarse]}), tmp_path / "warped")
    assert on_coarse.band_names == ref.band_names + ["VV", "VH"]
    assert [b.sensor for b in on_coarse.bands[-2:]] == ["sentinel-1", "sentinel-1"]
    with rasterio.open(on_fine.bands[-1].path) as a, rasterio.open(on_coarse.bands[-1].path) as b:
        assert (b.crs, b.transform, b.width, b.height) == (ref.crs, ref.transform, ref.width, ref.height)
        fine_db, coarse_db = a.read().astype(float) * 0.01 - 100, b.read().astype(float) * 0.01 - 100
        fine_valid, coarse_valid = (a.read() != 0).all(axis=0), (b.read() != 0).all(axis=0)
    # the same ground: the radar's gap within a coarse pixel or two; the mean power within a few percent (averaged in
    # linear power, as resampling must: an average of speckled decibels would sit about 0.8 dB lower here)
    assert abs(fine_valid.mean() - coarse_valid.mean()) < 0.03 and 0.5 < coarse_valid.mean() < 1
    assert (fine_valid != coarse_valid).mean() < 0.03  # in the same place (equal shares held for a shifted gap)
    both = fine_valid & coarse_valid
    for band in range(2):
        fine_power, coarse_power = 10 ** (fine_db[band][both] / 10), 10 ** (coarse_db[band][both] / 10)
        assert abs(coarse_power.mean() / fine_power.mean() - 1) < 0.05


def test_a_written_file_is_reused(place, tmp_path):
    ref = open_scene(str(place.scene_paths[0]))
    radar = open_scene(str(place.sar_items[0].parent))
    pairs = pair_scenes([ref], {"sentinel-1": [radar]})
    (first,) = with_other_sensors([ref], pairs, tmp_path)
    path = first.bands[-1].path
    stamp = os.stat(path).st_mtime_ns
    (again,) = with_other_sensors([ref], pairs, tmp_path)
    assert again == first and os.stat(path).st_mtime_ns == stamp
    os.remove(path)  # gone (a fresh run): written again, the same pixels
    (third,) = with_other_sensors([ref], pairs, tmp_path)
    assert third == first and os.stat(path).st_mtime_ns != stamp
