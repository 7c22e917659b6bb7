"""A new sensor is one spec registered (`eoscale.sensors.registry`): a stub 3-band "testsat", registered here and
nowhere else, is named from its file names, ingested from a band folder (its mask rule applied, its wavelengths
recorded) and predicted through the real CLI, with no other file of eoscale changed."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from eoscale import schema
from eoscale.bands import Band
from eoscale.cli import main
from eoscale.sensors import (
    SENSORS,
    MaskRule,
    SensorSpec,
    band_in_file_name,
    get_sensor,
    layer_in_file_name,
    register_sensor,
    sensor_of_bands,
    unregister_sensor,
)
from tests.checkpoints import make_checkpoint
from tests.rasters import CLASSES_CSV, CODES, read_map

TESTSAT = SensorSpec(
    name="testsat",
    title="TestSat imager",
    platforms=(("testsat-1", (Band("TS1", 490.0, 60.0, 10.0, "blue"), Band("TS2", 660.0, 40.0, 10.0, "red"),
                              Band("TS3", 850.0, 40.0, 20.0, "near infrared"))),),
    default_bands=("TS1", "TS2", "TS3"),
    file_bands=((re.compile(r"(?:^|_)TSB([1-3])$", re.IGNORECASE), "TS{0}"),),
    layers=((re.compile(r"_FLAGS$", re.IGNORECASE), "TestSat quality flags"),),
    mask=MaskRule("FLAGS", bits=0b1, file_pattern=re.compile(r"_FLAGS$", re.IGNORECASE), required=True,
                  missing="FLAGS file (…_FLAGS.tif)"),
)


@pytest.fixture
def testsat():
    register_sensor(TESTSAT)
    yield TESTSAT
    unregister_sensor(TESTSAT.name)


def write_testsat_folder(folder, *, size: int = 64, seed: int = 0) -> np.ndarray:
    """A TestSat band folder (TSB1, TSB2 at 10 m, TSB3 at 20 m, a FLAGS layer masking a corner); the class of each
    10 m pixel, which its bands' values say."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    classes = np.repeat(np.repeat(rng.integers(0, 4, (size // 8, size // 8)), 8, 0), 8, 1)
    base = 900 * (classes + 1)
    for n, scale in ((1, 1), (2, 1), (3, 2)):
        pixels = (base + 37 * n + rng.integers(0, 50, base.shape))[::scale, ::scale].astype("uint16")
        _write(folder / f"scene_TSB{n}.tif", pixels, 10.0 * scale)
    flags = np.zeros((size, size), "uint16")
    flags[:8, :8] = 1
    _write(folder / "scene_FLAGS.tif", flags, 10.0)
    return classes


def _write(path, pixels, resolution):
    with rasterio.open(path, "w", driver="GTiff", height=pixels.shape[0], width=pixels.shape[1], count=1,
                       dtype=pixels.dtype, crs="EPSG:32632", transform=from_origin(300_000, 5_600_000, resolution,
                                                                                  resolution), nodata=0) as dst:
        dst.write(pixels, 1)


def test_a_registered_sensor_names_its_files_and_bands(testsat):
    assert get_sensor("testsat") is testsat and list(SENSORS)[-1] == "testsat"
    assert band_in_file_name("scene_TSB2") == ("testsat", "TS2")
    assert band_in_file_name("T32ULB_B04") == ("sentinel-2", "B04")  # the built-in sensors are as they were
    assert band_in_file_name("LC09_SR_B5") == ("landsat-oli", "SR_B5")
    assert layer_in_file_name("scene_FLAGS") == "TestSat quality flags"
    assert sensor_of_bands(["TS1", "TS3"], what="x") == "testsat"
    assert testsat.wavelengths(["TS3", "TS9"]) == [850.0, None]


def test_a_stub_sensor_ingests_and_predicts_through_the_cli(testsat, tmp_path, capsys):
    folder = tmp_path / "scenes" / "ts_001"
    classes = write_testsat_folder(folder)
    labels = tmp_path / "labels.tif"
    with rasterio.open(folder / "scene_TSB1.tif") as src:
        profile = dict(src.profile, dtype="uint8", nodata=0)
    with rasterio.open(labels, "w", **profile) as dst:
        dst.write(CODES[classes].astype("uint8"), 1)
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    store = tmp_path / "ts.zarr"
    assert main(["ingest", "--scenes", str(folder), "--labels", str(labels), "--classes", str(tmp_path / "classes.csv"),
                 "--output", str(store), "--tile-size", "32", "--workers", "1", "-q", "--min-valid", "0.1"]) == 0
    import zarr

    attrs = zarr.open_group(str(store), mode="r").attrs
    assert attrs[schema.ATTR_SENSOR] == "testsat" and attrs[schema.ATTR_BANDS] == ["TS1", "TS2", "TS3"]
    assert attrs[schema.ATTR_WAVELENGTHS] == [490.0, 660.0, 850.0]
    scene_attrs = json.dumps(dict(attrs))
    assert "FLAGS" in scene_attrs  # the mask rule's layer is the scene's mask

    model = make_checkpoint(tmp_path / "ts.ckpt", bands=("TS1", "TS2", "TS3"))
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(model), "--input", str(folder), "--output", str(out),
                 "--no-progress"]) == 0
    landcover = read_map(out / "ts_001_landcover.tif")
    assert landcover.shape == (64, 64)
    assert (landcover[:8, :8] == 0).all() and (landcover[8:, 8:] != 0).all()  # the FLAGS corner is nodata


def test_a_stub_sensor_folder_without_its_mask_layer_is_refused(testsat, tmp_path, capsys):
    folder = tmp_path / "ts_002"
    write_testsat_folder(folder)
    (folder / "scene_FLAGS.tif").unlink()
    code = main(["ingest", "--scenes", str(folder), "--output", str(tmp_path / "x.zarr"), "--tile-size", "32",
                 "--workers", "1", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "TestSat imager scene folder" in err and "no FLAGS file" in err
