"""A continuous map (tree height, cover fraction) as `assess` reads it, and its reference values beside it.

An eoscale value map (`eoscale predict` with a regression model, `eoscale.infer.outputs.values`) is a float32 COG
tagged `EOSCALE_TARGET=values`, with the target's name and units in `EOSCALE_TARGET_NAME` / `_UNITS` and nodata
-9999. Two kinds of reference:

- **points** (CSV or GeoPackage) with a value column (`value`, else `reference`): a GeoPackage carries its CRS; a
  CSV has `x, y` in the map's CRS (or the CRS given with `--reference-crs`), or `lon, lat` in WGS84. Each point
  takes the map's value at the pixel it falls in; points off the map or on its nodata are refused, as are
  empty or non-numeric values.
- a **raster** of values (any CRS and resolution, one band, float or integer without a colour table): warped
  onto the map's grid (average where its pixels are finer than the map's, bilinear where coarser: the rules
  for a continuous variable) and compared strip by strip wherever both have a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling

from eoscale.contract import DEFAULT_TARGET, TARGET_TAG
from eoscale.errors import InputError, InputNotFoundError
from eoscale.maps.classmap import STRIP_PIXELS, grid_bounds
from eoscale.maps.reference import VECTOR_SUFFIXES, _on_map, _points_xy, _read_points
from eoscale.maps.reference_raster import open_reference_raster

VALUE_COLUMNS = ("value", "reference")
SCATTER_PAIRS = 100_000  # pairs of a raster reference kept (a seeded random subset) for the scatter plot


def map_kind(path: str | Path) -> str:
    """The target kind a map holds (`EOSCALE_TARGET`; a map without the tag holds classes)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"map {str(path)!r} does not exist")
    try:
        with rasterio.open(path) as src:
            return src.tags().get(TARGET_TAG) or DEFAULT_TARGET
    except rasterio.errors.RasterioIOError as err:
        raise InputError(f"map {str(path)!r} is not a readable raster ({str(err).splitlines()[0]})") from None


@dataclass(frozen=True)
class ValueMap:
    """What is known about a value map without reading its pixels."""

    path: Path
    name: str
    units: str | None
    nodata: float | None
    crs: CRS
    transform: Affine
    width: int
    height: int

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return grid_bounds(self.height, self.width, self.transform)

    def valid(self, values: np.ndarray) -> np.ndarray:
        ok = np.isfinite(values)
        return ok & (values != self.nodata) if self.nodata is not None else ok


def open_value_map(path: str | Path) -> ValueMap:
    path = Path(path)
    with rasterio.open(path) as src:
        if src.count != 1:
            raise InputError(f"map {str(path)!r} has {src.count} bands: a value map has one band")
        if src.crs is None:
            raise InputError(f"map {str(path)!r} has no CRS: its reference cannot be placed on it")
        tags = src.tags()
        nodata = tags.get("EOSCALE_NODATA", src.nodata)
        return ValueMap(path, tags.get("EOSCALE_TARGET_NAME") or "value", tags.get("EOSCALE_TARGET_UNITS") or None,
                        None if nodata is None else float(nodata), src.crs, src.transform, src.width, src.height)


@dataclass(frozen=True)
class ValuePairs:
    """Map and reference values where both have one (a raster's: running sums, and a subset for the plot)."""

    kind: str  # "sample" (points) or "census" (a raster)
    path: Path
    predicted: np.ndarray  # the points', or the raster's subset for the scatter plot
    reference: np.ndarray
    sums: dict | None = None  # census: n and the sums the statistics need, over every pair
    coverage: float | None = None  # census: share of the map's valid pixels with a reference value


def read_value_reference(vmap: ValueMap, path: str | Path, *, crs: str | None = None) -> ValuePairs:
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"reference {str(path)!r} does not exist")
    if path.suffix.lower() in VECTOR_SUFFIXES:
        return point_reference(vmap, path, crs=crs)
    return raster_reference(vmap, path)


def point_reference(vmap: ValueMap, path: Path, *, crs: str | None) -> ValuePairs:
    record = {"crs": crs or vmap.crs.to_wkt()} if path.suffix.lower() == ".csv" else None
    table, xy_crs = _read_points(path, record)
    column = next((c for c in VALUE_COLUMNS if c in table.columns), None)
    if column is None:
        raise InputError(f"reference {str(path)!r} has no {' or '.join(map(repr, VALUE_COLUMNS))} column: give each "
                         f"point its measured {vmap.name}")
    text = [("" if v is None else str(v).strip()) for v in table[column]]
    try:
        reference = np.array([float(t) if t else np.nan for t in text], dtype=np.float64)
    except ValueError:
        bad = next(t for t in text if not _is_number(t))
        raise InputError(f"reference {str(path)!r}: {column!r} value {bad!r} is not a number: a value map is "
                         "assessed against measured values") from None
    empty = int(np.isnan(reference).sum())
    if empty:
        raise InputError(f"{empty} of {len(reference)} points of {str(path)!r} have no {column!r} value: measure "
                         "them or delete their rows")
    x, y = _points_xy(path, table, xy_crs)
    rows, cols = _on_map(vmap, path, x, y, xy_crs)  # type: ignore[arg-type]  (needs crs, transform, width, height)
    with rasterio.open(vmap.path) as src:
        predicted = np.array([v[0] for v in src.sample(zip(*rasterio.transform.xy(vmap.transform, rows, cols), strict=True))],
                             dtype=np.float64)
    off = int((~vmap.valid(predicted)).sum())
    if off:
        raise InputError(f"{off} of {len(predicted)} points of {str(path)!r} fall on the map's nodata: remove them, "
                         f"or assess a map that covers them")
    return ValuePairs("sample", path, predicted, reference)


def raster_reference(vmap: ValueMap, path: Path) -> ValuePairs:
    from rasterio.vrt import WarpedVRT
    from rasterio.windows import Window

    others = f"a point file ({', '.join(VECTOR_SUFFIXES)})"
    with open_reference_raster(path, holds="values", other_inputs=others, over=vmap) as src:
        finer = abs(src.transform.a) * abs(src.transform.e) < abs(vmap.transform.a) * abs(vmap.transform.e) * 0.99
        nodata = src.nodata if src.nodata is not None else -9999.0
        options = dict(crs=vmap.crs, transform=vmap.transform, width=vmap.width, height=vmap.height,
                       resampling=Resampling.average if finer else Resampling.bilinear, src_nodata=src.nodata,
                       nodata=nodata, dtype="float64")
        sums = {"n": 0, "error": 0.0, "error2": 0.0, "abs_error": 0.0, "reference": 0.0, "reference2": 0.0}
        kept_p, kept_r = [], []
        valid_map = 0
        rng = np.random.default_rng(0)
        rate = None
        with WarpedVRT(src, **options) as vrt, rasterio.open(vmap.path) as map_src:
            rows = max(1, STRIP_PIXELS // max(vmap.width, 1))
            if rate is None:
                rate = min(1.0, SCATTER_PAIRS / max(vmap.width * vmap.height, 1))
            for row in range(0, vmap.height, rows):
                window = Window(0, row, vmap.width, min(rows, vmap.height - row))
                predicted = map_src.read(1, window=window).astype(np.float64)
                reference = vrt.read(1, window=window)
                has_map = vmap.valid(predicted)
                both = has_map & np.isfinite(reference) & (reference != nodata)
                valid_map += int(has_map.sum())
                p, r = predicted[both], reference[both]
                err = p - r
                sums["n"] += int(p.size)
                sums["error"] += float(err.sum())
                sums["error2"] += float(np.square(err).sum())
                sums["abs_error"] += float(np.abs(err).sum())
                sums["reference"] += float(r.sum())
                sums["reference2"] += float(np.square(r).sum())
                pick = rng.random(p.size) < rate
                kept_p.append(p[pick])
                kept_r.append(r[pick])
    if sums["n"] == 0:
        raise InputError(f"reference raster {str(path)!r} has no value where the map {str(vmap.path)!r} has data: "
                         "it does not overlap the map's valid pixels")
    return ValuePairs("census", path, np.concatenate(kept_p), np.concatenate(kept_r), sums=sums,
                      coverage=sums["n"] / max(valid_map, 1))


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
