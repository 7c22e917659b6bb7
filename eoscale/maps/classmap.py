"""A land-cover map as `sample` and `assess` read it: its class table, nodata and grid, and its pixels and areas
per class, read strip by strip so that memory does not grow with the map (a 10980 × 10980 scene is read
`STRIP_PIXELS` at a time).

An eoscale map (`eoscale predict`) carries its class table in the `EOSCALE_CLASSES` tag (JSON) and its nodata
in `EOSCALE_NODATA`; any other single-band raster of class codes can be read with a class table given
beside it (`--classes`). Pixel areas follow `eoscale.raster.pixel_area`, the rule `eoscale predict`'s own class
areas use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.windows import Window

from eoscale.catalog.digest import file_sha256
from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.contract import DEFAULT_TARGET, TARGET_TAG
from eoscale.errors import InputError, InputNotFoundError
from eoscale.raster.pixel_area import M2_PER_HECTARE, pixel_area_m2, row_areas_m2

STRIP_PIXELS = 1 << 23  # pixels read at once (8 MiB of a uint8 map; a 10980-wide map is read ~760 rows at a time)


@dataclass(frozen=True)
class ClassMap:
    """What is known about a map file without reading its pixels."""

    path: Path
    table: ClassTable
    nodata: int | None
    crs: CRS
    transform: Affine
    width: int
    height: int

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(left, bottom, right, top) in the map's CRS."""
        return grid_bounds(self.height, self.width, self.transform)

    def lookup(self) -> np.ndarray:
        """`lut[value]` = class index, `IGNORE_INDEX` for nodata and values not in the table."""
        return self.table.lookup_table()

    def strips(self) -> Iterator[Window]:
        """Full-width windows of whole rows, top to bottom, about `STRIP_PIXELS` each."""
        rows = max(1, STRIP_PIXELS // max(self.width, 1))
        for row in range(0, self.height, rows):
            yield Window(0, row, self.width, min(rows, self.height - row))

    def pixel_area_m2(self) -> float | None:
        """One pixel's area in m² in a projected CRS; None in a geographic one (it varies by row)."""
        return pixel_area_m2(self.crs, self.transform)

    def row_areas_m2(self, rows: np.ndarray) -> np.ndarray:
        """The area of one pixel in each of `rows`, in m² (any CRS)."""
        constant = self.pixel_area_m2()
        if constant is not None:
            return np.full(len(rows), constant, dtype=np.float64)
        return row_areas_m2(self.crs, self.transform, rows)


CLASS_TARGETS = ("classes", "change")  # target kinds whose maps hold class codes with a class table


def check_class_map(path: str | Path, tags: dict) -> None:
    """Refuse, in one line, a map of another target kind than classes or change (its `EOSCALE_TARGET` tag, written
    by the output writers of `eoscale.infer.outputs` and by `eoscale change`; a map without the tag holds classes):
    sampling, accuracy and mosaics work on maps of class codes, and a change map's classes are its transitions."""
    target = tags.get(TARGET_TAG) or DEFAULT_TARGET
    if target not in CLASS_TARGETS:
        raise InputError(f"map {str(path)!r} holds {target!r}, not classes: eoscale sample, assess and mosaic work on "
                         "class maps (and change maps)")


def open_map(path: str | Path, *, classes: str | Path | None = None) -> ClassMap:
    """Read a map's class table, nodata and grid. `classes` (a class table file) replaces the map's own tag."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"map {str(path)!r} does not exist")
    try:
        src = rasterio.open(path)
    except rasterio.errors.RasterioIOError as err:
        raise InputError(f"map {str(path)!r} is not a readable raster ({str(err).splitlines()[0]})") from None
    with src:
        if src.count != 1:
            raise InputError(f"map {str(path)!r} has {src.count} bands: a land-cover map has one band of class codes")
        if src.crs is None:
            raise InputError(f"map {str(path)!r} has no CRS: sampling and areas need a georeferenced map")
        tags = src.tags()
        check_class_map(path, tags)
        if classes is not None:
            table = ClassTable.load(classes)
        elif "EOSCALE_CLASSES" in tags:
            try:
                table = ClassTable.from_records(json.loads(tags["EOSCALE_CLASSES"]))
            except (ValueError, KeyError, TypeError) as err:
                raise InputError(f"map {str(path)!r}: its EOSCALE_CLASSES tag is not a class table ({err})") from None
        else:
            raise InputError(f"map {str(path)!r} has no EOSCALE_CLASSES tag: it must be a map written by "
                             "'eoscale predict', or pass --classes CSV (code,name,color) for its codes")
        nodata = tags.get("EOSCALE_NODATA", src.nodata)
        nodata = None if nodata is None else int(float(nodata))
        if src.dtypes[0] not in ("uint8", "uint16", "int16", "int32", "uint32"):
            raise InputError(f"map {str(path)!r} holds {src.dtypes[0]} values: a land-cover map holds integer class codes")
        return ClassMap(path, table, nodata, src.crs, src.transform, src.width, src.height)


def class_index(values: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """Class indices of raw map (or reference) values; `IGNORE_INDEX` for values outside the lookup table."""
    values = np.asarray(values)
    if values.dtype in (np.uint8, np.uint16) and len(lut) > np.iinfo(values.dtype).max:
        return lut[values]  # every value is inside the table: one gather, no temporaries
    inside = (values >= 0) & (values < len(lut))
    index = np.full(values.shape, IGNORE_INDEX, dtype=np.uint8)
    index[inside] = lut[values[inside].astype(np.int64)]
    return index


@dataclass(frozen=True)
class ClassAreas:
    """Pixels and hectares per class (class-table order) of a map's valid pixels."""

    pixels: np.ndarray  # int64 (C,)
    hectares: np.ndarray  # float64 (C,)

    @property
    def weights(self) -> np.ndarray:
        """Each class's share of the mapped area (Olofsson's stratum weights W_i)."""
        total = self.hectares.sum()
        return self.hectares / total if total > 0 else np.zeros_like(self.hectares)


def check_values(cmap: ClassMap, values: np.ndarray, index: np.ndarray) -> None:
    """Refuse a map holding values that are neither nodata nor in its class table."""
    stray = (index == IGNORE_INDEX) & (values != cmap.nodata if cmap.nodata is not None else True)
    if stray.any():
        found = sorted({int(v) for v in np.unique(values[stray])[:10]})
        raise InputError(f"map {str(cmap.path)!r} holds values {found} that are not in its class table "
                         f"(codes {cmap.table.codes}) nor its nodata ({cmap.nodata}): pass --classes with a table "
                         "that has them")


def count_classes(cmap: ClassMap) -> ClassAreas:
    """The map's pixels and hectares per class, strip by strip."""
    classes = len(cmap.table)
    lut = cmap.lookup()
    pixels = np.zeros(classes, dtype=np.int64)
    area_m2 = np.zeros(classes, dtype=np.float64)
    with rasterio.open(cmap.path) as src:
        for window in cmap.strips():
            values = src.read(1, window=window)
            index = class_index(values, lut)
            check_values(cmap, values, index)
            add_areas(cmap, index, int(window.row_off), pixels, area_m2)
    return ClassAreas(pixels, area_m2 / M2_PER_HECTARE)


def add_areas(cmap: ClassMap, index: np.ndarray, row: int, pixels: np.ndarray, area_m2: np.ndarray) -> None:
    """Add a strip's class indices (rows from map row `row`) to the running pixels and areas."""
    classes = len(pixels)
    counts = np.bincount(index.ravel(), minlength=256)[:classes]
    pixels += counts
    constant = cmap.pixel_area_m2()
    if constant is not None:
        area_m2 += counts * constant
        return
    per_row = cmap.row_areas_m2(np.arange(row, row + index.shape[0]))
    for r in range(index.shape[0]):
        area_m2 += per_row[r] * np.bincount(index[r], minlength=256)[:classes]


def file_identity(path: Path) -> dict:
    """The map's sha256, size and modification time: a sample's design names the exact map it was drawn from."""
    stat = path.stat()
    return {"sha256": file_sha256(path), "bytes": stat.st_size, "mtime": stat.st_mtime}


def grid_bounds(height: int, width: int, transform: Affine) -> tuple[float, float, float, float]:
    """(left, bottom, right, top) of a grid, whichever way its transform runs."""
    west, south, east, north = rasterio.transform.array_bounds(height, width, transform)
    return (min(west, east), min(south, north), max(west, east), max(south, north))
