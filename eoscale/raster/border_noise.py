"""Border noise of SAR swaths: the strip of near-zero backscatter that Sentinel-1 GRD products carry along the swath
edge, beside the nodata fill (a residue of the range compression and of thermal-noise removal; ESA's IPF 2.90 of 2018
reduced it, older products and some RTC pipelines keep it). It is no signal: it reads as a darker-than-water strip and
would teach a model that a scene's edge is water.

`BorderNoise` says which pixels are noise: every band at or below `floor` (store units) and within `margin_px` pixels
of a pixel without data. The rule needs the pixels around a window, so the reader reads it with a halo of `margin_px`
(`halo`): the answer for a pixel is the same whatever window it is read in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage


@dataclass(frozen=True)
class BorderNoise:
    """Pixels at or below `floor` in every band (store units; `floor_db` in decibels, for the record) within
    `margin_px` pixels of nodata are border noise."""

    floor: int
    margin_px: int
    floor_db: float

    def halo(self, row_off: int, col_off: int, height: int, width: int, scene_shape: tuple[int, int]
             ) -> tuple[int, int, int, int, tuple[slice, slice]]:
        """The window grown by the margin and clipped to the scene (row_off, col_off, height, width), and the slices
        of the original window in it."""
        top, left = max(0, row_off - self.margin_px), max(0, col_off - self.margin_px)
        bottom = min(scene_shape[0], row_off + height + self.margin_px)
        right = min(scene_shape[1], col_off + width + self.margin_px)
        inner = (slice(row_off - top, row_off - top + height), slice(col_off - left, col_off - left + width))
        return top, left, bottom - top, right - left, inner

    def masked(self, pixels: np.ndarray, nodata: float) -> np.ndarray:
        """Where the (band, y, x) store `pixels` are border noise, shape (y, x)."""
        empty = np.all(pixels == nodata, axis=0)
        if not empty.any():
            return np.zeros(empty.shape, bool)
        low = np.all(pixels <= self.floor, axis=0) & ~empty
        if not low.any():
            return low
        near = ndimage.distance_transform_edt(~empty) <= self.margin_px
        return low & near

    def to_attrs(self) -> dict:
        return {"floor_db": self.floor_db, "margin_px": self.margin_px}
