"""Cosine maps of embedding fields: how like a set of examples each pixel is, and how much each pixel changed between
two fields of one place.

    similarity("scene_embedding.tif", "forest_similarity.tif", points="forest.gpkg")
    field_change("2018_embedding.tif", "2024_embedding.tif", "change_distance.tif")

`similarity` writes the cosine of each pixel's vector with the mean of the examples' vectors (the examples: points or
polygons, `eoscale.maps.points`, optionally those of one code in a column), float32 in [−1, 1]; `field_change` writes
1 − the cosine of the two fields' vectors at each pixel, float32 in [0, 2] (0: the same direction; the Satellite
Embedding's change "as a dot product"). Both NaN where a field has no vector, COGs with average overviews, written
strip by strip under a `.partial` name and renamed at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import rasterio

from eoscale.errors import InputError, OutputExistsError
from eoscale.maps.field import Field, check_same_grid, open_field
from eoscale.maps.points import field_pixels
from eoscale.maps.publish import partial, published

NODATA = float("nan")


def example_vector(field: Field, points: str | Path, *, column: str | None = None, code: int | None = None) -> tuple[np.ndarray, int]:
    """The unit mean of the vectors at the examples of `points` (those whose `column` is `code`, if given); how many."""
    rows, cols, codes = field_pixels(points, field, column=column if code is not None else None)
    if code is not None:
        keep = codes == code
        if not keep.any():
            raise InputError(f"no place of {str(points)!r} has {column} = {code}: give a code it holds")
        rows, cols = rows[keep], cols[keep]
    vectors, valid = field.at(rows, cols)
    if not valid.any():
        raise InputError(f"every example of {str(points)!r} falls where field {str(field.path)!r} has no vector")
    mean = vectors[valid].mean(axis=0)
    return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32), int(valid.sum())


def similarity(field_path: str | Path, output: str | Path, *, points: str | Path, column: str | None = None,
               code: int | None = None, overwrite: bool = False) -> dict:
    """The similarity map of `field_path` to the examples of `points` into the COG `output`; returns its record."""
    field = open_field(field_path)
    output = _check(output, overwrite)
    example, count = example_vector(field, points, column=column, code=code)
    record = {"field": str(field.path), "examples": str(points), "examples_used": count,
              **({"column": column, "code": code} if code is not None else {})}

    def cosine() -> Iterator[tuple[rasterio.windows.Window, np.ndarray]]:
        for window, vectors, valid in field.strips():
            yield window, np.where(valid, vectors @ example, np.nan).astype(np.float32)

    _write(field, cosine, output, tags={"EOSCALE_SIMILARITY": json.dumps(record)},
           description="cosine similarity to the examples' mean vector")
    return record


def field_change(a_path: str | Path, b_path: str | Path, output: str | Path, *, overwrite: bool = False) -> dict:
    """1 − cosine between two fields of one grid into the COG `output`; returns the mean and share over 0.5."""
    a, b = open_field(a_path), open_field(b_path)
    check_same_grid(a, b)
    output = _check(output, overwrite)
    totals = {"pixels": 0, "sum": 0.0, "over_0.5": 0}

    def distance() -> Iterator[tuple[rasterio.windows.Window, np.ndarray]]:
        for (window, va, ok_a), (_, vb, ok_b) in zip(a.strips(), b.strips(), strict=True):
            valid = ok_a & ok_b
            d = np.where(valid, 1.0 - np.einsum("ijk,ijk->ij", np.nan_to_num(va), np.nan_to_num(vb)), np.nan)
            totals["pixels"] += int(valid.sum())
            totals["sum"] += float(np.nansum(d))
            totals["over_0.5"] += int((d[valid] > 0.5).sum())
            yield window, d.astype(np.float32)

    record = {"field_a": str(a.path), "field_b": str(b.path)}
    _write(a, distance, output, tags={"EOSCALE_FIELD_CHANGE": json.dumps(record)},
           description="1 - cosine between the fields' vectors")
    n = max(totals["pixels"], 1)
    return {**record, "valid_pixels": totals["pixels"], "mean_distance": totals["sum"] / n,
            "share_over_0.5": totals["over_0.5"] / n}


def _check(output: str | Path, overwrite: bool) -> Path:
    output = Path(output)
    if output.exists() and not overwrite:
        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    return output


def _write(field: Field, strips: Callable[[], Iterator[tuple[rasterio.windows.Window, np.ndarray]]], output: Path, *,
           tags: dict, description: str) -> None:
    from eoscale.maps.mosaic import BLOCKSIZE, to_cog

    staging = partial(output).with_name(partial(output).name + ".tiled.tif")
    profile = dict(driver="GTiff", width=field.width, height=field.height, count=1, dtype="float32", nodata=NODATA,
                   crs=field.crs, transform=field.transform, tiled=True, blockxsize=BLOCKSIZE, blockysize=BLOCKSIZE,
                   BIGTIFF="IF_SAFER")
    try:
        with published([output]):
            with rasterio.open(staging, "w", **profile) as out:
                for window, values in strips():
                    out.write(values, 1, window=window)
                out.update_tags(**tags, OVERVIEW_RESAMPLING="AVERAGE")
                out.set_band_description(1, description)
            to_cog(staging, partial(output), "AVERAGE")
    finally:
        staging.unlink(missing_ok=True)
