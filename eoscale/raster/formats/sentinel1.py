"""Sentinel-1 backscatter products: STAC Items as the large catalogues distribute them, and folders of one COG a
polarisation (with or without their Item).

- STAC Items (`--stac`, or an Item file as a scene): Microsoft's Planetary Computer `sentinel-1-rtc` (γ0, terrain-
  flattened) and any Item of calibrated σ0/γ0 COGs: assets keyed `vv`, `vh` (`hh`, `hv`), or carrying one
  `sar:polarizations` entry; properties `platform` (`sentinel-1a`…), `sar:instrument_mode`, `sar:polarizations`,
  `sar:product_type`, `sat:orbit_state`, `sat:relative_orbit`. Element 84's Earth Search `sentinel-1-grd` Items point
  at uint16 digital numbers (not calibrated: σ0 needs the product's calibration tables), which are refused with one
  line saying how to calibrate them first.
- A folder (`--scenes`): files naming their polarisation (`…_vv.tif`, `iw-vh.tiff`, `VV.tif`); a STAC Item in it is
  read for its metadata. The date is the Item's `datetime`, else the product name's start of sensing
  (`S1A_IW_GRDH_1SDV_20230615T171524_…`, of the folder or a file), else the files' ACQUISITIONDATETIME tag.

The values become decibels on the store's scale (`eoscale.sensors.sentinel1`): linear power through 10·log10 (floored:
noise removal's small negative power over calm water is data at the floor, only the file's nodata is nodata), decibels
as they are (floored alike). Whatever a file holds, it is resampled in linear power (a file in decibels through
`eoscale.raster.power_warp`), never averaged in decibels. Which one a file holds is what its metadata state (the asset's
`raster:bands` `unit`, the band's GDAL unit type: `dB` or `linear`) and what its values show (linear above -1 and mostly
below 1, dB mostly negative): stated and shown must agree, else one line and exit 2 (a dB file labelled linear would be
logged twice); without a statement, the values decide (`eoscale.sensors.sentinel1.scale_of_values`). The scale, the
convention (σ0 or γ0) and the orbit (`sat:orbit_state`: ascending or descending, `sat:relative_orbit`) go with the scene
into the store's attributes. Border noise along the swath edge is masked (`eoscale.raster.border_noise`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eoscale.errors import InputError
from eoscale.raster.border_noise import BorderNoise
from eoscale.raster.formats.band_folder import stac_item_in
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.formats.stac import ItemSource, read_items
from eoscale.raster.scene import RASTER_SUFFIXES, BandFile, Scene, check_crs, open_raster, tiff_date, utc_date
from eoscale.sensors import band_in_file_name, get_sensor
from eoscale.sensors.sentinel1 import (
    BORDER_MARGIN_M,
    BORDER_NOISE_DB,
    DB_FLOOR,
    DB_STORE,
    LINEAR,
    SENTINEL1,
    STORE_AT_0_DB,
    STORE_PER_DB,
    product_date,
    product_platform,
    scale_of_values,
    unit_scale,
)

FLOAT_TYPES = ("float32", "float64")
SAMPLE_EDGE = 256  # the values that say linear or dB are read from an overview of at most this many pixels a side
# sat:/sar: properties kept with the scene (the orbit direction separates two looks at the same ground)
ACQUISITION_KEYS = {"sat:orbit_state": "orbit_state", "sat:relative_orbit": "relative_orbit",
                    "sat:absolute_orbit": "absolute_orbit", "sar:instrument_mode": "instrument_mode",
                    "sar:polarizations": "polarizations", "sar:product_type": "product_type",
                    "sar:frequency_band": "frequency_band"}


@dataclass(frozen=True)
class Polarisation:
    """One band file of a SAR scene: its band, file, where it came from (asset key or file name) and the scale its
    metadata state (None: not stated)."""

    band: str
    path: str
    source: str
    stated: str | None


def file_scale(path: str) -> tuple[str | None, str | None]:
    """(what the file's band unit states, what its values show) of a float backscatter file."""
    with open_raster(path) as src:
        stated = unit_scale(src.units[0] if src.units else None)
        factor = max(1, math.ceil(max(src.width, src.height) / SAMPLE_EDGE))
        shape = (max(1, src.height // factor), max(1, src.width // factor))
        values = src.read(1, out_shape=shape, masked=True)  # nearest neighbour: no value is blended with nodata
    return stated, scale_of_values(np.ma.filled(values.astype(np.float64), np.nan))


def _check_file(path: str, item: str) -> None:
    with open_raster(path) as src:
        check_crs(path, src.crs)
        dtype = src.dtypes[0]
    if dtype not in FLOAT_TYPES:
        raise InputError(f"{item}: {path!r} holds {dtype} pixels, which are Sentinel-1 digital numbers, not calibrated "
                         f"backscatter (Earth Search's sentinel-1-grd): calibrate them to σ0 or γ0 first (ESA SNAP, "
                         f"sarsen) or take Planetary Computer's sentinel-1-rtc COGs")


def band_file(pol: Polarisation, item: str) -> tuple[BandFile, dict]:
    """The band of a polarisation file on the store's decibel scale, and its record; a scale stated against what the
    values show is a one-line error."""
    _check_file(pol.path, item)
    stated_in_file, shown = file_scale(pol.path)
    stated = pol.stated or stated_in_file
    if stated and shown and stated != shown:
        raise InputError(f"{item}: {pol.band} ({pol.path}) is stated to be {_words(stated)} but its values are "
                         f"{_words(shown)}: fix the metadata (raster:bands unit, or the band's unit type) or give the "
                         f"{_words(stated)} file")
    scale = stated or shown
    if scale is None:
        raise InputError(f"{item}: cannot tell whether {pol.band} ({pol.path}) is linear power or dB (no unit stated, "
                         f"values neither all above -1 and mostly below 1 nor mostly negative): state it in raster:bands "
                         f"unit or the band's unit type ('linear' or 'dB')")
    decode = "power_db" if scale == LINEAR else "db"
    record = {"source": pol.source, "file": scale, "from": "metadata" if stated else "values",
              **({"values": shown} if shown else {})}
    return BandFile(pol.band, pol.path, 1, scale=STORE_PER_DB, offset=STORE_AT_0_DB, decode=decode), record


def _words(scale: str) -> str:
    return "linear power" if scale == LINEAR else "in dB"


def sar_scene(*, scene_id: str, polarisations: list[Polarisation], bands: list[str] | None, item: str,
              paths: tuple[str, ...], platform: str | None, acquisition: dict, backscatter: str, date) -> Scene:
    """The scene of a set of polarisation files (see the module docstring)."""
    found = {p.band: p for p in polarisations}
    spec = get_sensor(SENTINEL1)
    wanted = [b.upper() for b in bands] if bands else [b for b in spec.default_bands if b in found] or list(found)
    missing = [b for b in wanted if b not in found]
    if missing:
        raise InputError(f"{item} has no {', '.join(missing)} band: it has {', '.join(found)}")
    band_files, records, finest = [], {}, None
    for name in wanted:
        band, records[name] = band_file(found[name], item)
        band_files.append(band)
        with open_raster(band.path) as src:
            pixel = abs(src.transform.a)
            if finest is None or pixel < finest[0]:
                finest = (pixel, src.crs, src.transform, src.width, src.height)
    _, crs, transform, width, height = finest
    metres = finest[0] * 111_320.0 if crs.is_geographic else finest[0]
    noise = BorderNoise(floor=int(round(BORDER_NOISE_DB * STORE_PER_DB + STORE_AT_0_DB)),
                        margin_px=max(1, int(round(BORDER_MARGIN_M / metres))), floor_db=BORDER_NOISE_DB)
    radiometry = {
        "product": item.split(" ")[0] if item.startswith("STAC") else "Sentinel-1 folder",
        "units": "dB", "backscatter": backscatter, **DB_STORE, "bands": records,
        "applied": f"store = dB × {STORE_PER_DB:g} + {STORE_AT_0_DB:g} (dB = store × {DB_STORE['scale']} "
                   f"{DB_STORE['offset']:+g}); resampled in linear power; linear power taken to dB as 10·log10, "
                   f"floored at {DB_FLOOR:g} dB",
    }
    return Scene(id=scene_id, bands=tuple(band_files), crs=crs, transform=transform, width=width, height=height,
                 nodata=0.0, paths=paths, sensor=SENTINEL1, platform=platform, radiometry=radiometry,
                 date=date, acquisition=acquisition or None, border_noise=noise)


def _backscatter(collection: str, properties: dict, assets: list) -> str:
    """σ0 or γ0, from what the Item says (an RTC collection or product, or an asset described as gamma nought)."""
    said = " ".join([collection, str(properties.get("sar:product_type", "")),
                     *(f"{a.title or ''} {a.description or ''}" for a in assets)]).lower()
    return "gamma0 (terrain-flattened)" if "rtc" in said or "gamma" in said else "sigma0"


def item_polarisations(source: ItemSource) -> list[Polarisation]:
    """The polarisation assets of an Item: keyed `vv`, `vh`, … or carrying one `sar:polarizations` entry."""
    out: list[Polarisation] = []
    for key, asset in source.item.assets.items():
        if "data" not in (asset.roles or ["data"]) or Path(asset.href).suffix.lower() not in RASTER_SUFFIXES:
            continue
        pols = asset.extra_fields.get("sar:polarizations") or []
        band = key.upper() if key.upper() in ("VV", "VH", "HH", "HV") else (pols[0].upper() if len(pols) == 1 else None)
        if band is None or any(p.band == band for p in out):
            continue
        raster = asset.extra_fields.get("raster:bands") or [{}]
        stated = unit_scale(raster[0].get("unit")) if isinstance(raster[0], dict) else None
        out.append(Polarisation(band, source.asset_path(key), f"asset {key}", stated))
    return out


def open_sentinel1_item(source: ItemSource, *, bands: list[str] | None = None, **_: object) -> Scene:
    """The scene of a Sentinel-1 Item (the STAC Item format hands Sentinel-1 Items here)."""
    item = source.item
    what = f"STAC item {item.id!r} ({source.path})"
    pols = item_polarisations(source)
    if not pols:
        raise InputError(f"{what} has no polarisation assets (assets: {', '.join(item.assets)}): eoscale reads assets "
                         f"keyed vv/vh/hh/hv or carrying sar:polarizations")
    props = item.properties
    acquisition = {name: props[key] for key, name in ACQUISITION_KEYS.items() if key in props}
    date = utc_date(item.datetime or item.common_metadata.start_datetime) or product_date(item.id)
    platform = str(props.get("platform", "")).lower() or product_platform(item.id)
    return sar_scene(scene_id=item.id, polarisations=pols, bands=bands, item=what,
                     paths=tuple(p.path for p in pols) + (source.path,), platform=platform, acquisition=acquisition,
                     backscatter=_backscatter(item.collection_id or "", props, list(item.assets.values())), date=date)


def _is_sentinel1_folder(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    return any(f.suffix.lower() in RASTER_SUFFIXES and (band_in_file_name(f.stem) or ("",))[0] == SENTINEL1
               for f in Path(path).iterdir())


def open_sentinel1_folder(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                          **_: object) -> Scene:
    """A folder of one COG a polarisation as a scene; the STAC Item in it, if any, gives its metadata."""
    item_file = stac_item_in(path)
    if item_file is not None:
        return open_sentinel1_item(read_items([str(item_file)])[0], bands=bands)
    pols, tags, date = [], {}, None
    for f in sorted(Path(path).iterdir()):
        identity = band_in_file_name(f.stem) if f.suffix.lower() in RASTER_SUFFIXES else None
        if not identity or identity[0] != SENTINEL1:
            continue
        if any(p.band == identity[1] for p in pols):
            raise InputError(f"Sentinel-1 folder {path!r} has two files for {identity[1]}: keep one a polarisation")
        pols.append(Polarisation(identity[1], str(f), f"file {f.name}", None))
        with open_raster(str(f)) as src:
            tags = tags or {k.lower(): v for k, v in src.tags().items()}
            date = date or product_date(f.stem) or tiff_date(src)
    name = Path(path).name
    acquisition = {n: tags[k] for k, n in ((k.split(":")[-1], n) for k, n in ACQUISITION_KEYS.items()) if k in tags}
    if "relative_orbit" in acquisition and str(acquisition["relative_orbit"]).isdigit():
        acquisition["relative_orbit"] = int(acquisition["relative_orbit"])
    return sar_scene(scene_id=name, polarisations=pols, bands=bands, item=f"Sentinel-1 folder {path!r}",
                     paths=tuple(p.path for p in pols), platform=product_platform(name) or tags.get("platform"),
                     acquisition=acquisition, backscatter=tags.get("backscatter", "sigma0"),
                     date=product_date(name) or date)


FORMAT = ProductFormat("Sentinel-1 folder", _is_sentinel1_folder, open_sentinel1_folder)
