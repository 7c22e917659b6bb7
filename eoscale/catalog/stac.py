"""STAC descriptions of eoscale's outputs: an Item beside every land-cover map, a Collection in every tile store.

A map's Item (`<scene>_item.json`) says where the map lies (geometry and bbox in WGS84, the projection
extension with the map's own grid), what its pixels mean (raster extension: data type, nodata, resolution;
classification extension: each class code with its name and colour), which files belong to it (assets, as the
output writer of the map's target kind describes them, `AssetInfo`; a class map's: `landcover`, `confidence`,
`quicklook`, `areas_csv`, `areas_json`; hrefs relative to the Item) and where it
comes from (`properties["eoscale:lineage"]`: checkpoint, adapter, training run, tile store, scenes, version;
`eoscale lineage` checks it). `eoscale predict` adds `properties["eoscale:predict_run"]` once its MLflow run is
logged. A store's Collection (`<store>/collection.json`) gives its extent, class table, bands, fingerprint and
input files. Both are plain STAC 1.1 JSON written by pystac; hrefs are relative so folders can be moved.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pystac
from affine import Affine
from pystac.extensions.classification import Classification, ClassificationExtension
from pystac.extensions.eo import Band, EOExtension
from pystac.extensions.file import FileExtension
from pystac.extensions.projection import ProjectionExtension
from pystac.extensions.raster import DataType, RasterBand, RasterExtension
from rasterio.crs import CRS
from rasterio.warp import transform as warp_points

from eoscale.classes import ClassTable
from eoscale.store import schema

LINEAGE = "eoscale:lineage"  # in a map Item's properties: the chain (see `eoscale.maps.lineage`)
PREDICT_RUN = "eoscale:predict_run"  # in a map Item's properties: {run_id, tracking_uri} of the predict run
FINGERPRINT = "eoscale:fingerprint"  # in a store Collection: `eoscale.catalog.digest.store_fingerprint`
INPUTS = "eoscale:inputs"  # in a store Collection: its input files with their sha256
ZARR_MEDIA_TYPE = "application/vnd+zarr"
EDGE_POINTS = 21  # points per edge of a footprint: a UTM square is not straight in WGS84
SHA256_MULTIHASH = "1220"  # the file extension's checksum is a multihash: sha2-256, 32 bytes


# -- geometry -------------------------------------------------------------------------------------------------
def footprint(crs: CRS, transform: Affine, width: int, height: int, *, row: int = 0,
              col: int = 0) -> tuple[dict, list[float]]:
    """The GeoJSON polygon and bbox (WGS84 longitude/latitude) of pixels `row..row+height`, `col..col+width` of a
    grid; each edge densified so the outline follows the grid."""
    steps = np.linspace(0.0, 1.0, EDGE_POINTS)[:-1]  # each edge without its last corner, the next edge's first
    n = len(steps)
    cols = np.concatenate([col + steps * width, np.full(n, col + width), col + (1 - steps) * width, np.full(n, col)])
    rows = np.concatenate([np.full(n, row), row + steps * height, np.full(n, row + height), row + (1 - steps) * height])
    xs, ys = transform @ (cols, rows)
    lons, lats = warp_points(crs, CRS.from_epsg(4326), list(xs), list(ys))
    # pixel order (along the top row, then down) is clockwise on a north-up map; GeoJSON wants counter-clockwise
    ring = [[round(float(x), 7), round(float(y), 7)] for x, y in zip(lons, lats, strict=True)][::-1]
    ring.append(ring[0])
    bbox = [min(lons), min(lats), max(lons), max(lats)]
    return {"type": "Polygon", "coordinates": [ring]}, [round(float(v), 7) for v in bbox]


def union_bbox(boxes: list[list[float]]) -> list[float]:
    return [min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)]


def _projection(target, crs: CRS, *, shape: tuple[int, int] | None = None, transform: Affine | None = None) -> None:
    proj = ProjectionExtension.ext(target, add_if_missing=True)
    epsg = crs.to_epsg()
    if epsg:
        proj.code = f"EPSG:{epsg}"
    else:
        proj.wkt2 = crs.to_wkt()
    if shape is not None:
        proj.shape = list(shape)
    if transform is not None:
        proj.transform = [float(v) for v in list(transform)[:6]]


# -- classes --------------------------------------------------------------------------------------------------
def class_name(name: str, code: int) -> str:
    """A class's name as the classification extension allows it (letters, digits, `-` and `_`)."""
    return re.sub(r"[^0-9A-Za-z_-]+", "_", name).strip("_").lower() or f"class_{code}"


def classifications(table: ClassTable, areas: Mapping | None = None) -> list[Classification]:
    """The class table as the classification extension's classes (value = code, colour without '#'), with each
    class's pixel count and percentage of the valid area when `areas` (`eoscale.infer.areas`) is given."""
    shares = {r["code"]: r for r in (areas or {}).get("classes", [])}
    out = []
    for c in table.classes:
        share = shares.get(c.code, {})
        out.append(Classification.create(value=int(c.code), name=class_name(c.name, c.code), title=c.name,
                                         description=c.name, color_hint=c.color.lstrip("#").upper(),
                                         count=share.get("pixels"), percentage=share.get("percent")))
    return out


# -- map items ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AssetInfo:
    """How a map Item describes one of its files: title, media type, roles; for a raster, its band (`raster`:
    `RasterBand.create`'s keywords but `spatial_resolution`, the map's); `classes`: the classification extension's
    classes (from the Item's class table and areas)."""

    title: str | None
    media_type: str | None
    roles: list[str] | None
    raster: Mapping | None = None
    classes: bool = False


def class_map_assets(dtype: str, nodata: int, confidence_nodata: int = 255) -> dict[str, AssetInfo]:
    """The assets of a class map (the "classes" output writer of `eoscale.infer.outputs`)."""
    return {
        "landcover": AssetInfo("land-cover class codes", pystac.MediaType.COG, ["data"],
                               raster={"nodata": nodata, "data_type": DataType(dtype)}, classes=True),
        "confidence": AssetInfo("probability of the mapped class, percent", pystac.MediaType.COG, ["metadata"],
                                raster={"nodata": confidence_nodata, "data_type": DataType.UINT8, "unit": "percent"}),
        "quicklook": AssetInfo("quick-look with legend", pystac.MediaType.PNG, ["overview", "visual"]),
        "areas_csv": AssetInfo("class areas", "text/csv", ["metadata"]),
        "areas_json": AssetInfo("class areas", pystac.MediaType.JSON, ["metadata"]),
    }


def map_item(scene_id: str, *, crs: CRS, transform: Affine, width: int, height: int, table: ClassTable | None = None,
             dtype: str = "uint8", nodata: int = 0, files: Mapping[str, Path | None], lineage: Mapping,
             areas: Mapping | None = None, confidence_nodata: int = 255, checksums: Mapping[str, str] | None = None,
             when: dt.datetime | None = None, assets: Mapping[str, AssetInfo] | None = None,
             product: str = "landcover", title: str | None = None) -> pystac.Item:
    """The STAC Item of one scene's map (id `<scene>_<product>`). `files` names the assets (None: not written), all
    in the Item's folder, `assets` says what each is (default: a class map's, `class_map_assets`: `landcover`,
    `confidence`, `quicklook`, `areas_csv`, `areas_json`), `checksums` their sha256s."""
    geometry, bbox = footprint(crs, transform, width, height)
    item = pystac.Item(id=f"{scene_id}_{product}", geometry=geometry, bbox=bbox,
                       datetime=when or dt.datetime.now(dt.UTC),
                       properties={"title": title or f"land cover of {scene_id}", LINEAGE: dict(lineage)})
    _projection(item, crs, shape=(height, width), transform=transform)
    resolution = float(abs(transform.a))
    described = class_map_assets(dtype, nodata, confidence_nodata) if assets is None else assets
    for key, path in files.items():
        if path is None:
            continue
        info = described.get(key) or AssetInfo(None, None, None)
        asset = pystac.Asset(f"./{Path(path).name}", title=info.title, media_type=info.media_type, roles=info.roles)
        item.add_asset(key, asset)
        if checksums and key in checksums:
            FileExtension.ext(asset, add_if_missing=True).checksum = SHA256_MULTIHASH + checksums[key]
        if info.raster is not None:
            RasterExtension.ext(asset, add_if_missing=True).bands = [RasterBand.create(
                **info.raster, spatial_resolution=resolution)]
        if info.classes and table is not None:
            ClassificationExtension.ext(asset, add_if_missing=True).classes = classifications(table, areas)
    return item


def checksum_of(asset: Mapping) -> str | None:
    """The sha256 (hex) in an asset's `file:checksum`, if it holds one."""
    value = asset.get("file:checksum") or ""
    return value[len(SHA256_MULTIHASH):] if value.startswith(SHA256_MULTIHASH) else None


# -- store collections ----------------------------------------------------------------------------------------
def store_collection(attrs: Mapping, *, footprints: list[list[float]], fingerprint: str,
                     tiles: int) -> pystac.Collection:
    """The STAC Collection of a tile store from its group attributes (`eoscale.schema`), the WGS84 bbox of each
    scene's tiles, its fingerprint and tile count.

    It depends on the store's content only (its id is named after the fingerprint, no time of writing), so two
    ingests of the same inputs (a resumed one, one on other Dask workers) give byte-identical stores, this file
    included. The temporal extent is open ([null, null]): eoscale reads no acquisition time from the scenes."""
    extent = pystac.Extent(pystac.SpatialExtent([union_bbox(footprints), *footprints]),
                           pystac.TemporalExtent([[None, None]]))
    collection = pystac.Collection(
        id=f"eoscale-tiles-{fingerprint[:16]}", title="eoscale tile store", extent=extent, license="other",
        description=(f"{tiles} tiles of {attrs[schema.ATTR_TILE_SIZE]}×{attrs[schema.ATTR_TILE_SIZE]} px, bands "
                     f"{', '.join(attrs[schema.ATTR_BANDS])}, cut by eoscale ingest"),
        extra_fields={FINGERPRINT: fingerprint, INPUTS: list(attrs.get(schema.ATTR_INPUTS) or []),
                      "eoscale:tiles": tiles, "eoscale:splits": dict(attrs[schema.ATTR_SPLITS]),
                      "eoscale:tile_size": attrs[schema.ATTR_TILE_SIZE]},
    )
    EOExtension.summaries(collection, add_if_missing=True).bands = [
        Band.create(name=name, center_wavelength=None if nm is None else nm / 1000.0)
        for name, nm in zip(attrs[schema.ATTR_BANDS], attrs[schema.ATTR_WAVELENGTHS], strict=True)]
    table = ClassTable.from_records(list(attrs[schema.ATTR_CLASSES]))
    ClassificationExtension.summaries(collection, add_if_missing=True).classes = classifications(table)
    epsgs = sorted({s.get("epsg") for s in attrs[schema.ATTR_SCENES] if s.get("epsg")})
    if epsgs:
        collection.summaries.add("proj:code", [f"EPSG:{e}" for e in epsgs])
    collection.add_asset("tiles", pystac.Asset("./", title="the Zarr v3 tile store", media_type=ZARR_MEDIA_TYPE,
                                               roles=["data"]))
    return collection


def read_store_fingerprint(store: str | os.PathLike) -> str | None:
    """The fingerprint a store's Collection records, or None (a store ingested before stores had one)."""
    try:
        data = json.loads((Path(store) / schema.COLLECTION_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data.get(FINGERPRINT) if isinstance(data, dict) else None


# -- files ----------------------------------------------------------------------------------------------------
def to_json(obj: pystac.STACObject) -> str:
    """A STAC object as JSON text, without absolute self links (its hrefs stay relative)."""
    return json.dumps(obj.to_dict(include_self_link=False, transform_hrefs=False), indent=1) + "\n"


def write_json(path: Path, data: str | Mapping) -> None:
    """Write `data` (text or a JSON object) to `path` atomically: a hidden temporary file, then a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def update_properties(path: Path, properties: Mapping) -> None:
    """Add `properties` to the STAC Item at `path`, rewriting it atomically."""
    data = json.loads(Path(path).read_text())
    data.setdefault("properties", {}).update(properties)
    write_json(path, data)
