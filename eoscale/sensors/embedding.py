"""Embedding fields as a sensor: a raster whose bands are the dimensions of a learned vector a pixel.

Google's Satellite Embedding (AlphaEarth Foundations) is the layout followed: 64 bands named `A00`…`A63`, 10 m,
unit-length vectors stored as int8 with the de-quantisation

    v = (q / 127.5)² · sign(q)        nodata: q = −128

(so small components, the common case in a unit vector of many dimensions, keep more levels than a linear scale would
give them). `eoscale embed` writes its fields in the same layout with as many bands as its backbone's features
(`A00`…`Ann`), so a downloaded Satellite Embedding tile and an eoscale field are read by one reader
(`eoscale.maps.field`). Where a field's tags record another de-quantisation (`EMBEDDING_DEQUANTISATION`), it is refused
rather than guessed.

This module is the ground of the layers: no numpy beyond the arithmetic, nothing of eoscale above it.
"""

from __future__ import annotations

import numpy as np

from eoscale.bands import Band
from eoscale.sensors.registry import SensorSpec

EMBEDDING = "embedding"
NODATA = -128  # the int8 value of a pixel without a vector
SCALE = 127.5
DEQUANTISATION = "(v/127.5)^2*sign(v)"  # recorded in every int8 field eoscale writes (tag EMBEDDING_DEQUANTISATION)
DEQUANTISATION_TAG = "EMBEDDING_DEQUANTISATION"
MAX_DIMENSIONS = 1024  # band names A000… past 100 dimensions; 1024 is more than any backbone eoscale builds


def band_name(index: int, dimensions: int = 64) -> str:
    """The name of dimension `index`: `A00`…`A99` as the Satellite Embedding names them, three digits in a wider field."""
    return f"A{index:02d}" if dimensions <= 100 else f"A{index:03d}"


def band_names(dimensions: int) -> list[str]:
    return [band_name(i, dimensions) for i in range(dimensions)]


def quantise(vectors: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Unit vectors (float, along `axis`) as int8 that `dequantise` maps back: `sign(v)·√|v|·127.5`, rounded, within
    ±127 (−128 is nodata). A vector of non-finite components becomes nodata."""
    v = np.asarray(vectors, dtype=np.float32)
    q = np.rint(np.sign(v) * np.sqrt(np.abs(v)) * SCALE)
    q = np.clip(np.nan_to_num(q, nan=0.0), -127, 127).astype(np.int8)
    bad = ~np.isfinite(v).all(axis=axis, keepdims=True)
    if bad.any():
        q[np.broadcast_to(bad, q.shape)] = NODATA
    return q


def dequantise(values: np.ndarray, *, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The int8 field `values` (dimensions along `axis`) as float32 vectors, and where they hold data (True where no
    dimension is nodata; the vectors there are NaN)."""
    q = np.asarray(values)
    missing = (q == NODATA).any(axis=axis)
    v = np.square(q.astype(np.float32) / SCALE) * np.sign(q).astype(np.float32)
    v[np.broadcast_to(np.expand_dims(missing, axis), v.shape)] = np.nan
    return v, ~missing


_BANDS = tuple(Band(band_name(i), None, None, 10.0, f"embedding dimension {i}") for i in range(64))

SPEC = SensorSpec(
    name=EMBEDDING,
    title="embedding field (Satellite Embedding layout: A00…A63, int8, (v/127.5)²·sign(v), nodata −128)",
    platforms=(("satellite-embedding", _BANDS),),
    default_bands=tuple(b.name for b in _BANDS),
    file_priority=95,
)
