"""Product formats, registered in order (`eoscale.raster.formats`): each detects its products and opens them; scenes
carry the date their product's metadata states (never a file time); a stub format registered here is detected and
opened through the dispatcher; the old module paths keep their names."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import pytest
import rasterio
from rasterio.transform import from_origin

from eoscale.raster import formats
from eoscale.raster.formats import FORMATS, ProductFormat, detect_format, register_format, unregister_format
from eoscale.raster.scene import parse_date
from eoscale.raster.sources import Scene, open_scene, open_scenes, scene_paths
from eoscale.synth import synthesize


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    return {layout: synthesize(root / layout, scenes=2, size=72, seed=3, layout=layout)
            for layout in ("safe", "landsat", "cog", "multiband")}


def test_formats_are_registered_in_the_order_they_are_asked():
    assert [f.name for f in FORMATS] == ["Sentinel-2 L2A SAFE", "STAC Item", "Landsat Collection 2 Level-2 folder",
                                         "Sentinel-1 folder", "band folder", "multiband file"]


def test_each_layout_is_detected_by_its_format(layouts):
    safe = scene_paths([str(layouts["safe"].out_dir / "scenes")])
    assert len(safe) == 2 and all(detect_format(p) is formats.safe.FORMAT for p in safe)
    assert all(detect_format(str(p)) is formats.landsat.FORMAT for p in layouts["landsat"].scene_paths)
    assert all(detect_format(str(p)) is formats.band_folder.FORMAT for p in layouts["cog"].scene_paths)
    items = sorted(str(p) for p in layouts["cog"].out_dir.glob("scenes/*/*.json"))
    assert items and all(detect_format(p) is formats.stac.FORMAT for p in items)
    assert all(detect_format(str(p)) is formats.multiband.FORMAT for p in layouts["multiband"].scene_paths)


def test_dates_come_from_product_metadata(layouts):
    safe = [open_scene(p) for p in scene_paths([str(layouts["safe"].out_dir / "scenes")])]
    assert [s.date for s in safe] == [dt.date(2024, 6, 1), dt.date(2024, 6, 6)]  # MTD PRODUCT_START_TIME
    landsat = [open_scene(str(p)) for p in layouts["landsat"].scene_paths]
    assert [s.date for s in landsat] == [dt.date(2023, 6, 12), dt.date(2023, 6, 28)]  # MTL DATE_ACQUIRED
    items = sorted(str(p) for p in layouts["cog"].out_dir.glob("scenes/*/*.json"))
    stac = open_scenes([], stac=items)
    assert [s.date for s in stac] == [dt.date(2024, 6, 1), dt.date(2024, 6, 6)]  # the Item's datetime
    assert open_scene(items[0]).date == dt.date(2024, 6, 1)  # an Item file given as a scene
    # the same day from the product's SAFE and COG forms
    assert [s.date for s in safe] == [s.date for s in stac]


def test_a_plain_geotiff_is_dated_by_its_acquisition_tag_only(layouts, tmp_path):
    # guards issue 46 item 3: TIFFTAG_DATETIME (when the file was written) was taken for the acquisition date, and an
    # acquisition time's UTC offset was dropped (23:30 at -02:00 is the next day in UTC)
    path = layouts["multiband"].scene_paths[0]
    os.utime(path, (0, 0))
    assert open_scene(str(path)).date is None  # never the file's modification time
    tagged = tmp_path / "tagged.tif"
    with rasterio.open(path) as src:
        profile, pixels, names = src.profile, src.read(), src.descriptions
    with rasterio.open(tagged, "w", **profile) as dst:
        dst.write(pixels)
        dst.descriptions = names
        dst.update_tags(TIFFTAG_DATETIME="2021:07:04 10:00:00")
    assert open_scene(str(tagged)).date is None  # when the file was written: no date is better than a wrong one
    with rasterio.open(tagged, "r+") as dst:
        dst.update_tags(ns="IMAGERY", ACQUISITIONDATETIME="2024-06-10T23:30:00-02:00")
    assert open_scene(str(tagged)).date == dt.date(2024, 6, 11)  # the acquisition's UTC day


@pytest.mark.parametrize(("text", "date"), [
    ("2024-06-10T23:30:00-02:00", dt.date(2024, 6, 11)),  # guards issue 46 item 3: the offset was dropped
    ("2024-06-11T00:30:00+02:00", dt.date(2024, 6, 10)),
    ("2024-06-12T10:30:31.024Z", dt.date(2024, 6, 12)),  # SAFE PRODUCT_START_TIME
    ("2024-06-12T23:59:59.9999999Z", dt.date(2024, 6, 12)),  # seven decimals, as Landsat's SCENE_CENTER_TIME
    ("2024-06-12", dt.date(2024, 6, 12)),  # Landsat DATE_ACQUIRED, a dates CSV
    ("2024-06-12Z", dt.date(2024, 6, 12)),
    ("2024:06:12 10:30:31", dt.date(2024, 6, 12)),  # TIFF's DateTime form
    ("2024-06-12T10:30:31", dt.date(2024, 6, 12)),  # no offset: taken as UTC
    ("", None), ("June 12", None), ("2024-13-01", None),
])
def test_time_stamps_give_their_utc_day(text, date):
    assert parse_date(text) == date


def test_an_items_datetime_gives_its_utc_day(layouts, tmp_path):
    # guards issue 46 item 3: an Item's datetime with an offset was taken as the day at that offset
    found = sorted(layouts["cog"].out_dir.glob("scenes/*/*.json"))[0]
    item = shutil.copytree(found.parent, tmp_path / found.parent.name) / found.name
    data = json.loads(item.read_text())
    data["properties"]["datetime"] = "2024-06-10T23:30:00-02:00"
    item.write_text(json.dumps(data))
    assert open_scenes([], stac=[str(item)])[0].date == dt.date(2024, 6, 11)


def test_a_stub_format_is_detected_and_opened(tmp_path):
    """A made-up product: a `.tsp` folder holding `pixels.tif` and `meta.json` (its date)."""
    product = tmp_path / "one.tsp"
    product.mkdir()
    with rasterio.open(product / "pixels.tif", "w", driver="GTiff", height=16, width=16, count=2, dtype="uint16",
                       crs="EPSG:32632", transform=from_origin(0, 16, 1, 1), nodata=0) as dst:
        dst.write(__import__("numpy").ones((2, 16, 16), "uint16"))
    (product / "meta.json").write_text(json.dumps({"date": "2022-02-02"}))

    def detect(path: str) -> bool:
        return path.endswith(".tsp") and os.path.isdir(path)

    def open_tsp(path: str, **options) -> Scene:
        from dataclasses import replace

        scene = formats.multiband.open_multiband(os.path.join(path, "pixels.tif"), band_names=["RED", "NIR"])
        date = dt.date.fromisoformat(json.loads(open(os.path.join(path, "meta.json")).read())["date"])
        return replace(scene, id="one", date=date)

    fmt = register_format(ProductFormat("test product", detect, open_tsp), before="band folder")
    try:
        assert [f.name for f in FORMATS].index("test product") == [f.name for f in FORMATS].index("band folder") - 1
        assert detect_format(str(product)) is fmt
        scene = open_scenes([str(product)])[0]
        assert scene.id == "one" and scene.band_names == ["RED", "NIR"] and scene.date == dt.date(2022, 2, 2)
    finally:
        unregister_format("test product")
    assert detect_format(str(product)) is formats.band_folder.FORMAT


def test_old_module_paths_keep_their_names():
    from eoscale.raster import landsat, safe, sources, stac

    assert safe.SCL_NODATA_CLASSES == (0, 1, 3, 8, 9, 10) and callable(safe.open_safe) and callable(safe.is_safe)
    assert landsat.QA_NODATA_BITS == 0b111111 and (landsat.C2_MULT, landsat.C2_ADD) == (2.75e-5, -0.2)
    assert stac.SENTINEL2_ASSETS["nir08"] == "B8A" and stac.LANDSAT_ASSETS["nir08"] == "SR_B5"
    assert callable(stac.label_files) and callable(stac.open_items)
    for name in ("Scene", "BandFile", "ClassMask", "open_raster", "check_crs", "expand_paths", "nodata_of",
                 "describe_skipped", "map_scene_bands", "select_scene_bands", "open_scenes", "open_scene"):
        assert hasattr(sources, name), name


def test_a_landsat_folder_named_by_descriptions_only_is_still_calibrated(layouts, tmp_path):
    """Files renamed by a user (band1.tif …) whose descriptions say SR_B2 …: the Landsat format takes the folder, so
    the MTL's reflectance factors and QA_PIXEL apply, as before the formats were registered."""
    import shutil

    source = layouts["landsat"].scene_paths[0]
    folder = tmp_path / "renamed"
    folder.mkdir()
    for i, f in enumerate(sorted(source.iterdir())):
        band = next((b for b in ("SR_B1", "SR_B2", "SR_B3", "SR_B4", "SR_B5", "SR_B6", "SR_B7") if f.stem.endswith(b)), None)
        if band is None:
            shutil.copy(f, folder / f.name)  # QA_PIXEL, MTL and the rest keep their names
            continue
        target = folder / f"layer{i}.tif"
        shutil.copy(f, target)
        with rasterio.open(target, "r+") as dst:
            dst.set_band_description(1, band)
    assert detect_format(str(folder)) is formats.landsat.FORMAT
    renamed, original = open_scene(str(folder)), open_scene(str(source))
    assert [b.name for b in renamed.bands] == [b.name for b in original.bands]
    assert [(b.scale, b.offset) for b in renamed.bands] == [(b.scale, b.offset) for b in original.bands]
    assert renamed.class_mask is not None and renamed.class_mask.name == "QA_PIXEL"
    assert renamed.date == original.date
