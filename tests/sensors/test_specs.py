"""The built-in sensor specs: one module a sensor, registered in order, and the names that moved keep working."""

from __future__ import annotations

import pytest

import eoscale.sensors as sensors
from eoscale.bands import SENTINEL2_L2A
from eoscale.errors import InputError


def test_the_built_in_sensors_are_registered_in_order():
    assert list(sensors.SENSORS) == ["sentinel-2", "landsat-oli", "sentinel-1", "copdem", "embedding", "generic"]
    assert sensors.sentinel2.SPEC is sensors.get_sensor(None) is sensors.SENSORS["sentinel-2"]
    assert sensors.landsat.SPEC.mask.bits == 0b111111 and sensors.sentinel2.SPEC.mask.classes == (0, 1, 3, 8, 9, 10)
    assert sensors.Sensor is sensors.SensorSpec  # the type's old name


def test_specs_carry_wavelengths_assets_masks_and_scales():
    s2, oli = sensors.get_sensor("sentinel-2"), sensors.get_sensor("landsat-oli")
    assert s2.wavelengths(["B02", "B8A"]) == [b.wavelength_nm for b in SENTINEL2_L2A if b.name in ("B02", "B8A")]
    assert s2.wavelengths(["B02"], "sentinel-2b") == [492.1]
    assert s2.assets["nir08"] == "B8A" and oli.assets["nir08"] == "SR_B5"
    assert s2.default_linear({"s2:processing_baseline": "05.10"})[:2] == (0.0001, -0.1)
    assert s2.default_linear({"s2:processing_baseline": "03.01"})[:2] == (0.0001, 0.0)
    assert s2.default_linear({}) is None
    assert oli.default_linear({})[:2] == (2.75e-5, -0.2)
    assert sensors.get_sensor("generic").default_linear is None and sensors.get_sensor("generic").catch_all


@pytest.mark.parametrize(("stem", "expected"), [
    ("LC09_L2SP_196025_20230612_20230614_02_T1_SR_B5", ("landsat-oli", "SR_B5")),
    ("LC09_L2SP_196025_20230612_20230614_02_T1_ST_B10", None),
    ("LC09_L2SP_196025_20230612_20230614_02_T1_QA_PIXEL", None),
    ("T32ULB_20240612T103031_B8A_20m", ("sentinel-2", "B8A")),
    ("B2", ("sentinel-2", "B02")),
    ("mosaic_nir", ("generic", "NIR")),
    ("T32ULB_20240612T103031_SCL_20m", None),
])
def test_band_in_file_name(stem, expected):
    assert sensors.band_in_file_name(stem) == expected


def test_layers_and_mixing():
    assert sensors.layer_in_file_name("T32ULB_SCL_20m") == "Sentinel-2 scene classification (SCL)"
    assert sensors.layer_in_file_name("LC09_ST_B10") == "Landsat surface temperature layer"
    assert sensors.layer_in_file_name("thumbnail") == "preview image"
    assert sensors.is_scl_file("SCL") and not sensors.is_scl_file("B04")
    assert sensors.sensor_of_bands(["SR_B2", "SR_B5"], what="x") == "landsat-oli"
    assert sensors.sensor_of_bands(["RED", "GREEN"], what="x") == "generic"
    with pytest.raises(InputError, match="mixes"):
        sensors.sensor_of_bands(["SR_B2", "B03"], what="x")


def test_foundation_wavelengths_come_from_the_sentinel2_spec():
    from eoscale.models.foundation import WAVELENGTHS

    assert WAVELENGTHS == sensors.get_sensor("sentinel-2").wavelength_table()
    assert WAVELENGTHS["B10"] == 1373.5 and WAVELENGTHS["B02"] == 492.4
