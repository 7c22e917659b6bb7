"""Reference data against a map: the error matrix counts n_ij (map class i, reference class j) and the strata
(the map's classes, their areas) that weigh them.

Two kinds of reference:
- a labelled **sample** (CSV or GeoPackage, as `eoscale sample` writes it, the `reference` column filled with
  class codes). Points may be in any CRS: a GeoPackage says its own; a CSV's `x, y` are in the CRS its design
  file records, else its `lon, lat` are WGS84. Each point's map class is read from the map at the point, so
  the strata are the map's, whatever the file claims (a `stratum` column that disagrees means the sample was
  drawn from another map, and is refused). The strata areas come from the design file when it describes this
  very map (same sha256), else from counting the map. Only a probability sample estimates: of a sample with a
  `set` column (`eoscale sample --by mixed`) only the `assessment` points count, and a sample chosen by uncertainty
  alone (`--by uncertainty`) is refused.
- a reference **raster** (a census: every pixel labelled; any CRS and resolution), warped onto the map's grid by
  nearest neighbour (`rasterio.vrt.WarpedVRT`) and compared strip by strip with the map.

Every problem a user can fix is an `InputError` raised before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.windows import Window

from eoscale.catalog.digest import file_sha256
from eoscale.classes import IGNORE_INDEX
from eoscale.contract import TARGET_TAG
from eoscale.errors import InputError, InputNotFoundError
from eoscale.maps.classmap import (
    M2_PER_HECTARE,
    ClassAreas,
    ClassMap,
    add_areas,
    check_values,
    class_index,
    count_classes,
)
from eoscale.maps.reference_raster import crs_name, open_reference_raster
from eoscale.maps.samplefile import ASSESSMENT, REFERENCE, SET, design_of, read_design

VECTOR_SUFFIXES = (".csv", ".gpkg", ".geojson", ".json", ".fgb", ".shp")
SHOWN = 8  # values named in a message at most


@dataclass(frozen=True)
class Reference:
    """The error matrix of a map against its reference, with the strata that weigh it."""

    kind: str  # "sample" or "census"
    path: Path
    counts: np.ndarray  # int64 (C, C)
    areas: ClassAreas  # the map's pixels and hectares per class (the strata)
    design: Path | None = None  # the sample's design file, where one was used
    coverage: float | None = None  # census: share of the map's valid pixels that have a reference value

    @property
    def census(self) -> bool:
        return self.kind == "census"


def read_reference(cmap: ClassMap, path: str | Path, *, design: str | Path | None = None) -> Reference:
    """The reference at `path`: a labelled sample (by its suffix) or a reference raster."""
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"reference {str(path)!r} does not exist")
    if path.suffix.lower() in VECTOR_SUFFIXES:
        return sample_reference(cmap, path, design=Path(design) if design else None)
    return census_reference(cmap, path)


def _shown(values) -> str:
    values = list(values)
    return ", ".join(map(str, values[:SHOWN])) + (f" … ({len(values)} in all)" if len(values) > SHOWN else "")


def strata_check(cmap: ClassMap, counts: np.ndarray, areas: ClassAreas, what: str) -> None:
    """Every map class with area needs reference units, or its share of the map's area goes unestimated."""
    empty = [c.name for i, c in enumerate(cmap.table.classes) if areas.pixels[i] > 0 and counts[i].sum() == 0]
    if empty:
        raise InputError(f"map classes {empty} have pixels but no {what}: each map class needs reference units "
                         "(eoscale sample --allocation min-per-class K gives each class some)")


# -- a labelled sample -----------------------------------------------------------------------------------------
def sample_reference(cmap: ClassMap, path: Path, *, design: Path | None = None) -> Reference:
    beside = design_of(path)
    design_path = design or (beside if beside.is_file() else None)
    record = read_design(design_path) if design_path else None
    design_areas = _design_areas(cmap, record, design_path) if record else None  # a design of another map: refused first
    if record is not None and record.get("design") == "uncertainty":
        _refuse_labelling(path)
    table, xy_crs = _read_points(path, record)
    table = _probability_points(path, table)
    if REFERENCE not in table.columns:
        raise InputError(f"sample {str(path)!r} has no {REFERENCE!r} column: add one with the reference class code "
                         "of each point (as 'eoscale sample' writes it)")
    reference = _reference_codes(cmap, path, table[REFERENCE])
    x, y = _points_xy(path, table, xy_crs)
    rows, cols = _on_map(cmap, path, x, y, xy_crs)
    lut = cmap.lookup()
    with rasterio.open(cmap.path) as src:
        values = np.array([src.read(1, window=Window(int(c), int(r), 1, 1))[0, 0] for r, c in zip(rows, cols, strict=True)],
                          dtype=np.int64)
    index = class_index(values, lut)
    on_nodata = int((index == IGNORE_INDEX).sum())
    if on_nodata:
        raise InputError(f"{on_nodata} of {len(values)} points of {str(path)!r} fall on the map's nodata or on "
                         "values outside its class table: remove them, or assess the map they were drawn from")
    if "stratum" in table.columns:
        claimed = np.asarray(table["stratum"], dtype=str)
        differ = int(sum(str(v) != str(s).strip() for v, s in zip(values, claimed, strict=True)))
        if differ:
            raise InputError(f"{differ} points of {str(path)!r} lie on pixels whose map class is not their 'stratum': "
                             "the sample was drawn from another map; assess that map, or draw a sample of this one")
    ref_index = lut[reference]
    classes = len(cmap.table)
    counts = np.bincount(index.astype(np.int64) * classes + ref_index, minlength=classes * classes)
    counts = counts.reshape(classes, classes).astype(np.int64)
    areas = design_areas if design_areas is not None else count_classes(cmap)
    strata_check(cmap, counts, areas, "labelled point")
    return Reference("sample", path, counts, areas, design=design_path)


def _refuse_labelling(path: Path) -> None:
    raise InputError(f"sample {str(path)!r} holds points chosen by uncertainty (for labelling), not a probability "
                     "sample: accuracy and areas from them would be biased; assess with a stratified sample "
                     "('eoscale sample --by stratified', or the assessment set of '--by mixed')")


def _probability_points(path: Path, table):
    """The rows of the probability sample: all of a stratified sample, the `assessment` set of a mixed one."""
    if SET not in table.columns:
        return table
    keep = [str(v).strip() == ASSESSMENT for v in table[SET]]
    if not any(keep):
        _refuse_labelling(path)
    return table[keep].reset_index(drop=True)


def _read_points(path: Path, record: dict | None):
    """The sample's table (pandas or geopandas) and the CRS of its coordinates (None: read them from lon/lat)."""
    if path.suffix.lower() == ".csv":
        import pandas as pd

        try:
            table = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (ValueError, OSError) as err:
            raise InputError(f"sample {str(path)!r} is not a readable CSV ({err})") from None
        table.columns = [str(c).strip() for c in table.columns]
        if {"x", "y"} <= set(table.columns) and record is not None:
            return table, record["crs"]
        if {"lon", "lat"} <= set(table.columns):
            return table, "EPSG:4326"
        raise InputError(f"sample {str(path)!r} needs lon, lat columns (WGS84), or x, y columns with its design file "
                         f"{str(design_of(path))!r} beside it (which names their CRS)")
    import geopandas as gpd

    try:
        table = gpd.read_file(path)
    except Exception as err:  # pyogrio's errors for an unreadable or empty file
        raise InputError(f"sample {str(path)!r} is not a readable vector file ({str(err).splitlines()[0]})") from None
    if table.crs is None:
        raise InputError(f"sample {str(path)!r} has no CRS: save its points with one (the map's, or EPSG:4326)")
    if not (table.geometry.geom_type == "Point").all():
        raise InputError(f"sample {str(path)!r} holds geometries other than points: a sample is a set of points")
    return table, table.crs.to_wkt()


def _reference_codes(cmap: ClassMap, path: Path, column) -> np.ndarray:
    """The reference column as class codes; empty, non-integer and unknown values refused, with how many."""
    text = [("" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip()) for v in column]
    empty = sum(1 for t in text if t == "")
    if empty:
        raise InputError(f"{empty} of {len(text)} points of {str(path)!r} have no {REFERENCE!r} value: label every point "
                         "with a class code (or delete the rows not labelled)")
    codes, bad = [], []
    for t in text:
        try:
            number = float(t)
            if not number.is_integer():
                raise ValueError
            codes.append(int(number))
        except ValueError:
            bad.append(t)
    if bad:
        raise InputError(f"{str(path)!r}: {REFERENCE!r} values {_shown(repr(b) for b in sorted(set(bad)))} are not class codes: "
                         f"use the codes of the map's class table {cmap.table.codes}")
    codes = np.asarray(codes, dtype=np.int64)
    unknown = sorted(set(codes.tolist()) - set(cmap.table.codes))
    if unknown:
        raise InputError(f"{str(path)!r}: reference codes {_shown(unknown)} are not in the map's class table "
                         f"{cmap.table.codes}: relabel them with the map's codes")
    return codes


def _points_xy(path: Path, table, xy_crs: str | None) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(table, "geometry") and "geometry" in table.columns:
        return np.asarray(table.geometry.x, dtype=np.float64), np.asarray(table.geometry.y, dtype=np.float64)
    names = ("lon", "lat") if xy_crs == "EPSG:4326" else ("x", "y")
    try:
        return tuple(np.asarray(table[n], dtype=np.float64) for n in names)  # type: ignore[return-value]
    except ValueError:
        raise InputError(f"sample {str(path)!r}: columns {names} must hold numbers") from None


def _on_map(cmap: ClassMap, path: Path, x: np.ndarray, y: np.ndarray, crs: str) -> tuple[np.ndarray, np.ndarray]:
    """The map pixel (row, col) of each point; points off the map refused."""
    from pyproj import Transformer

    mx, my = Transformer.from_crs(crs, cmap.crs.to_wkt(), always_xy=True).transform(x, y)
    mx, my = np.asarray(mx, dtype=np.float64), np.asarray(my, dtype=np.float64)
    finite = np.isfinite(mx) & np.isfinite(my)
    row, col = np.full(len(mx), np.nan), np.full(len(mx), np.nan)
    if finite.any():
        r, c = rasterio.transform.rowcol(cmap.transform, mx[finite], my[finite])
        row[finite], col[finite] = r, c
    inside = np.isfinite(col) & np.isfinite(row) & (col >= 0) & (col < cmap.width) & (row >= 0) & (row < cmap.height)
    if not inside.any():
        raise InputError(f"no point of {str(path)!r} falls on the map {str(cmap.path)!r}: the sample (CRS "
                         f"{crs_name(crs)}) does not overlap the map; check its coordinates and CRS")
    if not inside.all():
        raise InputError(f"{int((~inside).sum())} of {len(inside)} points of {str(path)!r} fall outside the map "
                         f"{str(cmap.path)!r}: remove them, or assess the map they were drawn from")
    return row.astype(np.int64), col.astype(np.int64)


def _design_areas(cmap: ClassMap, record: dict, path: Path) -> ClassAreas:
    """The strata areas a design recorded, if it describes this map (same file, same class codes)."""
    if record["map"].get("sha256") != file_sha256(cmap.path):
        raise InputError(f"design {str(path)!r} describes another map ({record['map'].get('path')}, sha256 differs): "
                         "assess the map the sample was drawn from, or draw a sample of this one")
    codes = [s["code"] for s in record["strata"]]
    if codes != cmap.table.codes:
        raise InputError(f"design {str(path)!r} has classes {codes}, the map {cmap.table.codes}: use the same class table")
    return ClassAreas(np.array([s["pixels"] for s in record["strata"]], dtype=np.int64),
                      np.array([s["area_ha"] for s in record["strata"]], dtype=np.float64))


def check_class_reference(path: str | Path) -> None:
    """Refuse, in one line, a reference raster of continuous values against a class map: a value map's COG
    (`EOSCALE_TARGET=values`) or a float raster holding fractional values (read at a coarse overview)."""
    path = Path(path)
    if path.suffix.lower() in VECTOR_SUFFIXES or not path.is_file():
        return  # a sample's values are checked as class codes where they are read
    try:
        with rasterio.open(path) as src:
            kind = src.tags().get(TARGET_TAG)
            fractional = False
            if kind is None and src.count == 1 and np.issubdtype(np.dtype(src.dtypes[0]), np.floating):
                shape = (max(1, min(src.height, 512)), max(1, min(src.width, 512)))
                values = src.read(1, out_shape=shape, resampling=Resampling.nearest, masked=True).compressed()
                values = values[np.isfinite(values)]
                fractional = bool(values.size) and bool(np.any(values != np.round(values)))
    except rasterio.errors.RasterioIOError:
        return  # not a raster: read_reference says so
    if kind == "values" or fractional:
        raise InputError(f"reference raster {str(path)!r} holds continuous values, not class codes: assess a value "
                         "map (a regression model's 'eoscale predict') against it, or give this class map a raster "
                         "of class codes")


# -- a reference raster (census) -------------------------------------------------------------------------------
def census_reference(cmap: ClassMap, path: Path) -> Reference:
    from rasterio.vrt import WarpedVRT

    with open_reference_raster(path, holds="classes", other_inputs="a sample (.csv, .gpkg)", over=cmap) as src:
        options = dict(crs=cmap.crs, transform=cmap.transform, width=cmap.width, height=cmap.height,
                       resampling=Resampling.nearest)
        options.update(dict(src_nodata=src.nodata, nodata=src.nodata) if src.nodata is not None else dict(add_alpha=True))
        classes = len(cmap.table)
        lut = cmap.lookup()
        counts = np.zeros(classes * classes, dtype=np.int64)
        pixels = np.zeros(classes, dtype=np.int64)
        area_m2 = np.zeros(classes, dtype=np.float64)
        unknown: set[int] = set()
        with WarpedVRT(src, **options) as vrt, rasterio.open(cmap.path) as map_src:
            for window in cmap.strips():
                values = map_src.read(1, window=window)
                index = class_index(values, lut)
                check_values(cmap, values, index)
                add_areas(cmap, index, int(window.row_off), pixels, area_m2)
                ref = vrt.read(1, window=window)
                has_ref = (ref != src.nodata) if src.nodata is not None else vrt.read(2, window=window) > 0
                if np.issubdtype(ref.dtype, np.floating):
                    has_ref &= np.isfinite(ref)
                    ref = np.where(has_ref, ref, 0)
                ref_index = class_index(ref.astype(np.int64), lut)
                stray = has_ref & (ref_index == IGNORE_INDEX)
                if stray.any() and len(unknown) <= SHOWN:
                    unknown.update(int(v) for v in np.unique(ref[stray])[: SHOWN + 1])
                both = has_ref & (index != IGNORE_INDEX) & ~stray
                counts += np.bincount(index[both].astype(np.int64) * classes + ref_index[both],
                                      minlength=classes * classes)
    if unknown:
        raise InputError(f"reference raster {str(path)!r} holds codes {_shown(sorted(unknown))} that are not in the "
                         f"map's class table {cmap.table.codes} (nor its nodata {src.nodata}): recode them to the "
                         "map's codes, or set them as nodata")
    counts = counts.reshape(classes, classes)
    valid = int(pixels.sum())
    if counts.sum() == 0:
        raise InputError(f"reference raster {str(path)!r} has no value where the map {str(cmap.path)!r} has data: "
                         "it does not overlap the map's valid pixels")
    areas = ClassAreas(pixels, area_m2 / M2_PER_HECTARE)
    strata_check(cmap, counts, areas, "reference pixel")
    return Reference("census", path, counts, areas, coverage=float(counts.sum()) / valid)
