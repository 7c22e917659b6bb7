"""The Sentinel-1 and Copernicus DEM specs: registered, named from their files and Items, and the decibel scale."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

import eoscale.sensors as sensors
from eoscale.sensors import sentinel1
from eoscale.sensors.sentinel1 import DECIBELS, LINEAR, power_to_db, product_date, scale_of_values, unit_scale


def test_sentinel1_is_registered_with_its_bands_assets_and_platforms():
    spec = sensors.get_sensor("sentinel-1")
    assert spec is sentinel1.SPEC and spec.default_bands == ("VV", "VH")
    assert spec.assets["vv"] == "VV" and spec.assets["vh"] == "VH"
    assert spec.wavelengths(["VV"]) == [pytest.approx(55_465_763, rel=1e-6)]  # C band, 5.405 GHz
    assert sensors.sensor_of_platform("SENTINEL-1A") == ("sentinel-1", "sentinel-1a")
    assert sensors.sensor_of_platform("sentinel-1")[0] == "sentinel-1"
    assert sensors.sensor_of_bands(["VV", "VH"], what="x") == "sentinel-1"
    assert sensors.sensor_of_bands(["ELEVATION", "SLOPE"], what="x") == "copdem"


@pytest.mark.parametrize(("stem", "expected"), [
    ("S1A_IW_GRDH_1SDV_20230615T171524_20230615T171549_049000_05E4A1_1F2B_vv", ("sentinel-1", "VV")),
    ("iw-vh", ("sentinel-1", "VH")),
    ("VV", ("sentinel-1", "VV")),
    ("S1A_IW_GRDH_1SDV_20230615T171524", None),  # the product name's 1SDV names no band
    ("Copernicus_DSM_COG_10_N50_00_E006_00_DEM", ("copdem", "ELEVATION")),
    ("T32ULB_20240612T103031_B8A_20m", ("sentinel-2", "B8A")),  # the others are as they were
])
def test_file_names(stem, expected):
    assert sensors.band_in_file_name(stem) == expected


def test_dates_and_platforms_of_product_names():
    name = "S1A_IW_GRDH_1SDV_20230615T171524_20230615T171549_049000_05E4A1_1F2B"
    assert product_date(name) == dt.date(2023, 6, 15) and product_date("scene_001") is None
    assert sentinel1.product_platform(name) == "sentinel-1a"


def test_power_to_db_is_floored_and_inverts():
    power = np.array([1.0, 0.1, 0.01, 0.0, -1e-4], np.float32)
    db = power_to_db(power)
    np.testing.assert_allclose(db, [0.0, -10.0, -20.0, -50.0, -50.0], atol=1e-5)
    np.testing.assert_allclose(sentinel1.db_to_power(db[:3]), power[:3], rtol=1e-5)


def test_linear_and_db_are_told_apart_by_their_values():
    rng = np.random.default_rng(0)
    db = rng.normal(-14, 4, 1000)
    assert scale_of_values(sentinel1.db_to_power(db)) == LINEAR
    assert scale_of_values(db) == DECIBELS
    assert scale_of_values(np.array([0.0, np.nan, 0.1])) is None  # too few values to say
    assert scale_of_values(rng.uniform(100, 1000, 100)) is None  # digital numbers: neither
    assert unit_scale("dB") == DECIBELS and unit_scale("linear") == LINEAR and unit_scale("metre") is None
