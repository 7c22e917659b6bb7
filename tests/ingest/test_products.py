"""Real product layouts in: Sentinel-2 L2A SAFE (two processing baselines, one reflectance scale, SCL as the mask),
Landsat 8/9 C2 L2 band folders (never taken for Sentinel-2), band folders with files that are not bands, and the bad
inputs of each (one line, exit 2, no store)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rasterio
import zarr

from eoscale import schema
from eoscale.cli import main
from eoscale.raster.safe import SCL_NODATA_CLASSES
from eoscale.synth.safe import CLOUD_BOX
from tests.ingest.test_bad_input import assert_one_line_error
from tests.products import (
    copy_product,
    safe_product,
    write_cluttered_band_folder,
    write_landsat_folder,
    write_rgb,
)

SIZE = 96


def ingest(capsys, out, scenes, *extra: str, labels=None, classes=None) -> tuple[int, str]:
    argv = ["ingest", "--scenes", *map(str, scenes), "--output", str(out), "--tile-size", "32", "--workers", "1", "-q",
            "--min-valid", "0.1", *extra]
    if labels:
        argv += ["--labels", *map(str, labels), "--classes", str(classes)]
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def safe_sets(tmp_path_factory):
    """One synthetic scene written as a SAFE product under baselines 03.01 and 05.10 (the CLI, as a user runs it)."""
    root = tmp_path_factory.mktemp("safe")
    for baseline in ("03.01", "05.10"):
        assert main(["synth", str(root / baseline), "--layout", "safe", "--baseline", baseline, "--scenes", "1",
                     "--size", str(SIZE), "--seed", "4", "--nodata-fraction", "0.05"]) == 0
    return root


@pytest.fixture(scope="module")
def safe_stores(safe_sets, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("safe-stores")
    stores = {}
    for baseline in ("03.01", "05.10"):
        stores[baseline] = out / f"{baseline}.zarr"
        # the folder of products (scenes/), as a user gives a download folder
        assert main(["ingest", "--scenes", str(safe_sets / baseline / "scenes"), "--labels",
                     str(safe_sets / baseline / "labels" / "*.tif"), "--classes", str(safe_sets / baseline / "classes.csv"),
                     "--output", str(stores[baseline]), "--tile-size", "32", "--workers", "1", "-q"]) == 0
    return stores


def test_safe_under_baselines_03_and_05_gives_identical_tiles(safe_stores):
    old, new = (zarr.open_group(safe_stores[b], mode="r") for b in ("03.01", "05.10"))
    assert old[schema.IMAGES].shape[0] > 0
    np.testing.assert_array_equal(old[schema.IMAGES][:], new[schema.IMAGES][:])
    np.testing.assert_array_equal(old[schema.LABELS][:], new[schema.LABELS][:])
    for group, offset in ((old, 0.0), (new, -1000.0)):
        scene = group.attrs[schema.ATTR_SCENES][0]
        assert group.attrs[schema.ATTR_SENSOR] == "sentinel-2" and scene["platform"] == "sentinel-2a"
        assert scene["radiometry"]["boa_add_offset"]["B02"] == offset  # the store records what was done
        assert scene["radiometry"]["boa_quantification_value"] == 10000
        assert scene["mask"]["layer"] == "SCL" and scene["mask"]["nodata_classes"] == list(SCL_NODATA_CLASSES)
    assert new.attrs[schema.ATTR_BANDS] == ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    assert new.attrs[schema.ATTR_WAVELENGTHS][0] == pytest.approx(492.4)  # Sentinel-2A's B02


def test_safe_bands_land_on_the_reflectance_scale_and_scl_clouds_are_nodata(safe_sets, safe_stores):
    """The 05.10 store holds the 03.01 product's own B02 digital numbers (reflectance × 10,000) where the SCL says
    clear, and nodata over the cloud tops that only the SCL marks (their pixels are bright, not 0)."""
    group = zarr.open_group(safe_stores["05.10"], mode="r")
    (raw_path,) = (safe_product(safe_sets / "03.01") / "GRANULE").glob("*/IMG_DATA/R10m/*_B02_10m.jp2")
    with rasterio.open(raw_path) as src:
        raw = src.read(1)
    (r0, r1), (c0, c1) = CLOUD_BOX
    half = (SIZE + 1) // 2
    cloud = np.zeros((SIZE, SIZE), bool)
    cloud[2 * int(r0 * half): 2 * int(r1 * half), 2 * int(c0 * half): 2 * int(c1 * half)] = True
    images, rows, cols = group[schema.IMAGES][:, 0], group[schema.ROW_OFF][:], group[schema.COL_OFF][:]  # one date
    seen_cloud = seen_clear = 0
    for tile, row, col in zip(images, rows, cols, strict=True):
        window = (slice(row, row + 32), slice(col, col + 32))
        in_cloud = cloud[window]
        assert (tile[:, in_cloud] == 0).all()
        clear = ~in_cloud & (raw[window] != 0)
        np.testing.assert_array_equal(tile[0][clear], raw[window][clear])
        seen_cloud += int(in_cloud.sum())
        seen_clear += int(clear.sum())
    assert seen_cloud > 0 and seen_clear > 1000
    (product_05,) = (safe_sets / "05.10" / "scenes").glob("*.SAFE")
    with rasterio.open(next((product_05 / "GRANULE").glob("*/IMG_DATA/R10m/*_B02_10m.jp2"))) as src:
        assert int(src.read(1)[raw != 0].min()) > 1000  # the 05.10 product's DNs do carry the offset


def test_scl_classes_are_configurable(safe_sets, tmp_path, capsys):
    """Without class 8 (cloud medium probability) the synthetic cloud tops stay in the store, bright."""
    code, err = ingest(capsys, tmp_path / "s.zarr", [safe_product(safe_sets / "05.10")], "--scl-classes", "0,1,3,9,10")
    assert code == 0, err
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert group.attrs[schema.ATTR_SCENES][0]["mask"]["nodata_classes"] == [0, 1, 3, 9, 10]
    assert (group[schema.IMAGES][:, 0, 0] == 5500).sum() > 100  # CLOUD_DN, the offset removed


def test_landsat_band_folder_is_never_taken_for_sentinel2(tmp_path, capsys):
    """A Landsat 9 C2 L2 folder written by `eoscale synth --layout landsat` (every QA_PIXEL flag present)."""
    assert main(["synth", str(tmp_path / "ls"), "--layout", "landsat", "--scenes", "1", "--size", "192", "--seed", "3",
                 "--nodata-fraction", "0.15"]) == 0
    (folder,) = (tmp_path / "ls" / "scenes").glob("LC09_L2SP_*")
    capsys.readouterr()
    code, err = ingest(capsys, tmp_path / "ls.zarr", [folder])
    assert code == 0, err
    attrs = zarr.open_group(tmp_path / "ls.zarr", mode="r").attrs
    assert attrs[schema.ATTR_SENSOR] == "landsat-oli"
    assert attrs[schema.ATTR_BANDS] == [f"SR_B{i}" for i in range(1, 8)]  # not B01..B07: SR_B5 is not Sentinel-2's B05
    assert attrs[schema.ATTR_WAVELENGTHS][4] == pytest.approx(864.6)
    # ST_B10 (surface temperature), QA_RADSAT, SR_QA_AEROSOL and the thumbnail hold no band: skipped and said once;
    # QA_PIXEL is the mask and the MTL the factors
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "ST_B10" in warnings[0] and "thumb" in warnings[0], err
    assert "QA_PIXEL" not in warnings[0] and "MTL" not in warnings[0]
    scene = attrs[schema.ATTR_SCENES][0]
    assert scene["mask"]["layer"] == "QA_PIXEL" and scene["mask"]["nodata_bits"] == 0b111111
    assert scene["radiometry"]["reflectance_factors"]["SR_B5"] == {"mult": 2.75e-5, "add": -0.2}
    assert scene["radiometry"]["source"].endswith("_MTL.txt")
    # DN × 2.75e-5 - 0.2 as reflectance × 10,000 where QA_PIXEL says clear; nodata where it flags fill, dilated
    # cloud, cirrus, cloud, shadow or snow
    with rasterio.open(next(folder.glob("*_SR_B5.TIF"))) as src:
        raw = src.read(1)
    with rasterio.open(next(folder.glob("*_QA_PIXEL.TIF"))) as src:
        flagged = (src.read(1) & 0b111111) != 0
    group = zarr.open_group(tmp_path / "ls.zarr", mode="r")
    images, rows, cols = group[schema.IMAGES][:, 0], group[schema.ROW_OFF][:], group[schema.COL_OFF][:]  # one date
    seen_flagged = seen_clear = 0
    for tile, row, col in zip(images, rows, cols, strict=True):
        window = (slice(row, row + 32), slice(col, col + 32))
        assert (tile[:, flagged[window]] == 0).all()
        clear = ~flagged[window]
        # in float32, as the reader maps values (float64 rounds a few x.5 the other way)
        np.testing.assert_array_equal(tile[4][clear], np.rint(raw[window][clear] * np.float32(0.275) - np.float32(2000)))
        seen_flagged += int(flagged[window].sum())
        seen_clear += int(clear.sum())
    assert seen_flagged > 50 and seen_clear > 1000
    assert main(["info", str(tmp_path / "ls.zarr"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sensor"] == "landsat-oli"
    assert main(["info", str(tmp_path / "ls.zarr")]) == 0
    assert "Landsat 8/9 OLI bands" in capsys.readouterr().out


def test_band_folder_with_files_that_are_not_bands_ingests(tmp_path, capsys):
    folder, extras = write_cluttered_band_folder(tmp_path / "T32ULB_20240612")
    code, err = ingest(capsys, tmp_path / "s.zarr", [folder])
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    warnings = [line for line in lines if "warning" in line]
    assert len(warnings) == 1 and all(name in warnings[0] for name in extras), err
    # recognised layers are said for what they are
    for said in ("cloud_mask.tif (cloud mask, not used as the mask)", "TCI_10m.tif (true-colour preview)",
                 "AOT_10m.tif (aerosol optical thickness)", "MSK_CLDPRB_20m.tif (cloud probability, not used as the mask)",
                 "preview.png (preview image)"):
        assert said in warnings[0], warnings[0]
    attrs = zarr.open_group(tmp_path / "s.zarr", mode="r").attrs
    assert attrs[schema.ATTR_BANDS] == ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    assert not any(name in json.dumps(attrs[schema.ATTR_INPUTS]) for name in extras)


def test_safe_with_a_band_missing(safe_sets, tmp_path, capsys):
    product = copy_product(safe_product(safe_sets / "05.10"), tmp_path / "broken")
    for f in product.glob("GRANULE/*/IMG_DATA/R*m/*_B05_*.jp2"):
        f.unlink()
    code, err = ingest(capsys, tmp_path / "s.zarr", [product])
    assert_one_line_error(code, err, product.name, "no B05 band file", "download it again")
    assert not (tmp_path / "s.zarr").exists()


def test_mtd_without_offsets_for_baseline_04_and_later(safe_sets, tmp_path, capsys):
    product = copy_product(safe_product(safe_sets / "05.10"), tmp_path / "broken")
    mtd = product / "MTD_MSIL2A.xml"
    text = mtd.read_text()
    start, stop = text.index("<BOA_ADD_OFFSET_VALUES_LIST>"), text.index("</BOA_ADD_OFFSET_VALUES_LIST>")
    mtd.write_text(text[:start] + text[stop + len("</BOA_ADD_OFFSET_VALUES_LIST>"):])
    code, err = ingest(capsys, tmp_path / "s.zarr", [product])
    assert_one_line_error(code, err, "MTD_MSIL2A.xml", "baseline 05.10", "no BOA_ADD_OFFSET")
    assert not (tmp_path / "s.zarr").exists()


def test_landsat_folder_without_qa_pixel(tmp_path, capsys):
    folder = write_landsat_folder(tmp_path / "LC09_L2SP_196025_20230612")
    next(folder.glob("*_QA_PIXEL.TIF")).unlink()
    code, err = ingest(capsys, tmp_path / "s.zarr", [folder])
    assert_one_line_error(code, err, folder.name, "no QA_PIXEL file")
    assert not (tmp_path / "s.zarr").exists()


def test_mixed_sensors_need_a_band_map(safe_sets, tmp_path, capsys):
    landsat = write_landsat_folder(tmp_path / "landsat", origin=(300_000.0, 5_660_000.0))
    product = safe_product(safe_sets / "05.10")
    code, err = ingest(capsys, tmp_path / "s.zarr", [product, landsat])
    assert_one_line_error(code, err, "Landsat 8/9 OLI", "Sentinel-2 MSI", "--band-map")
    assert not (tmp_path / "s.zarr").exists()
    code, err = ingest(capsys, tmp_path / "s.zarr", [landsat], "--band-map", "SR_B2=B02,SR_B2=B03")
    assert_one_line_error(code, err, "--band-map", "twice")
    # mapped explicitly, they share a store of Sentinel-2 names, and the store records the map
    code, err = ingest(capsys, tmp_path / "s.zarr", [product, landsat], "--band-map",
                       "SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A", "--bands", "B02,B03,B04,B8A")
    assert code == 0, err
    attrs = zarr.open_group(tmp_path / "s.zarr", mode="r").attrs
    assert attrs[schema.ATTR_SENSOR] == "sentinel-2" and attrs[schema.ATTR_BANDS] == ["B02", "B03", "B04", "B8A"]
    assert attrs[schema.ATTR_SCENES][1]["band_map"] == {"SR_B2": "B02", "SR_B3": "B03", "SR_B4": "B04", "SR_B5": "B8A"}


def test_generic_rgb_named_by_colour_interpretation(tmp_path, capsys):
    rgb = write_rgb(tmp_path / "aerial.tif")
    code, err = ingest(capsys, tmp_path / "rgb.zarr", [rgb])
    assert code == 0, err
    attrs = zarr.open_group(tmp_path / "rgb.zarr", mode="r").attrs
    assert attrs[schema.ATTR_SENSOR] == "generic" and attrs[schema.ATTR_BANDS] == ["RED", "GREEN", "BLUE"]
    assert attrs[schema.ATTR_WAVELENGTHS] == [None, None, None]  # a camera's response is not known
