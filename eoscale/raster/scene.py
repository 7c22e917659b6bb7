"""Scene types: a scene's bands (where each lives, its map onto the store's scale), its mask layer, its reference grid
and date; and the checks every product format makes of a raster before any work starts.

The product formats (`eoscale.raster.formats`) open paths as `Scene`s; `eoscale.raster.reader` reads their windows.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
from dataclasses import dataclass, field

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.errors import RasterioIOError
from rasterio.transform import array_bounds

from eoscale.errors import InputError, InputNotFoundError
from eoscale.raster.border_noise import BorderNoise
from eoscale.sensors import DEFAULT_SENSOR

RASTER_SUFFIXES = (".tif", ".tiff", ".jp2", ".vrt", ".img")
# files beside the bands that are listed when skipped (previews, thumbnails); other files pass unmentioned
IMAGE_SUFFIXES = RASTER_SUFFIXES + (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class BandFile:
    """Where one band of a scene lives: a file and the 1-based band index in it, and the linear map from the file's
    values to the store's scale (`value * scale + offset`; identity but for products with an offset, as Sentinel-2
    L2A from processing baseline 04.00)."""

    name: str
    path: str
    index: int
    scale: float = 1.0
    offset: float = 0.0
    decode: str = ""  # a float file's values onto the store's scale: "float" or "power_db" (`eoscale.raster.float_bands`)
    static: bool = False  # a layer beside the scene (a DEM's, `eoscale.ingest.static`): says nothing of where it has data
    # another sensor's band warped onto the scene's grid (`eoscale.raster.fused`): its name; "" for the scene's own
    # bands. Such a band says where *its* sensor has data (all of the sensor's bands at nodata: none), not the scene
    sensor: str = ""


@dataclass(frozen=True)
class ClassMask:
    """A classification layer whose `classes` make a pixel nodata (Sentinel-2's SCL), or whose set `bits` do (Landsat's
    QA_PIXEL), resampled by nearest neighbour."""

    name: str
    path: str
    classes: tuple[int, ...]
    index: int = 1
    bits: int = 0

    def masked(self, values: np.ndarray) -> np.ndarray:
        if self.bits:
            return (values & self.bits) != 0
        return np.isin(values, self.classes)


@dataclass(frozen=True)
class Scene:
    """One scene: its bands (in the order the store will hold them), its reference grid, and its acquisition date
    where the product's metadata states one (never a file's modification time)."""

    id: str
    bands: tuple[BandFile, ...]
    crs: CRS
    transform: Affine
    width: int
    height: int
    nodata: float
    paths: tuple[str, ...] = field(default=())
    sensor: str = DEFAULT_SENSOR
    platform: str | None = None
    radiometry: dict | None = None  # what was done to land on the store's scale (a SAFE's baseline and offsets)
    class_mask: ClassMask | None = None
    band_map: tuple[tuple[str, str], ...] = ()  # (the file's band, the name it was given) under --band-map
    skipped: tuple[str, ...] = ()  # files beside the bands that hold no band
    # its UTC day: SAFE PRODUCT_START_TIME, Landsat DATE_ACQUIRED, STAC datetime, a GeoTIFF's ACQUISITIONDATETIME
    date: dt.date | None = None
    acquisition: dict | None = None  # how it was seen, where the product says (a SAR scene's orbit direction, …)
    border_noise: BorderNoise | None = None  # a SAR swath's edge strip, masked (`eoscale.raster.border_noise`)
    # the other sensors' scenes warped onto this one's grid (`eoscale.raster.fused`): per sensor, which scene, its
    # date, how many days from this one's, its orbit direction, the share of this scene it covers
    fused: tuple[dict, ...] = ()

    @property
    def band_names(self) -> list[str]:
        return [b.name for b in self.bands]

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(left, bottom, right, top) in the scene's CRS."""
        return array_bounds(self.height, self.width, self.transform)

    def to_attrs(self) -> dict:
        return {
            "id": self.id,
            "paths": list(self.paths),
            "crs": self.crs.to_wkt(),
            "epsg": self.crs.to_epsg() or 0,
            "width": self.width,
            "height": self.height,
            "transform": list(self.transform)[:6],
            "nodata": self.nodata,
            "sensor": self.sensor,
            "platform": self.platform,
            **({"radiometry": self.radiometry} if self.radiometry else {}),
            **({"mask": {"layer": self.class_mask.name, "path": self.class_mask.path,
                         "nodata_classes": list(self.class_mask.classes),
                         **({"nodata_bits": self.class_mask.bits} if self.class_mask.bits else {})}}
               if self.class_mask else {}),
            **({"band_map": dict(self.band_map)} if self.band_map else {}),
            **({"acquisition": self.acquisition} if self.acquisition else {}),
            **({"border_noise": self.border_noise.to_attrs()} if self.border_noise else {}),
            **({"fused": [dict(f) for f in self.fused]} if self.fused else {}),
        }


def expand_paths(patterns: list[str], *, what: str) -> list[str]:
    """Paths named by `patterns` (paths or glob patterns), in the given order, globs sorted."""
    paths: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise InputNotFoundError(f"{what} pattern {pattern!r} matches no file")
            paths.extend(matches)
        elif not os.path.exists(pattern):
            raise InputNotFoundError(f"{what} {pattern!r} does not exist")
        else:
            paths.append(pattern)
    return paths


def open_raster(path: str) -> rasterio.io.DatasetReader:
    """Open a raster, turning GDAL's failures into one-line user errors."""
    try:
        return rasterio.open(path)
    except RasterioIOError as err:
        raise InputError(f"{path!r} is not a readable raster ({_first_line(err)})") from None


def check_crs(path: str, crs: CRS | None) -> CRS:
    if crs is None:
        raise InputError(
            f"{path!r} has no CRS: give it its CRS (e.g. 'gdal_edit.py -a_srs EPSG:<code> {path}') "
            "and run the command again"
        )
    return crs


SUPPORTED_DTYPES = ("uint8", "uint16")


def check_dtype(path: str, dtypes: tuple[str, ...]) -> None:
    """Stores hold uint16 scaled reflectance (as Sentinel-2 and Landsat products ship it)."""
    bad = sorted(set(dtypes) - set(SUPPORTED_DTYPES))
    if bad:
        raise InputError(
            f"{path!r} holds {', '.join(bad)} pixels: eoscale stores uint16 scaled reflectance; "
            f"convert it first (e.g. 'gdal_translate -ot UInt16 -scale 0 1 0 10000')"
        )


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def nodata_of(src: rasterio.io.DatasetReader) -> float:
    """The file's nodata value; 0 when it declares none (Sentinel-2's convention: its JPEG 2000 bands declare
    none, and 0 is NO_DATA in the product)."""
    return float(src.nodata) if src.nodata is not None else 0.0


def utc_date(when: dt.datetime | None) -> dt.date | None:
    """The UTC day of a time stamp (one without an offset is taken as UTC); None for none."""
    if when is None:
        return None
    return (when.astimezone(dt.UTC) if when.tzinfo is not None else when).date()


def parse_date(text: str | None) -> dt.date | None:
    """The UTC date of a metadata time stamp: ISO 8601 with or without its time and UTC offset
    (`2024-06-10T23:30:00-02:00` is 2024-06-11, `2024-06-12T10:30:31.024Z`, `2024-06-12`), or TIFF's
    `2024:06:12 10:30:31`; None for none or one that is not a date."""
    text = (text or "").strip().strip('"')
    if text[4:5] == ":" and text[7:8] == ":":  # TIFF's DateTime: YYYY:MM:DD HH:MM:SS
        text = text[:10].replace(":", "-") + text[10:]
    if len(text) == 11 and text[-1] in "zZ":  # a day in UTC: 2024-06-12Z
        text = text[:10]
    try:
        return utc_date(dt.datetime.fromisoformat(text))
    except ValueError:
        return None


def tiff_date(src: rasterio.io.DatasetReader) -> dt.date | None:
    """A raster's acquisition date from its tags: GDAL's ACQUISITIONDATETIME (IMAGERY domain, else the default one);
    None without it. Neither a file's modification time nor its TIFFTAG_DATETIME (when the file was written) is an
    acquisition date: no date is better than a wrong one."""
    try:
        imagery, default = src.tags(ns="IMAGERY"), src.tags()
    except Exception:  # noqa: BLE001 - a driver without tag domains: no date
        return None
    for text in (imagery.get("ACQUISITIONDATETIME"), default.get("ACQUISITIONDATETIME")):
        date = parse_date(text)
        if date is not None:
            return date
    return None
