"""Labelling a sample from a reference raster: each point's `reference` column filled with the raster's class code
under it (its own CRS and resolution; the pixel the point falls in, no resampling).

This is how an active-learning loop on synthetic or already-mapped ground gets its labels without a person: the
points `eoscale sample` chose (by uncertainty, or the stratified ones) are looked up in a reference map (a
synthetic truth, a national map, an earlier campaign's raster). Both files of the sample (`<prefix>.csv` and
`<prefix>.gpkg`) are filled when both are there, each written under a hidden name and renamed into place.
Points on the raster's nodata or outside it are left empty, and said: `eoscale assess` refuses a sample with
empty references, so they are labelled by hand or their rows deleted (`drop`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window

from eoscale.errors import InputError, InputNotFoundError
from eoscale.maps.publish import partial
from eoscale.maps.reference import _points_xy, _read_points
from eoscale.maps.reference_raster import open_reference_raster
from eoscale.maps.samplefile import LAYER, REFERENCE, design_of, read_design

SUFFIXES = (".csv", ".gpkg")


@dataclass(frozen=True)
class Labelled:
    """What labelling did: the files written, points labelled, and points left empty."""

    files: list[Path]
    labelled: int
    empty: int


def sample_files(path: Path) -> list[Path]:
    """The given sample file first, then its sibling of the other format if it is there."""
    if path.suffix.lower() not in SUFFIXES:
        raise InputError(f"sample {str(path)!r}: expected the .csv or .gpkg 'eoscale sample' wrote")
    if not path.is_file():
        raise InputNotFoundError(f"sample {str(path)!r} does not exist")
    others = [path.with_suffix(s) for s in SUFFIXES if s != path.suffix.lower()]
    return [path] + [p for p in others if p.is_file()]


def reference_codes(reference: Path, x: np.ndarray, y: np.ndarray, crs: str) -> np.ndarray:
    """The raster's value under each point (x, y in `crs`); -1 on its nodata or outside it."""
    from pyproj import Transformer

    if not reference.is_file():
        raise InputNotFoundError(f"reference raster {str(reference)!r} does not exist")
    with open_reference_raster(reference, holds="classes") as src:
        rx, ry = Transformer.from_crs(crs, src.crs.to_wkt(), always_xy=True).transform(x, y)
        rows, cols = rasterio.transform.rowcol(src.transform, np.asarray(rx), np.asarray(ry))
        rows, cols = np.asarray(rows), np.asarray(cols)
        codes = np.full(len(rows), -1, dtype=np.int64)
        for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
            if 0 <= r < src.height and 0 <= c < src.width:
                value = src.read(1, window=Window(c, r, 1, 1), masked=True)[0, 0]
                if value is not np.ma.masked and np.isfinite(value):
                    codes[i] = int(value)
    return codes


def label_sample(path: str | Path, reference: str | Path, *, overwrite: bool = False, drop: bool = False) -> Labelled:
    """Fill the `reference` column of the sample at `path` (and its sibling file) from the raster `reference`;
    with `drop`, the points it cannot label are removed (a labeller's non-response: few, at the raster's edges)."""
    path, reference = Path(path), Path(reference)
    files = sample_files(path)
    design_path = design_of(path)
    record = read_design(design_path) if design_path.is_file() else None
    classes = [c["code"] for c in record["classes"]] if record else None
    written = []
    labelled = empty = 0
    tables = []
    for file in files:  # every check before anything is written
        table, xy_crs = _read_points(file, record)
        if REFERENCE in table.columns and not overwrite:
            filled = [v for v in table[REFERENCE] if v is not None and str(v).strip() not in ("", "nan", "None")]
            if filled:
                raise InputError(f"{len(filled)} points of {str(file)!r} are labelled already: pass --overwrite to "
                                 "replace their reference values")
        x, y = _points_xy(file, table, xy_crs)
        codes = reference_codes(reference, x, y, xy_crs)
        unknown = sorted(set(codes[codes >= 0].tolist()) - set(classes)) if classes else []
        if unknown:
            raise InputError(f"reference raster {str(reference)!r} holds codes {unknown[:8]} under the points, not in "
                             f"the sample's class table {classes}: recode them, or set them as the raster's nodata")
        tables.append((file, table, codes))
    for file, table, codes in tables:
        labelled, empty = int((codes >= 0).sum()), int((codes < 0).sum())
        if drop:
            labelled_rows = codes >= 0
            table, codes = table[labelled_rows].reset_index(drop=True), codes[labelled_rows]
        table[REFERENCE] = [str(c) if c >= 0 else "" for c in codes.tolist()]
        target = partial(file)
        try:
            if file.suffix.lower() == ".csv":
                table.to_csv(target, index=False)
            else:
                target.unlink(missing_ok=True)
                table[REFERENCE] = [int(c) if c >= 0 else None for c in codes.tolist()]
                table.to_file(target, driver="GPKG", layer=LAYER)
            os.replace(target, file)
        finally:
            target.unlink(missing_ok=True)
        written.append(file)
    return Labelled(written, labelled, empty)
