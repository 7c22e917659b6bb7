"""Optical scenes of float32 pixels (issue 46, item 6): surface reflectance 0-1 as Earth Engine and openEO export it is
ingested with a stated `--scale`/`--offset` onto the store's uint16 scale, to the same store values as the uint16
file it was made from; without the statement it is refused in one line that names the option, and the store records
the conversion, which the band contract takes from it (predict applies it: tests/infer/test_float_input.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from eoscale import schema
from eoscale.cli import main
from eoscale.contract import BandContract
from eoscale.data import TileDataModule
from eoscale.ingest import ingest
from tests.rasters import write_labels, write_reflectance, write_scene

BANDS = ["B02", "B03", "B04", "B08"]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("float-input")
    classes = write_scene(root / "dn.tif", height=96, width=128, band_names=BANDS)
    write_reflectance(root / "dn.tif", root / "reflectance.tif")
    write_labels(root / "labels.tif", root / "dn.tif", classes)
    (root / "classes.csv").write_text("code,name\n10,Trees\n30,Grass\n40,Crops\n80,Water\n")  # no colours
    return root


def _ingest(root: Path, scene: str, out: str, **kw) -> Path:
    ingest([str(root / scene)], root / out, labels=[str(root / "labels.tif")], classes=str(root / "classes.csv"),
           tile_size=32, workers=1, progress=False, **kw)
    return root / out


def test_float_reflectance_ingests_to_the_values_of_its_uint16_scene(scenes: Path):
    uint16 = zarr.open_group(_ingest(scenes, "dn.tif", "dn.zarr"), mode="r")
    converted = zarr.open_group(_ingest(scenes, "reflectance.tif", "reflectance.zarr",
                                       input_scale={"scale": 10000.0, "offset": 0.0}), mode="r")
    # the same tiles, and every pixel the same store value (float32 × 10,000, rounded: the DN it was made from)
    np.testing.assert_array_equal(converted[schema.IMAGES][:], uint16[schema.IMAGES][:])
    np.testing.assert_array_equal(converted[schema.LABELS][:], uint16[schema.LABELS][:])
    attrs = converted.attrs.asdict()
    assert attrs[schema.ATTR_STATISTICS]["mean"] == uint16.attrs[schema.ATTR_STATISTICS]["mean"]
    assert attrs[schema.ATTR_NODATA] == 0  # NaN, the file's nodata, is the store's 0
    assert attrs[schema.ATTR_INGEST]["input_scale"] == {"scale": 10000.0, "offset": 0.0}
    assert attrs[schema.ATTR_SCENES][0]["radiometry"]["float_input"]["bands"] == BANDS
    assert [c["color"] for c in attrs[schema.ATTR_CLASSES]] == ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78"]
    # the checkpoint's contract takes the conversion from the store; a store of integer scenes has none
    assert BandContract.from_datamodule(TileDataModule(scenes / "reflectance.zarr")).input_scale == {
        "scale": 10000.0, "offset": 0.0}
    assert BandContract.from_datamodule(TileDataModule(scenes / "dn.zarr")).input_scale is None
    assert "input_scale" not in uint16.attrs[schema.ATTR_INGEST]  # an integer store's attributes as before


def _fails(capsys, *args: str) -> str:
    code = main(["ingest", *args, "--tile-size", "32", "--workers", "1", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_a_float_scene_without_a_stated_scale_is_one_line_naming_the_option(scenes: Path, tmp_path: Path, capsys):
    line = _fails(capsys, "--scenes", str(scenes / "reflectance.tif"), "--output", str(tmp_path / "out.zarr"))
    assert line == (f"eoscale ingest: error: scene 'reflectance' ({scenes / 'reflectance.tif'}) holds float pixels, and "
                    "nothing says which scale they are on: state how they map onto the store's uint16 scale with "
                    "--scale and --offset (e.g. --scale 10000 for surface reflectance 0-1 as Earth Engine and openEO "
                    "export it)")
    line = _fails(capsys, "--scenes", str(scenes / "dn.tif"), "--output", str(tmp_path / "out.zarr"), "--scale", "1e4")
    assert "--scale 10000 --offset 0 map float pixels, and no scene holds any" in line
    line = _fails(capsys, "--scenes", str(scenes / "reflectance.tif"), "--output", str(tmp_path / "out.zarr"),
                  "--scale", "-1")
    assert "the scale must be a positive number" in line
    assert not (tmp_path / "out.zarr").exists() and not (tmp_path / "out.zarr.partial").exists()
