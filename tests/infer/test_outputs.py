"""What `eoscale predict` writes for an odd-sized scene with nodata: real COGs, georeferenced like the input,
with colormap, class names and nodata; a quick-look; areas that add up."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.crs import CRS
from rio_cogeo.cogeo import cog_validate

from eoscale.errors import OutputExistsError
from eoscale.infer.run import PredictConfig, predict
from tests.checkpoints import TABLE
from tests.rasters import read_map, write_band_directory


@pytest.fixture(scope="module")
def result(checkpoint, scene, tmp_path_factory):
    out = tmp_path_factory.mktemp("maps")
    run = predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(out), confidence=True,
                                progress=False))
    return run, out


def _gdalinfo(path: Path) -> dict:
    """`gdalinfo -json` (the GDAL command line), or the same facts through rasterio where it is not installed."""
    if shutil.which("gdalinfo"):
        return json.loads(subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True,
                                         check=True).stdout)
    with rasterio.open(path) as src:  # pragma: no cover - CI installs gdal-bin
        band = {"noDataValue": src.nodata, "overviews": [{"size": [0, 0]}] * len(src.overviews(1)),
                "metadata": {"": src.tags(1)}}
        try:
            band["colorTable"] = {"entries": [list(v) for _, v in sorted(src.colormap(1).items())]}
        except ValueError:
            pass
        return {"coordinateSystem": {"wkt": src.crs.to_wkt()}, "geoTransform": list(src.transform.to_gdal()),
                "bands": [band], "metadata": {"": src.tags()}, "size": [src.width, src.height]}


def test_outputs_are_valid_cogs_georeferenced_like_the_input(result, scene):
    run, out = result
    (scene_result,) = run.scenes
    landcover, confidence = out / "odd_landcover.tif", out / "odd_confidence.tif"
    for path in (landcover, confidence):
        valid, errors, _ = cog_validate(str(path), quiet=True)
        assert valid, errors
    with rasterio.open(scene) as src:
        crs, transform, size = src.crs, src.transform, [src.width, src.height]
    info = _gdalinfo(landcover)
    assert info["size"] == size == [347, 301]
    assert CRS.from_wkt(info["coordinateSystem"]["wkt"]) == crs
    assert info["geoTransform"] == list(transform.to_gdal())
    band = info["bands"][0]
    assert band["noDataValue"] == 0
    assert band["overviews"], "a COG of this size has at least one overview"
    assert band["metadata"][""] == {f"CLASS_{c.code}": c.name for c in TABLE.classes}
    colours = band["colorTable"]["entries"]
    for c in TABLE.classes:
        assert tuple(colours[c.code][:3]) == c.rgb
    assert colours[0][3] == 0  # nodata is transparent
    tags = info["metadata"][""]
    assert json.loads(tags["EOSCALE_CLASSES"])[0] == {"code": 10, "name": "Tree cover", "color": "#006400"}
    assert tags["OVERVIEW_RESAMPLING"] == "MODE" and tags["EOSCALE_WINDOW"] == "32"
    with rasterio.open(landcover) as src:
        assert src.profile["blockxsize"] == 256 and src.profile["tiled"] and src.dtypes[0] == "uint8"
        assert src.compression.name == "deflate"


def test_nodata_follows_the_input_and_areas_add_up(result, scene):
    run, out = result
    with rasterio.open(scene) as src:
        invalid = (src.read() == 0).any(axis=0)
    classes = read_map(out / "odd_landcover.tif")
    confidence = read_map(out / "odd_confidence.tif")
    np.testing.assert_array_equal(classes == 0, invalid)
    assert invalid[40:90, 0:70].all() and invalid.sum() == 50 * 70
    assert set(np.unique(classes[~invalid])) <= set(TABLE.codes)
    np.testing.assert_array_equal(confidence == 255, invalid)
    assert confidence[~invalid].min() >= 100 // len(TABLE) and confidence[~invalid].max() <= 100

    areas = json.loads((out / "odd_areas.json").read_text())
    assert areas == run.scenes[0].areas
    valid = int((~invalid).sum())
    assert areas["valid_pixels"] == valid == sum(c["pixels"] for c in areas["classes"])
    for c in areas["classes"]:
        assert c["pixels"] == int((classes == c["code"]).sum())
        assert c["hectares"] == pytest.approx(c["pixels"] * 100 / 10_000)  # 10 m pixels
    assert sum(c["percent"] for c in areas["classes"]) == pytest.approx(100, abs=1e-3)
    assert areas["valid_hectares"] == pytest.approx(valid / 100)
    rows = (out / "odd_areas.csv").read_text().splitlines()
    assert rows[0] == "code,name,pixels,hectares,percent" and len(rows) == 1 + len(TABLE)


def test_quicklook_and_nothing_unfinished_left(result):
    run, out = result
    png = out / "odd_quicklook.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    assert sorted(p.name for p in out.iterdir()) == [
        "odd_areas.csv", "odd_areas.json", "odd_confidence.tif", "odd_item.json", "odd_landcover.tif",
        "odd_quicklook.png"]
    assert run.scenes[0].windows == 13 * 15 and run.processes == 1


def test_existing_output_needs_overwrite(result, checkpoint, scene):
    _, out = result
    config = PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(out), progress=False)
    with pytest.raises(OutputExistsError, match="odd_landcover.tif' exists: pass --overwrite"):
        predict(config)


def test_band_directory_scene(checkpoint, scene, tmp_path):
    """A scene kept as one file per band (20 m bands at 20 m) maps onto its finest grid."""
    folder = tmp_path / "odd_bands"
    write_band_directory(scene, folder)
    run = predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(folder)], output=str(tmp_path / "maps"),
                                window=48, overlap=0.5, batch_size=8, progress=False))
    assert run.scenes[0].id == "odd_bands"
    with rasterio.open(tmp_path / "maps" / "odd_bands_landcover.tif") as src, rasterio.open(scene) as ref:
        assert (src.width, src.height, src.crs, src.transform) == (ref.width, ref.height, ref.crs, ref.transform)
        assert src.tags()["EOSCALE_WINDOW"] == "48"


def test_scene_smaller_than_a_window(checkpoint, tmp_path):
    """Mirroring repeats as often as needed: a 20 × 9 scene in 32-pixel windows is still mapped whole."""
    from tests.rasters import write_scene

    tiny = tmp_path / "tiny.tif"
    write_scene(tiny, height=20, width=9, nodata_box=(slice(0, 2), slice(0, 3)))
    run = predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(tiny)], output=str(tmp_path / "maps"),
                                progress=False))
    classes = read_map(tmp_path / "maps" / "tiny_landcover.tif")
    assert classes.shape == (20, 9) and (classes[:2, :3] == 0).all() and (classes[2:] > 0).all()
    assert run.scenes[0].areas["valid_pixels"] == 20 * 9 - 6


def test_most_probable_class_is_torch_max_with_ties_to_the_first():
    """On the host (numpy, beside a CPU model) and on the model's device (torch, beside a GPU) alike."""
    import torch

    from eoscale.infer.outputs import most_probable, most_probable_on_device

    torch.manual_seed(0)
    probs = torch.rand(8, 40, 50).softmax(dim=0)
    probs[:, 0, :7] = 0.125  # eight equal classes: the first wins
    probs[2:4, 1, :] = 0.6  # two equal best
    confidence, index = torch.max(probs, dim=0)
    got_index, got_confidence = most_probable(probs.numpy())
    np.testing.assert_array_equal(got_index, index.numpy())
    np.testing.assert_array_equal(got_confidence, confidence.numpy())
    assert (got_index[0, :7] == 0).all() and (got_index[1] == 2).all()
    device_index, device_confidence = most_probable_on_device(probs)
    np.testing.assert_array_equal(device_index, got_index)
    np.testing.assert_array_equal(device_confidence, got_confidence)
