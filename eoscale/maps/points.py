"""Labelled places on a field's grid: the pixels of points (CSV, GeoPackage, GeoJSON, …) or polygons, with a code.

    rows, cols, codes = field_pixels("points.csv", field, column="class")

A CSV gives each point as `lon`, `lat` (WGS84) or, without them, `x`, `y` in the field's CRS (the columns `eoscale
sample` writes; its `reference` column holds the codes a labeller filled in); a vector file (read by geopandas) is put
into the field's CRS, each point taken at its pixel and each polygon as every pixel whose centre it covers. Places off
the field, or without a code in `column`, are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio

from eoscale.errors import InputError, InputNotFoundError
from eoscale.maps.field import Field


def field_pixels(path: str | Path, field: Field, *, column: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Rows, columns and (if `column`) integer codes of the field pixels the places of `path` cover."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"points file {str(path)!r} does not exist")
    if path.suffix.lower() == ".csv":
        rows, cols, values = _csv(path, field, column)
    else:
        rows, cols, values = _vector(path, field, column)
    off = (rows < 0) | (rows >= field.height) | (cols < 0) | (cols >= field.width)
    if off.any():
        raise InputError(f"{int(off.sum())} of the {len(rows)} places of {str(path)!r} fall outside field "
                         f"{str(field.path)!r}: remove them, or give the field of their scene")
    if values is None:
        return rows, cols, None
    return rows, cols, _codes(values, path, column)


def _codes(values: np.ndarray, path: Path, column: str) -> np.ndarray:
    try:
        return np.array([int(float(v)) for v in values], dtype=np.int64)
    except (TypeError, ValueError):
        raise InputError(f"{str(path)!r}: column {column!r} must hold a class code (an integer) in every row") from None


def _csv(path: Path, field: Field, column: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    import pandas as pd

    table = pd.read_csv(path)
    if column is not None and column not in table.columns:
        raise InputError(f"{str(path)!r} has no column {column!r}: its columns are {', '.join(map(str, table.columns))}")
    if {"lon", "lat"} <= set(table.columns):
        from pyproj import Transformer

        x, y = Transformer.from_crs("EPSG:4326", field.crs.to_wkt(), always_xy=True).transform(
            table["lon"].to_numpy(float), table["lat"].to_numpy(float))
    elif {"x", "y"} <= set(table.columns):
        x, y = table["x"].to_numpy(float), table["y"].to_numpy(float)
    else:
        raise InputError(f"{str(path)!r} has neither lon, lat (WGS84) nor x, y (the field's CRS) columns")
    rows, cols = rasterio.transform.rowcol(field.transform, np.asarray(x), np.asarray(y))
    values = None if column is None else table[column].to_numpy()
    return np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64), values


def _vector(path: Path, field: Field, column: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    import geopandas as gpd
    from rasterio.features import geometry_mask

    try:
        frame = gpd.read_file(path)
    except Exception as err:  # pyogrio raises its own errors for unreadable files
        raise InputError(f"points file {str(path)!r} is not readable ({str(err).splitlines()[0]})") from None
    if column is not None and column not in frame.columns:
        raise InputError(f"{str(path)!r} has no column {column!r}: its columns are {', '.join(map(str, frame.columns))}")
    if frame.crs is None:
        raise InputError(f"{str(path)!r} has no CRS: give its places a CRS")
    frame = frame.to_crs(field.crs.to_wkt())
    rows, cols, values = [], [], []
    for i, geometry in enumerate(frame.geometry):
        if geometry is None or geometry.is_empty:
            continue
        if geometry.geom_type == "Point":
            r, c = rasterio.transform.rowcol(field.transform, geometry.x, geometry.y)
            r, c = np.array([r]), np.array([c])
        else:  # a polygon: the pixels whose centres it covers
            inside = geometry_mask([geometry], out_shape=(field.height, field.width), transform=field.transform,
                                   invert=True)
            r, c = np.nonzero(inside)
        rows.append(r)
        cols.append(c)
        if column is not None:
            values.append(np.full(len(r), frame[column].iloc[i], dtype=object))
    if not rows:
        raise InputError(f"{str(path)!r} holds no place")
    return (np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64),
            None if column is None else np.concatenate(values))
