"""A sample's labelling points as a sparse label raster on the map's grid: the training labels of the next round.

    eoscale label round0/sample.csv --reference truth.tif --training-raster round0/labels.tif --radius 1
    eoscale ingest --scenes scene.tif --labels round0/labels.tif --classes classes.csv --output round1.zarr

Only the points of the set `labelling` (chosen by uncertainty) are written; the `assessment` points (the probability
sample) never are: once a model has trained on them they no longer estimate its accuracy. Each labelled point gives
its pixel its `reference` code, and with `radius` R every pixel within R pixels of it (a disc: the patch a labeller
sees as one class around the point; where two discs meet, the more uncertain point's wins, and a point's own pixel
always keeps its own code). **No assessment point's pixel is ever labelled**: a disc (or a labelling point drawn on
the same pixel) that reaches one leaves that pixel nodata, so the next map is never assessed on a pixel it trained on
(its neighbours still may be: spatial autocorrelation, which a radius of 0 keeps to the labelling pixels alone).
Every other pixel is nodata, which `eoscale ingest --labels` stores as the ignore index,
so the loss sees only the labelled pixels. The grid (CRS, transform, size) is the map's, from the sample's design.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine

from eoscale.errors import InputError, InputNotFoundError, OutputExistsError
from eoscale.maps.publish import partial
from eoscale.maps.reference import _points_xy, _read_points
from eoscale.maps.samplefile import LABELLING, REFERENCE, SET, design_of, read_design


@dataclass(frozen=True)
class TrainingRaster:
    """What was written: the raster, its labelled points and pixels, labelling points left out (no reference), and
    the pixels left nodata because an assessment point lies on them."""

    path: Path
    points: int
    pixels: int
    unlabelled: int
    withheld: int = 0


def check_output(out: Path, *, overwrite: bool) -> None:
    """Refuse to replace an existing training raster without `overwrite`, or to write one that is not a GeoTIFF."""
    if out.suffix.lower() not in (".tif", ".tiff"):
        raise InputError(f"training raster {str(out)!r}: give a .tif path (it is written as a GeoTIFF)")
    if out.exists() and not overwrite:
        raise OutputExistsError(f"{str(out)!r} exists: pass --overwrite to replace it, or another --training-raster")


def check_sample(sample: Path) -> None:
    """Refuse a sample without labelling points (a stratified one) before anything is labelled or written."""
    if not sample.is_file():
        raise InputNotFoundError(f"sample {str(sample)!r} does not exist")
    design_path = design_of(sample)
    record = read_design(design_path) if design_path.is_file() else None
    table, _ = _read_points(sample, record)
    if SET not in table.columns or not (table[SET] == LABELLING).any():
        raise InputError(f"sample {str(sample)!r} holds no labelling points (column set=labelling): draw them with "
                         "'eoscale sample --by uncertainty|mixed'; a probability sample is never training data")


def labelling_points(sample: Path) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, int]:
    """The design of `sample`, and the map pixel (rows, cols) and code of each labelled labelling point, most
    uncertain first; the count of labelling points without a reference. Refusals in one line."""
    record, table, xy_crs = _labelled_sample(sample)
    table = table[table[SET] == LABELLING].reset_index(drop=True)
    return _labelling(sample, record, table, xy_crs)


def assessment_pixels(sample: Path) -> tuple[np.ndarray, np.ndarray]:
    """The map pixel (rows, cols) of every point of `sample` that is not a labelling point: the probability sample
    the maps are assessed on, which training labels must never cover."""
    record, table, xy_crs = _labelled_sample(sample)
    table = table[table[SET] != LABELLING].reset_index(drop=True)
    if not len(table):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    grid = record["map"]
    rows, cols = _rowcol(sample, record, table, xy_crs)
    on = (rows >= 0) & (rows < grid["height"]) & (cols >= 0) & (cols < grid["width"])
    return rows[on], cols[on]


def _labelled_sample(sample: Path):
    """The design record, the whole table and the CRS of its coordinates; refusals in one line."""
    design_path = design_of(sample)
    if not design_path.is_file():
        raise InputNotFoundError(f"no design file {str(design_path)!r} beside {str(sample)!r}: the training raster is "
                                 "written on the grid of the map the sample was drawn from, which the design records")
    record = read_design(design_path)
    check_sample(sample)
    table, xy_crs = _read_points(sample, record)
    return record, table, xy_crs


def _labelling(sample: Path, record: dict, table, xy_crs: str):
    raw = [str(v).strip() if v is not None else "" for v in table.get(REFERENCE, [""] * len(table))]
    filled = np.array([v not in ("", "nan", "None", "<NA>") for v in raw])
    if not filled.any():
        raise InputError(f"no labelling point of {str(sample)!r} has a reference code: label them first "
                         "('eoscale label SAMPLE --reference RASTER', or by hand)")
    try:
        codes = np.array([int(float(v)) for v, f in zip(raw, filled, strict=True) if f], dtype=np.int64)
    except ValueError:
        raise InputError(f"sample {str(sample)!r}: the reference column of its labelling points must hold class "
                         "codes (integers)") from None
    known = {int(c["code"]) for c in record["classes"]}
    unknown = sorted(set(codes.tolist()) - known)
    if unknown:
        raise InputError(f"sample {str(sample)!r}: reference codes {unknown[:8]} are not in its class table "
                         f"{sorted(known)}: recode them")
    rows, cols = _pixels(sample, record, table[filled].reset_index(drop=True), xy_crs)
    return record, rows, cols, codes, int((~filled).sum())


def _rowcol(sample: Path, record: dict, table, xy_crs: str) -> tuple[np.ndarray, np.ndarray]:
    """Each point's pixel (row, col) on the map's grid, off it or not."""
    from pyproj import Transformer

    grid = record["map"]
    x, y = _points_xy(sample, table, xy_crs)
    mx, my = Transformer.from_crs(xy_crs, grid["crs"], always_xy=True).transform(x, y)
    rows, cols = rasterio.transform.rowcol(Affine(*grid["transform"]), np.asarray(mx), np.asarray(my))
    return np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)


def _pixels(sample: Path, record: dict, table, xy_crs: str) -> tuple[np.ndarray, np.ndarray]:
    """Each point's pixel on the map's grid; points off it refused."""
    grid = record["map"]
    rows, cols = _rowcol(sample, record, table, xy_crs)
    off = (rows < 0) | (rows >= grid["height"]) | (cols < 0) | (cols >= grid["width"])
    if off.any():
        raise InputError(f"{int(off.sum())} labelling points of {str(sample)!r} fall outside the map's grid: remove "
                         "them, or give the sample drawn from this map")
    return rows, cols


def disc(radius: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column offsets of the pixels within `radius` pixels of a centre (the centre alone at 0)."""
    dy, dx = np.mgrid[-radius:radius + 1, -radius:radius + 1]
    inside = dy * dy + dx * dx <= radius * radius
    return dy[inside], dx[inside]


def label_dtype(codes: np.ndarray) -> tuple[str, int]:
    """The smallest unsigned type that holds the codes and a nodata value above them."""
    top = int(codes.max()) if codes.size else 0
    if top < 255:
        return "uint8", 255
    if top < 65535:
        return "uint16", 65535
    return "int32", -1


def write_training_raster(sample: str | Path, out: str | Path, *, radius: int = 0,
                          overwrite: bool = False) -> TrainingRaster:
    """Write the labelled labelling points of `sample` (its .csv or .gpkg, with the design beside it) to the
    GeoTIFF `out`: their codes in discs of `radius` pixels, nodata elsewhere, on the map's grid."""
    sample, out = Path(sample), Path(out)
    if radius < 0:
        raise InputError(f"--radius {radius}: give 0 (the point's pixel only) or more pixels")
    check_output(out, overwrite=overwrite)
    record, rows, cols, codes, unlabelled = labelling_points(sample)
    grid = record["map"]
    height, width = int(grid["height"]), int(grid["width"])
    all_codes = np.array([int(c["code"]) for c in record["classes"]], dtype=np.int64)
    dtype, nodata = label_dtype(all_codes)
    labels = np.full((height, width), nodata, dtype=dtype)
    dy, dx = disc(radius)
    for r, c, code in zip(rows[::-1], cols[::-1], codes[::-1], strict=True):  # the most uncertain (first) painted last
        rr, cc = r + dy, c + dx
        on = (rr >= 0) & (rr < height) & (cc >= 0) & (cc < width)
        labels[rr[on], cc[on]] = code
    labels[rows, cols] = codes  # a point's own pixel keeps its own label, whatever disc covers it
    # ... unless an assessment point lies on it: a pixel the next map is assessed on is never a training label
    held_rows, held_cols = assessment_pixels(sample)
    withheld = int((labels[held_rows, held_cols] != nodata).sum()) if held_rows.size else 0
    labels[held_rows, held_cols] = nodata
    profile = {"driver": "GTiff", "width": width, "height": height, "count": 1, "dtype": dtype, "nodata": nodata,
               "crs": grid["crs"], "transform": Affine(*grid["transform"]), "compress": "deflate", "tiled": True,
               "blockxsize": 256, "blockysize": 256}
    if width < 256 or height < 256:
        profile.update(tiled=False, blockxsize=None, blockysize=None)
        profile = {k: v for k, v in profile.items() if v is not None}
    out.parent.mkdir(parents=True, exist_ok=True)
    target = partial(out)
    try:
        with rasterio.open(target, "w", **profile) as dst:
            dst.write(labels, 1)
        os.replace(target, out)
    finally:
        target.unlink(missing_ok=True)
    return TrainingRaster(out, len(codes), int((labels != nodata).sum()), unlabelled, withheld)
