"""Digests and STAC descriptions: streamed sha256s, a store fingerprint that any byte changes, an Item that
pystac reads back with its extensions' fields, and footprints in WGS84."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pystac
import pytest
from affine import Affine
from pystac.extensions.classification import ClassificationExtension
from pystac.extensions.projection import ProjectionExtension
from pystac.extensions.raster import RasterExtension
from rasterio.crs import CRS

from eoscale.catalog import digest, stac
from tests.checkpoints import TABLE

UTM = CRS.from_epsg(32632)
GRID = Affine(10, 0, 310_000, 0, -10, 5_650_000)


def test_file_sha256_streams_chunks(tmp_path: Path):
    path = tmp_path / "big.bin"
    data = bytes(range(256)) * (digest.CHUNK // 256 * 2 + 3)  # two chunks and a bit
    path.write_bytes(data)
    assert digest.file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert digest.file_record(path) == {"path": str(path.resolve()), "size": len(data),
                                        "sha256": hashlib.sha256(data).hexdigest()}


def test_store_fingerprint_sees_any_byte_and_ignores_the_collection(tmp_path: Path):
    store = tmp_path / "s.zarr"
    (store / "images" / "c").mkdir(parents=True)
    (store / "zarr.json").write_text("{}")
    shard = store / "images" / "c" / "0"
    shard.write_bytes(b"\x00" * 1000)
    before = digest.store_fingerprint(store)
    known = {"images/c/0": digest.file_sha256(shard)}
    assert digest.store_fingerprint(store, known=known) == before
    (store / "collection.json").write_text("{}")  # holds the fingerprint: not part of it
    assert digest.store_fingerprint(store) == before
    shard.write_bytes(b"\x00" * 999 + b"\x01")
    assert digest.store_fingerprint(store) != before
    copy = tmp_path / "elsewhere.zarr"
    import shutil

    shutil.copytree(store, copy)
    assert digest.store_fingerprint(copy) == digest.store_fingerprint(store)


def test_check_record(tmp_path: Path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    record = digest.file_record(path)
    assert digest.check_record(record)[0] == digest.OK
    path.write_bytes(b"abd")
    assert digest.check_record(record)[0] == digest.CHANGED
    path.unlink()
    assert digest.check_record(record)[0] == digest.MISSING
    assert digest.check_record(None)[0] == digest.UNKNOWN


def test_footprint_is_wgs84_counter_clockwise_and_closed():
    geometry, bbox = stac.footprint(UTM, GRID, 347, 301)
    ring = geometry["coordinates"][0]
    assert ring[0] == ring[-1] and len(ring) == 4 * (stac.EDGE_POINTS - 1) + 1
    area2 = sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(ring, ring[1:], strict=False))
    assert area2 > 0  # counter-clockwise (RFC 7946)
    assert 6.29 < bbox[0] < bbox[2] < 6.35 and 50.94 < bbox[1] < bbox[3] < 50.98
    # a window of the grid lies inside the whole
    _, inner = stac.footprint(UTM, GRID, 100, 100, row=50, col=50)
    assert bbox[0] < inner[0] < inner[2] < bbox[2] and bbox[1] < inner[1] < inner[3] < bbox[3]


def test_map_item_round_trips_with_its_extensions(tmp_path: Path):
    files = {"landcover": tmp_path / "s_landcover.tif", "confidence": None, "quicklook": tmp_path / "s_quicklook.png",
             "areas_csv": tmp_path / "s_areas.csv", "areas_json": tmp_path / "s_areas.json"}
    areas = {"classes": [{"code": c.code, "pixels": 10 * (i + 1), "percent": 10.0 * (i + 1)}
                         for i, c in enumerate(TABLE.classes)]}
    item = stac.map_item("s", crs=UTM, transform=GRID, width=347, height=301, table=TABLE, dtype="uint8", nodata=0,
                         files=files, lineage={"checkpoint": {"path": "/x.ckpt", "sha256": "ab"}}, areas=areas,
                         checksums={"landcover": "cd" * 32})
    path = tmp_path / "s_item.json"
    stac.write_json(path, stac.to_json(item))
    back = pystac.Item.from_file(str(path))
    assert back.id == "s_landcover" and back.properties[stac.LINEAGE]["checkpoint"]["sha256"] == "ab"
    proj = ProjectionExtension.ext(back)
    assert proj.code == "EPSG:32632" and proj.shape == [301, 347] and proj.transform == list(GRID)[:6]
    assert set(back.assets) == {"landcover", "quicklook", "areas_csv", "areas_json"}
    landcover = back.assets["landcover"]
    assert landcover.roles == ["data"] and back.assets["quicklook"].roles[0] == "overview"
    assert landcover.get_absolute_href() == str(files["landcover"])
    assert stac.checksum_of(landcover.to_dict()) == "cd" * 32
    (band,) = RasterExtension.ext(landcover).bands
    assert band.nodata == 0 and band.data_type == "uint8" and band.spatial_resolution == 10.0
    classes = ClassificationExtension.ext(landcover).classes
    assert [(c.value, c.title, c.color_hint) for c in classes] == [
        (c.code, c.name, c.color[1:].upper()) for c in TABLE.classes]
    assert all("#" not in c.color_hint and " " not in c.name for c in classes)
    assert classes[1].count == 20 and classes[1].percentage == 20.0
    data = json.loads(path.read_text())
    assert {e.split("/")[3] for e in data["stac_extensions"]} == {"projection", "raster", "classification", "file"}


def test_a_map_item_of_another_target_kind_describes_its_own_assets(tmp_path: Path):
    """An output writer of another target kind (`eoscale.infer.outputs`) names its assets and what they are."""
    from pystac.extensions.raster import DataType

    assets = {"values": stac.AssetInfo("canopy height, m", pystac.MediaType.COG, ["data"],
                                       raster={"nodata": -9999.0, "data_type": DataType.FLOAT32, "unit": "m"})}
    item = stac.map_item("s", crs=UTM, transform=GRID, width=347, height=301, files={"values": tmp_path / "s_h.tif"},
                         lineage={}, assets=assets, product="height", title="canopy height of s")
    data = item.to_dict(include_self_link=False, transform_hrefs=False)
    assert data["id"] == "s_height" and data["properties"]["title"] == "canopy height of s"
    (band,) = RasterExtension.ext(item.assets["values"]).bands
    assert band.nodata == -9999.0 and band.data_type == "float32" and band.unit == "m"
    assert {e.split("/")[3] for e in data["stac_extensions"]} == {"projection", "raster"}  # no classes


def test_update_properties_is_atomic_and_keeps_the_rest(tmp_path: Path):
    path = tmp_path / "i.json"
    stac.write_json(path, {"type": "Feature", "properties": {"a": 1}})
    stac.update_properties(path, {stac.PREDICT_RUN: {"run_id": "r", "tracking_uri": "u"}})
    assert json.loads(path.read_text())["properties"] == {"a": 1, stac.PREDICT_RUN: {"run_id": "r", "tracking_uri": "u"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.json"]


@pytest.mark.parametrize("name,expected", [("Tree cover", "tree_cover"), ("Built-up", "built-up"), ("—", "class_7")])
def test_class_names_fit_the_extension(name, expected):
    assert stac.class_name(name, 7) == expected
