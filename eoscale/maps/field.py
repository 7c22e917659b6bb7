"""An embedding field as the map commands read it: an `eoscale embed` field or a downloaded one of the same layout.

    field = open_field("fields/scene_embedding.tif")   # checks the layout, reads no pixel
    for window, vectors, valid in field.strips():      # (rows, columns, D) float32, unit length where valid
        ...
    vectors, valid = field.at(rows, cols)               # (N, D) at pixels

Two layouts (`eoscale.sensors.embedding`): int8 with nodata −128 de-quantised as `(v/127.5)² · sign(v)` (Google's
Satellite Embedding, and `eoscale embed`'s field), and float32 (`eoscale embed --float`, nodata NaN). An int8 field
whose tags record another de-quantisation is refused, not guessed at; one without the tag is read as the Satellite
Embedding is. Vectors are made unit length on read (de-quantised ones are only close to it), so cosine is a dot
product. Memory stays at a strip of `STRIP_PIXELS` pixels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.windows import Window

from eoscale.errors import InputError, InputNotFoundError
from eoscale.sensors.embedding import DEQUANTISATION, DEQUANTISATION_TAG, NODATA, dequantise

STRIP_PIXELS = 1 << 18  # pixels a strip: 64 MiB of float32 vectors of 64 dimensions


@dataclass(frozen=True)
class Field:
    """What is known of a field file without reading its pixels."""

    path: Path
    dimensions: int
    dtype: str  # int8 (quantised) or float32
    crs: CRS
    transform: Affine
    width: int
    height: int
    tags: dict

    def strips(self, rows: int | None = None) -> Iterator[tuple[Window, np.ndarray, np.ndarray]]:
        """(window, vectors (rows, columns, D), valid (rows, columns)) of the whole field, a strip at a time."""
        rows = rows or max(1, STRIP_PIXELS // max(self.width, 1))
        with rasterio.open(self.path) as src:
            for top in range(0, self.height, rows):
                window = Window(0, top, self.width, min(rows, self.height - top))
                yield (window, *self._vectors(src.read(window=window)))

    def at(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The vectors (N, D) at pixels (`rows`, `cols`), and whether each holds one; read in one window around them."""
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        inside = (rows >= 0) & (rows < self.height) & (cols >= 0) & (cols < self.width)
        out = np.full((len(rows), self.dimensions), np.nan, dtype=np.float32)
        valid = np.zeros(len(rows), dtype=bool)
        if inside.any():
            r, c = rows[inside], cols[inside]
            top, left = int(r.min()), int(c.min())
            with rasterio.open(self.path) as src:
                block = src.read(window=Window(left, top, int(c.max()) - left + 1, int(r.max()) - top + 1))
            vectors, ok = self._vectors(block)
            out[inside], valid[inside] = vectors[r - top, c - left], ok[r - top, c - left]
        return out, valid

    def _vectors(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A read block (D, rows, columns) as unit vectors (rows, columns, D) and their validity."""
        if self.dtype == "int8":
            vectors, valid = dequantise(block, axis=0)
        else:
            vectors = block.astype(np.float32)
            valid = np.isfinite(vectors).all(axis=0)
        vectors = np.moveaxis(vectors, 0, -1)
        norm = np.linalg.norm(vectors, axis=-1, keepdims=True)
        valid &= (norm[..., 0] > 0) & np.isfinite(norm[..., 0])
        vectors = np.where(valid[..., None], vectors / np.where(norm > 0, norm, 1), np.nan).astype(np.float32)
        return vectors, valid


def open_field(path: str | Path) -> Field:
    """A field's layout, checked: int8 with nodata −128 (and, if its tags say, the Satellite Embedding's
    de-quantisation) or float32; several bands; georeferenced."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"embedding field {str(path)!r} does not exist: write one with 'eoscale embed'")
    try:
        src = rasterio.open(path)
    except rasterio.errors.RasterioIOError as err:
        raise InputError(f"embedding field {str(path)!r} is not a readable raster ({str(err).splitlines()[0]})") from None
    with src:
        tags, dtype = src.tags(), src.dtypes[0]
        if src.count < 2:
            raise InputError(f"{str(path)!r} has {src.count} band: an embedding field has one band a dimension")
        if src.crs is None:
            raise InputError(f"embedding field {str(path)!r} has no CRS: points and maps need a georeferenced field")
        if dtype == "int8":
            recorded = tags.get(DEQUANTISATION_TAG)
            if recorded is not None and recorded != DEQUANTISATION:
                raise InputError(f"embedding field {str(path)!r} records the de-quantisation {recorded!r}: eoscale reads "
                                 f"int8 fields de-quantised as {DEQUANTISATION} only")
            if src.nodata is not None and int(src.nodata) != NODATA:
                raise InputError(f"embedding field {str(path)!r} has nodata {src.nodata:g}: an int8 field's is {NODATA}")
        elif dtype not in ("float32", "float64"):
            raise InputError(f"embedding field {str(path)!r} holds {dtype}: give an int8 field (nodata {NODATA}, "
                             f"de-quantised as {DEQUANTISATION}) or a float32 one")
        return Field(path, src.count, "int8" if dtype == "int8" else "float32", src.crs, src.transform, src.width,
                     src.height, tags)


def check_same_grid(a: Field, b: Field) -> None:
    """Refuse two fields (or a field and a raster) that are not on one grid."""
    if (a.crs, a.transform, a.width, a.height) != (b.crs, b.transform, b.width, b.height) or a.dimensions != b.dimensions:
        raise InputError(f"fields {str(a.path)!r} and {str(b.path)!r} are not of one grid and size ({a.width}×{a.height}, "
                         f"{a.dimensions}-d vs {b.width}×{b.height}, {b.dimensions}-d): embed both scenes on one grid")
