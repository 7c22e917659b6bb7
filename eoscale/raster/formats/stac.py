"""STAC Items as scenes (`--stac`) and as label rasters: local assets, bands by common name or asset key.

An Item describes one scene by its assets. eoscale reads Items as the big archives write them: Sentinel-2 L2A COGs
(Element 84's Earth Search: assets `blue`, `green`, `red`, `rededge1..3`, `nir`, `nir08`, `swir16`, `swir22`, `scl`;
Microsoft's Planetary Computer: `B02` … `B12`, `SCL`), Landsat Collection 2 Level-2 (USGS, Planetary Computer:
`coastal` … `swir22` whose `eo:bands` name `SR_B1` … `SR_B7`, `qa_pixel`) and any other Item whose assets carry
`eo:bands` common names (a generic RGB/RGBN camera). `ITEMS` is an Item JSON, an ItemCollection JSON, or a folder of
Item JSON files, read through pystac.

- The sensor comes from the Item's `platform` (else `constellation`) through `eoscale.sensors`.
- A band asset is named by its `eo:bands` name when that is a band of the sensor (`B8A`, `SR_B5`), else by its asset
  key (Earth Search's keys, `SENTINEL2_ASSETS`, `LANDSAT_ASSETS`); `--bands` may name bands by store name, asset key or
  unambiguous common name (`blue`, `nir08`; `rededge` names three bands).
- Each band's `raster:bands` scale and offset (reflectance = DN × scale + offset) are put on the store's scale
  (reflectance × 10,000) as the SAFE path puts BOA_ADD_OFFSET/BOA_QUANTIFICATION_VALUE there
  (`eoscale.raster.safe`): the same scene from its SAFE product and from its COGs gives identical tiles. An Item without
  raster:bands falls back on what its product says: `s2:processing_baseline` for Sentinel-2 (the offset from 04.00, as
  the Planetary Computer's Items need), the Collection 2 constants for Landsat.
- The scene's mask is its `scl` asset (the SAFE path's classes) or its `qa_pixel` asset (the Landsat folder's bits).
- The scene's date is the Item's `datetime` (else its `start_datetime`).
- An Item JSON given as a scene (`--scenes item.json`) is opened as one (the format `FORMAT`).
- Items of a sensor another format reads (Sentinel-1 backscatter: `eoscale.raster.formats.sentinel1`) are handed to it
  (`ITEM_OPENERS`).
- Compute nodes are offline: an asset href must be a local or relative path (relative to the Item's file); an
  http(s) or cloud href is refused with one line saying to download the assets first.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import pystac

from eoscale.bands import REFLECTANCE_SCALE, normalise_band_name
from eoscale.errors import InputError, InputNotFoundError
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.scene import (
    RASTER_SUFFIXES,
    BandFile,
    ClassMask,
    Scene,
    check_crs,
    check_dtype,
    expand_paths,
    nodata_of,
    open_raster,
    utc_date,
)
from eoscale.sensors import GENERIC, LANDSAT_OLI, SENSORS, SENTINEL2, get_sensor, sensor_of_platform

# the sensors' STAC asset keys (`SensorSpec.assets`: Earth Search's for Sentinel-2, whose Planetary Computer keys are
# the band names themselves; USGS's for Landsat), under the names they had before the sensor specs
SENTINEL2_ASSETS = dict(SENSORS[SENTINEL2].assets)
LANDSAT_ASSETS = dict(SENSORS[LANDSAT_OLI].assets)
GENERIC_ASSETS = dict(SENSORS[GENERIC].assets)
LABEL_ASSET_KEYS = ("map", "labels", "landcover", "classification", "data")  # which asset of a label Item, if several
_REMOTE = ("http", "https", "s3", "gs", "az", "abfs", "ftp")
# sensors whose Items another format opens ({sensor: open(source, bands=…)}: Sentinel-1 backscatter,
# `eoscale.raster.formats.sentinel1`), filled in by `eoscale.raster.formats`
ITEM_OPENERS: dict[str, Callable[..., Scene]] = {}


@dataclass(frozen=True)
class ItemSource:
    """An Item and where it was read from (relative hrefs are relative to that file's folder)."""

    item: pystac.Item
    path: str

    def asset_path(self, key: str) -> str:
        """The local file of asset `key`; a remote or missing file is a one-line error."""
        href = self.item.assets[key].href
        url = urlparse(href)
        if url.scheme.lower() in _REMOTE:
            raise InputError(f"STAC item {self.item.id!r} ({self.path}): asset {key!r} is at {href}, and eoscale reads "
                             f"local files only (compute nodes are offline): download the assets first and point the "
                             f"item's hrefs at the local files")
        local = unquote(url.path) if url.scheme == "file" else href
        path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(self.path)), local))
        if not os.path.isfile(path):
            raise InputNotFoundError(f"STAC item {self.item.id!r} ({self.path}): the file of asset {key!r} does not "
                                     f"exist ({path}): download the item's assets beside it or fix its href")
        return path


def read_items(patterns: list[str]) -> list[ItemSource]:
    """The Items named by `patterns`: Item JSON files, ItemCollection JSON files, folders of Item JSON files, globs."""
    found: list[ItemSource] = []
    for path in expand_paths(patterns, what="STAC item"):
        if os.path.isdir(path):
            files = sorted(p for p in Path(path).glob("*.json"))
            items = [s for f in files for s in _read(str(f), folder=True)]
            if not items:
                raise InputError(f"folder {path!r} holds no STAC Item JSON files: give Item files, an ItemCollection "
                                 f"file, or a folder of Item files")
            found += items
        else:
            found += _read(path)
    ids = [s.item.id for s in found]
    if len(set(ids)) != len(ids):
        raise InputError(f"two STAC items share an id: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    return found


def _read(path: str, *, folder: bool = False) -> list[ItemSource]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path!r} is not a readable JSON file ({err}): give a STAC Item or ItemCollection") from None
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "Feature":
            return [ItemSource(pystac.Item.from_dict(data, preserve_dict=False), path)]
        if kind == "FeatureCollection":
            return [ItemSource(item, path) for item in pystac.ItemCollection.from_dict(data, preserve_dict=False)]
    except (KeyError, TypeError, ValueError, pystac.STACError) as err:
        raise InputError(f"{path!r} is not a valid STAC Item or ItemCollection ({type(err).__name__}: {err})") from None
    if folder:
        return []  # a collection.json or catalog.json beside the Items
    raise InputError(f"{path!r} is not a STAC Item or ItemCollection (its type is {kind!r}): give an Item JSON, an "
                     f"ItemCollection JSON or a folder of Item JSON files")


def item_sensor(source: ItemSource) -> tuple[str, str | None]:
    """(sensor, platform) of an Item: its `platform` (else `constellation`) in the sensor registry; `generic` for a
    platform the registry does not know (the catch-all sensor)."""
    props = source.item.properties
    for value in (props.get("platform"), props.get("constellation")):
        if value:
            sensor, platform = sensor_of_platform(str(value))
            if sensor is not None:
                return sensor, platform
    return next((s.name for s in SENSORS.values() if s.catch_all), GENERIC), None


def _is_raster(asset: pystac.Asset) -> bool:
    media = (asset.media_type or "").lower()
    return "tiff" in media or "jp2" in media or Path(urlparse(asset.href).path).suffix.lower() in RASTER_SUFFIXES


def band_assets(source: ItemSource, sensor: str) -> dict[str, str]:
    """{band: asset key} of the Item's band assets (see the module docstring)."""
    spec = get_sensor(sensor)
    names = spec.band_names
    table = spec.assets
    out: dict[str, str] = {}
    for key, asset in source.item.assets.items():
        if not _is_raster(asset) or "data" not in (asset.roles or ["data"]):
            continue
        eo = asset.extra_fields.get("eo:bands") or []
        candidates = [eo[0].get("name", "")] if len(eo) == 1 else []
        candidates += [key]
        band = next((normalise_band_name(c) for c in candidates if normalise_band_name(c) in names), None)
        band = band or table.get(key.lower())
        if band is None and spec.assets_by_common_name and len(eo) == 1:
            band = table.get(str(eo[0].get("common_name", "")).lower())
        if band is not None and band not in out:
            out[band] = key
    return out


def _wanted(source: ItemSource, sensor: str, found: dict[str, str], bands: list[str] | None) -> list[str]:
    """The bands to take: `bands` (by store name, asset key or unambiguous common name), else the sensor's default."""
    spec = get_sensor(sensor)
    if not bands:
        default = [b for b in spec.default_bands if b in found]
        return default if not spec.catch_all else list(found)
    common: dict[str, list[str]] = {}
    for band, key in found.items():
        eo = source.item.assets[key].extra_fields.get("eo:bands") or [{}]
        common.setdefault(str(eo[0].get("common_name", "")).lower(), []).append(band)
    out = []
    for name in bands:
        lowered = name.lower()
        if lowered in spec.assets and spec.assets[lowered] in found:
            out.append(spec.assets[lowered])
        elif normalise_band_name(name) in found:
            out.append(normalise_band_name(name))
        elif len(common.get(lowered, [])) == 1:
            out.append(common[lowered][0])
        elif len(common.get(lowered, [])) > 1:
            raise InputError(f"--bands {name!r} is the common name of {', '.join(common[lowered])} in STAC item "
                             f"{source.item.id!r}: name the band ({', '.join(common[lowered])}) or its asset key")
        else:
            raise InputError(f"band {name!r} is not in STAC item {source.item.id!r} ({source.path}): it has "
                             f"{', '.join(f'{b} ({k})' for b, k in found.items())}")
    return out


def _exact(value: float) -> float:
    """`value` without the last bits float arithmetic adds (1e-4 × 10,000 is 1.0, as the SAFE path's 10,000/10,000)."""
    return float(f"{value:.10g}")


def _linear(source: ItemSource, key: str, sensor: str) -> tuple[float, float, dict]:
    """(scale, offset) onto the store's scale of band asset `key`, and what the store records of it."""
    raster = source.item.assets[key].extra_fields.get("raster:bands") or []
    facts = raster[0] if len(raster) == 1 and isinstance(raster[0], dict) else {}
    nodata, data_type = facts.get("nodata"), str(facts.get("data_type", ""))
    if _is_nan(nodata) and (data_type.startswith(("uint", "int")) or not data_type):
        raise InputError(f"STAC item {source.item.id!r} ({source.path}): asset {key!r} declares nodata NaN on "
                         f"{data_type or 'integer'} pixels, which cannot hold NaN: set its raster:bands nodata to the "
                         f"value its pixels use for no data (e.g. 0)")
    if "scale" in facts or "offset" in facts:
        scale, offset = float(facts.get("scale", 1.0)), float(facts.get("offset", 0.0))
        record = {"scale": scale, "offset": offset, "from": "raster:bands"}
    elif (spec := get_sensor(sensor)).default_linear is not None:
        # what the product says without raster:bands (`SensorSpec.default_linear`)
        linear = spec.default_linear(source.item.properties)
        if linear is None:
            raise InputError(f"STAC item {source.item.id!r} ({source.path}): {spec.title.split()[0]} asset {key!r} "
                             f"gives no raster:bands scale/offset and the item no {spec.linear_property}, so eoscale "
                             f"cannot put its values on the reflectance scale: add either to the item")
        scale, offset, where = linear
        record = {"scale": scale, "offset": offset, "from": where}
    else:
        return 1.0, 0.0, {"scale": 1.0, "offset": 0.0, "from": "none given: values as stored"}
    return _exact(scale * REFLECTANCE_SCALE), _exact(offset * REFLECTANCE_SCALE), record


def _is_nan(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "nan"
    return isinstance(value, float) and math.isnan(value)


def open_item(source: ItemSource, *, bands: list[str] | None = None, scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The scene an Item describes (see the module docstring)."""
    item = source.item
    sensor, platform = item_sensor(source)
    if sensor in ITEM_OPENERS:
        return ITEM_OPENERS[sensor](source, bands=bands)
    if sensor == "copdem":  # heights, not a scene: the DEM goes beside the scenes (eoscale.raster.static)
        raise InputError(f"STAC item {item.id!r} ({source.path}) is a DEM ({get_sensor(sensor).title}): give its "
                         f"file with --static DEM.tif (it becomes elevation and slope bands on every scene's grid), "
                         f"not as a scene")
    found = band_assets(source, sensor)
    if not found:
        raise InputError(f"STAC item {item.id!r} ({source.path}) has no band assets eoscale can name (assets: "
                         f"{', '.join(item.assets)}): band assets need eo:bands names or common names")
    wanted = _wanted(source, sensor, found, bands)
    spec = get_sensor(sensor)
    linear = spec.default_linear is not None
    band_files, factors, finest = [], {}, None
    for name in wanted:
        key = found[name]
        path = source.asset_path(key)
        scale, offset, record = _linear(source, key, sensor)
        factors[name] = {"asset": key, **record}
        band_files.append(BandFile(name, path, 1, scale=scale, offset=offset))
        with open_raster(path) as src:
            check_crs(path, src.crs)
            check_dtype(path, src.dtypes)
            pixel = abs(src.transform.a)
            if finest is None or pixel < finest[0]:
                finest = (pixel, path, (src.crs, src.transform, src.width, src.height, nodata_of(src)))
    crs, transform, width, height, nodata = finest[2]
    mask = None
    rule = spec.mask
    if rule is not None and rule.asset:
        key = next((k for k in item.assets if k.lower() == rule.asset), None)
        if key is None:
            raise InputError(f"STAC item {item.id!r} ({source.path}) has no {rule.asset!r} asset: eoscale "
                             f"masks clouds with it; add the asset (and its file) to the item")
        classes = rule.classes if scl_classes is None or not rule.classes else tuple(scl_classes)
        mask = ClassMask(rule.layer, source.asset_path(key), classes, bits=rule.bits)
    radiometry = {
        "product": "STAC Item", "item": os.path.abspath(source.path),
        "raster_bands": factors,
        "applied": f"store = (DN × scale + offset) × {REFLECTANCE_SCALE}, at least 1; DN nodata stays nodata"
        if linear else "none: values as stored",
    }
    return Scene(
        id=item.id,
        bands=tuple(band_files),
        crs=crs,
        transform=transform,
        width=width,
        height=height,
        nodata=nodata,
        paths=tuple(b.path for b in band_files) + ((mask.path,) if mask else ()) + (source.path,),
        sensor=sensor,
        platform=platform,
        radiometry=radiometry,
        class_mask=mask,
        date=item_date(item),
    )


def item_date(item: pystac.Item) -> dt.date | None:
    """The Item's `datetime` (else its `start_datetime`) as a UTC date (`2024-06-10T23:30:00-02:00` is 2024-06-11);
    None without either."""
    return utc_date(item.datetime or item.common_metadata.start_datetime)


def open_items(patterns: list[str], *, bands: list[str] | None = None,
               scl_classes: tuple[int, ...] | None = None) -> list[Scene]:
    """The scenes of every Item named by `patterns`."""
    return [open_item(s, bands=bands, scl_classes=scl_classes) for s in read_items(patterns)]


def label_files(patterns: list[str]) -> list[str]:
    """Label rasters named by `patterns`: raster paths and globs as they are, STAC Item/ItemCollection JSON files by
    their label asset (the one raster data asset, or the one keyed `map`, `labels`, … of several, as ESA WorldCover's
    Items key it)."""
    out = []
    for path in expand_paths(patterns, what="label raster"):
        if not path.lower().endswith(".json"):
            out.append(path)
            continue
        for source in _read(path):
            rasters = [k for k, a in source.item.assets.items() if _is_raster(a) and "data" in (a.roles or ["data"])]
            keyed = [k for k in LABEL_ASSET_KEYS if k in rasters]
            if len(rasters) != 1 and not keyed:
                raise InputError(f"STAC item {source.item.id!r} ({path}) has {len(rasters)} raster data assets "
                                 f"({', '.join(rasters) or 'none'}): eoscale takes the one keyed "
                                 f"{' or '.join(LABEL_ASSET_KEYS)}; give the label raster's file instead")
            out.append(source.asset_path(keyed[0] if keyed else rasters[0]))
    return out


def is_item_file(path: str) -> bool:
    """Whether `path` is a STAC Item JSON file (a `--scenes` entry that is an Item)."""
    if not (path.lower().endswith(".json") and os.path.isfile(path)):
        return False
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get("type") == "Feature" and "stac_version" in data


def open_item_file(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                   scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The format's `open`: the scene of the Item in file `path`."""
    return open_item(_read(path)[0], bands=bands, scl_classes=scl_classes)


FORMAT = ProductFormat("STAC Item", is_item_file, open_item_file)
