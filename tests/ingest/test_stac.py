"""STAC input (`eoscale ingest --stac`): Sentinel-2 L2A COGs with Earth Search-like Items land on the same tiles as the
same scene's SAFE product; Landsat C2 L2 Items as the same scene's folder; ItemCollections, folders of Items and
bands by common name or asset key; labels as an ESA WorldCover-like EPSG:4326 COG Item; and the bad inputs (one line,
exit 2, no store)."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import numpy as np
import pystac
import pytest
import rasterio
import zarr
from rasterio.warp import Resampling, calculate_default_transform, reproject
from rio_stac.stac import create_stac_item

from eoscale import schema
from eoscale.cli import main
from tests.ingest.test_bad_input import assert_one_line_error
from tests.products import safe_product

SIZE = 96


def ingest(capsys, out, *args: str) -> tuple[int, str]:
    code = main(["ingest", *args, "--output", str(out), "--tile-size", "32", "--workers", "1", "-q", "--min-valid", "0.1"])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """One synthetic scene written as a SAFE product and as COGs with an Item (baseline 05.10), and a Landsat folder
    with its Item (the CLI, as a user runs it); a WorldCover-like label Item (EPSG:4326 COG) for the Sentinel-2 scene."""
    root = tmp_path_factory.mktemp("stac")
    for layout in ("safe", "cog", "landsat"):
        assert main(["synth", str(root / layout), "--layout", layout, "--scenes", "1", "--size", str(SIZE), "--seed", "4",
                     "--nodata-fraction", "0.05"]) == 0
    (labels,) = (root / "safe" / "labels").glob("*.tif")
    worldcover = root / "worldcover"
    worldcover.mkdir()
    cog = worldcover / "ESA_WorldCover_10m_2021_v200_N51E006_Map.tif"
    with rasterio.open(labels) as src:
        transform, width, height = calculate_default_transform(src.crs, "EPSG:4326", src.width, src.height, *src.bounds)
        profile = {**src.profile, "driver": "COG", "crs": "EPSG:4326", "transform": transform, "width": width,
                   "height": height}
        profile.pop("blockxsize"), profile.pop("blockysize"), profile.pop("tiled")
        with rasterio.open(cog, "w", **profile) as dst:
            reproject(rasterio.band(src, 1), rasterio.band(dst, 1), resampling=Resampling.nearest)
    item = create_stac_item(str(cog), input_datetime=dt.datetime(2021, 1, 1, tzinfo=dt.UTC),
                            id="ESA_WorldCover_10m_2021_v200_N51E006", asset_name="map", asset_roles=["data"],
                            asset_href=f"./{cog.name}", with_proj=True, with_raster=True)
    (worldcover / "item.json").write_text(json.dumps(item.to_dict(include_self_link=False, transform_hrefs=False)))
    return root


def item_of(root, layout: str):
    (item,) = (root / layout / "scenes").glob("*/*.json")
    return item


@pytest.fixture(scope="module")
def stores(sets, tmp_path_factory):
    out = tmp_path_factory.mktemp("stac-stores")
    labels = [str(sets / "worldcover" / "ESA_WorldCover_10m_2021_v200_N51E006_Map.tif")]
    label_item = [str(sets / "worldcover" / "item.json")]
    classes = str(sets / "safe" / "classes.csv")
    # the COG product's folder without its Item (a folder with it is refused: test_cog_folder_with_its_item_…)
    bare = shutil.copytree(item_of(sets, "cog").parent, out / "cog-bare" / item_of(sets, "cog").parent.name,
                           ignore=shutil.ignore_patterns("*.json"))
    runs = {"safe": ["--scenes", str(safe_product(sets / "safe")), "--labels", *labels],
            "cog": ["--stac", str(item_of(sets, "cog")), "--labels", *label_item],
            "cog-folder": ["--scenes", str(bare)],
            "landsat-folder": ["--scenes", str(item_of(sets, "landsat").parent)],
            "landsat": ["--stac", str(item_of(sets, "landsat"))]}
    for name, args in runs.items():
        assert main(["ingest", *args, "--classes", classes, "--output", str(out / f"{name}.zarr"), "--tile-size", "16",
                     "--workers", "1", "-q", "--min-valid", "0.1"]) == 0
    return {name: zarr.open_group(out / f"{name}.zarr", mode="r") for name in runs}


def test_one_scene_from_safe_and_from_cog_stac_gives_identical_tiles(stores):
    safe, cog = stores["safe"], stores["cog"]
    assert safe[schema.IMAGES].shape[0] > 10
    np.testing.assert_array_equal(safe[schema.IMAGES][:], cog[schema.IMAGES][:])
    # labels: the WorldCover-like COG given as a file and as a STAC item
    np.testing.assert_array_equal(safe[schema.LABELS][:], cog[schema.LABELS][:])
    assert (cog[schema.LABELS][:] != 255).mean() > 0.5
    assert cog.attrs[schema.ATTR_BANDS] == safe.attrs[schema.ATTR_BANDS] == [
        "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    assert cog.attrs[schema.ATTR_SENSOR] == "sentinel-2" and cog.attrs[schema.ATTR_WAVELENGTHS][0] == pytest.approx(492.4)
    scene = cog.attrs[schema.ATTR_SCENES][0]
    assert scene["id"] == "S2A_32ULB_20240601_0_L2A" and scene["platform"] == "sentinel-2a"
    assert scene["radiometry"]["raster_bands"]["B8A"] == {"asset": "nir08", "scale": 0.0001, "offset": -0.1,
                                                          "from": "raster:bands"}
    assert scene["mask"]["layer"] == "SCL" and scene["mask"]["path"].endswith("SCL.tif")
    assert any(r["path"].endswith(".json") for r in cog.attrs[schema.ATTR_INPUTS])  # the item is an input


def test_cog_folder_without_its_item_masks_with_its_scl_but_keeps_the_offset(stores):
    """Given as a band folder, a COG folder's SCL.tif is its mask (the same pixels are nodata as through its Item), but
    without the Item's raster:bands nothing says that its baseline 05.10 DNs carry +1000: they stay as they are."""
    item, folder = stores["cog"], stores["cog-folder"]
    scene = folder.attrs[schema.ATTR_SCENES][0]
    assert scene["mask"]["layer"] == "SCL" and scene["mask"]["path"].endswith("SCL.tif")
    a, b = item[schema.IMAGES][:], folder[schema.IMAGES][:]
    np.testing.assert_array_equal(a == 0, b == 0)
    assert (b[a != 0].astype(np.int32) - a[a != 0] == 1000).all()


def test_cog_folder_with_its_item_is_refused_as_a_band_folder(sets, tmp_path, capsys):
    # the Item states the +1000 offset of baseline 05.10: read as a plain band folder it would be kept unnoticed
    folder, item = item_of(sets, "cog").parent, item_of(sets, "cog")
    code = main(["ingest", "--scenes", str(folder), "--classes", str(sets / "safe" / "classes.csv"),
                 "--output", str(tmp_path / "t.zarr"), "--tile-size", "16", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"eoscale ingest: error: scene directory {str(folder)!r} holds its STAC Item "
                                 f"{item.name}, which states the bands' scale and offset: ingest it with --stac "
                                 f"{item} instead"], err
    assert not (tmp_path / "t.zarr").exists()


def test_landsat_item_gives_the_folders_tiles(stores):
    folder, item = stores["landsat-folder"], stores["landsat"]
    assert folder[schema.IMAGES].shape[0] > 0
    np.testing.assert_array_equal(folder[schema.IMAGES][:], item[schema.IMAGES][:])
    assert item.attrs[schema.ATTR_SENSOR] == "landsat-oli" and item.attrs[schema.ATTR_BANDS] == [
        f"SR_B{i}" for i in range(1, 8)]
    scene = item.attrs[schema.ATTR_SCENES][0]
    assert scene["platform"] == "landsat-9" and scene["mask"]["layer"] == "QA_PIXEL"
    assert scene["radiometry"]["raster_bands"]["SR_B5"]["asset"] == "nir08"


def test_planetary_computer_style_item_falls_back_on_the_processing_baseline(sets, stores, tmp_path):
    """Assets keyed B02…B12 and SCL, eo:bands named B02…, no raster:bands: the offset comes from the item's
    s2:processing_baseline (05.10: -1000), so the tiles are the Earth Search-style item's."""
    from eoscale.raster.stac import SENTINEL2_ASSETS

    def planetary(data, folder):
        assets = {}
        for key, asset in data["assets"].items():
            asset.pop("raster:bands", None)
            band = SENTINEL2_ASSETS.get(key)
            if band:
                asset["eo:bands"][0]["name"] = band
            assets[band or key.upper()] = asset
        data["assets"] = assets

    assert main(["ingest", "--stac", broken_item(sets, tmp_path, planetary), "--labels",
                 str(sets / "worldcover" / "item.json"), "--classes", str(sets / "safe" / "classes.csv"),
                 "--output", str(tmp_path / "pc.zarr"), "--tile-size", "16", "--workers", "1", "-q",
                 "--min-valid", "0.1"]) == 0  # as the `stores` fixture ingests
    pc = zarr.open_group(tmp_path / "pc.zarr", mode="r")
    np.testing.assert_array_equal(pc[schema.IMAGES][:], stores["cog"][schema.IMAGES][:])
    factors = pc.attrs[schema.ATTR_SCENES][0]["radiometry"]["raster_bands"]["B8A"]
    assert factors == {"asset": "B8A", "scale": 0.0001, "offset": -0.1, "from": "s2:processing_baseline 05.10"}


def test_item_collection_folder_of_items_and_bands_by_common_name(sets, tmp_path, capsys):
    """An ItemCollection elsewhere (hrefs made absolute) and a folder holding an Item, bands named by common name and
    asset key, in the order given."""
    source = item_of(sets, "cog")
    item = pystac.Item.from_file(str(source))
    item.make_asset_hrefs_absolute()
    collection = tmp_path / "search.json"
    collection.write_text(json.dumps(pystac.ItemCollection([item]).to_dict(transform_hrefs=False)))
    code, err = ingest(capsys, tmp_path / "s.zarr", "--stac", str(collection), "--bands", "nir,red,green,blue")
    assert code == 0, err
    assert zarr.open_group(tmp_path / "s.zarr", mode="r").attrs[schema.ATTR_BANDS] == ["B08", "B04", "B03", "B02"]
    code, err = ingest(capsys, tmp_path / "r.zarr", "--stac", str(source.parent), "--bands", "rededge")
    assert_one_line_error(code, err, "'rededge'", "B05, B06, B07")
    assert not (tmp_path / "r.zarr").exists()


def broken_item(sets, tmp_path, change) -> str:
    folder = tmp_path / "item"
    shutil.copytree(item_of(sets, "cog").parent, folder)
    (path,) = folder.glob("*.json")
    data = json.loads(path.read_text())
    change(data, folder)
    path.write_text(json.dumps(data))
    return str(path)


def test_item_whose_asset_file_is_absent(sets, tmp_path, capsys):
    item = broken_item(sets, tmp_path, lambda data, folder: (folder / "B04.tif").unlink())
    code, err = ingest(capsys, tmp_path / "s.zarr", "--stac", item)
    assert_one_line_error(code, err, "'red'", "does not exist", "download")
    assert not (tmp_path / "s.zarr").exists()


def test_item_with_an_http_href(sets, tmp_path, capsys):
    def remote(data, folder):
        data["assets"]["nir"]["href"] = "https://sentinel-cogs.s3.us-west-2.amazonaws.com/S2A_32ULB_20240601_0_L2A/B08.tif"

    code, err = ingest(capsys, tmp_path / "s.zarr", "--stac", broken_item(sets, tmp_path, remote))
    assert_one_line_error(code, err, "'nir'", "https://", "download the assets first")
    assert not (tmp_path / "s.zarr").exists()


def test_nan_nodata_declared_on_integer_pixels(sets, tmp_path, capsys):
    def nan(data, folder):
        data["assets"]["green"]["raster:bands"][0]["nodata"] = "nan"

    code, err = ingest(capsys, tmp_path / "s.zarr", "--stac", broken_item(sets, tmp_path, nan))
    assert_one_line_error(code, err, "'green'", "nodata NaN", "uint16")
    assert not (tmp_path / "s.zarr").exists()


def test_not_an_item_and_no_scenes(tmp_path, capsys):
    (tmp_path / "catalog.json").write_text(json.dumps({"type": "Catalog", "id": "x", "links": []}))
    code, err = ingest(capsys, tmp_path / "s.zarr", "--stac", str(tmp_path / "catalog.json"))
    assert_one_line_error(code, err, "catalog.json", "not a STAC Item or ItemCollection")
    code, err = ingest(capsys, tmp_path / "s.zarr")
    assert_one_line_error(code, err, "--scenes", "--stac")
    assert not (tmp_path / "s.zarr").exists()


def test_landsat_folder_reads_the_xml_mtl_without_the_text_one(sets, tmp_path):
    from eoscale.raster.sources import open_scene

    folder = shutil.copytree(item_of(sets, "landsat").parent, tmp_path / item_of(sets, "landsat").parent.name)
    next(folder.glob("*_MTL.txt")).unlink()
    xml = next(folder.glob("*_MTL.xml"))
    xml.write_text(xml.read_text().replace("<REFLECTANCE_MULT_BAND_5>2.75E-05<", "<REFLECTANCE_MULT_BAND_5>3.00E-05<"))
    scene = open_scene(str(folder))
    assert scene.radiometry["source"].endswith("_MTL.xml")
    assert scene.radiometry["reflectance_factors"]["SR_B5"] == {"mult": 3e-5, "add": -0.2}
    assert scene.radiometry["reflectance_factors"]["SR_B4"] == {"mult": 2.75e-5, "add": -0.2}
