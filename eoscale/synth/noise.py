"""Spatially correlated random fields: the raw material of shapes (forest blobs, clouds) and textures.

A field is drawn as white noise on a coarse grid, smoothed there and interpolated up, so its cost does not
grow with the correlation length (a Gaussian filter at full resolution with sigma = 40 px would).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage


def smooth_noise(shape: tuple[int, int], scale: float, rng: np.random.Generator) -> np.ndarray:
    """A zero-mean, unit-variance float32 field of `shape` whose blobs are about `scale` pixels across."""
    height, width = shape
    cell = max(1, int(round(scale / 4)))
    coarse = rng.standard_normal((math.ceil(height / cell) + 3, math.ceil(width / cell) + 3)).astype(np.float32)
    coarse = ndimage.gaussian_filter(coarse, sigma=1.0, mode="wrap")
    field = ndimage.zoom(coarse, cell, order=1) if cell > 1 else coarse
    field = field[1 * cell : 1 * cell + height, 1 * cell : 1 * cell + width]
    return _standardise(field)


def fbm(shape: tuple[int, int], scales: tuple[float, ...], rng: np.random.Generator, *, decay: float = 0.5) -> np.ndarray:
    """Fractal noise: `smooth_noise` at each scale (largest first), amplitudes falling by `decay`, standardised."""
    total = np.zeros(shape, np.float32)
    for octave, scale in enumerate(scales):
        total += np.float32(decay**octave) * smooth_noise(shape, scale, rng)
    return _standardise(total)


def quantile_mask(field: np.ndarray, fraction: float) -> np.ndarray:
    """The `fraction` of pixels where `field` is highest (thresholding at a quantile keeps coverage exact)."""
    if fraction <= 0:
        return np.zeros(field.shape, bool)
    if fraction >= 1:
        return np.ones(field.shape, bool)
    return field > np.quantile(field, 1.0 - fraction)


def _standardise(field: np.ndarray) -> np.ndarray:
    field = field - field.mean(dtype=np.float64)
    std = field.std(dtype=np.float64)
    return (field / std if std > 0 else field).astype(np.float32)
