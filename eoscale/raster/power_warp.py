"""Decibel files resampled in linear power.

Resampling averages values, and an average of decibels is the decibels of the geometric mean of the power, which over
speckle sits below the decibels of the mean power (by 2.5 dB for single-look speckle, whose power is exponentially
distributed; by about 0.8 dB over the multi-looked speckle of eoscale's tests). Backscatter is therefore resampled in
linear power whatever the scale its file holds: a linear file through the `WarpedVRT` every other file goes through,
a file in decibels (`BandFile.decode == "db"`) through a `PowerWarp`, which reads the file on its own grid around each
window (its mask and nodata as NaN), takes it to linear power (10^(dB/10)) and warps that onto the scene's grid with
GDAL's warper (`rasterio.warp.reproject`, the kernels of the `WarpedVRT`). The reader then takes the power to decibels
on the store's scale (`eoscale.raster.float_bands`, `"power_db"`), as it does a linear file's.
"""

from __future__ import annotations

import math

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.warp import reproject, transform_bounds
from rasterio.windows import Window, bounds, from_bounds
from rasterio.windows import transform as window_transform

from eoscale.sensors.sentinel1 import db_to_power

# the source pixels read around a window's footprint, in units of the ratio of the two grids' pixel sizes: GDAL's
# warper widens its kernels by that ratio where it reduces, and lanczos (the widest) reaches 3 pixels
KERNEL_REACH = 3


class PowerWarp:
    """The bands of a decibel file as linear power on another grid (`crs`, `transform`, `width` × `height`), NaN where
    the file holds no data (its mask, its nodata `src_nodata`, NaN) or does not reach; read a window at a time as a
    `WarpedVRT` is (`read(indexes, window=)`, `nodata`, `close`)."""

    nodata = float("nan")

    def __init__(self, src: rasterio.io.DatasetReader, *, crs: CRS, transform: Affine, width: int, height: int,
                 resampling: Resampling, src_nodata: float) -> None:
        self.src = src
        self.crs, self.transform, self.width, self.height = crs, transform, width, height
        self.resampling = resampling
        self.src_nodata = src_nodata

    def read(self, indexes: int | list[int], window: Window | None = None) -> np.ndarray:
        """Linear power of the bands `indexes` (an index: (y, x); a list: (band, y, x)) over `window` (default: the
        whole grid), float32."""
        window = window or Window(0, 0, self.width, self.height)
        bands = [indexes] if isinstance(indexes, int) else list(indexes)
        out = np.full((len(bands), int(window.height), int(window.width)), np.nan, np.float32)
        source = self._source_window(window)
        if source is not None:
            values = self.src.read(bands, window=source, masked=True)
            db = np.ma.filled(values.astype(np.float32), np.nan)
            db[db == np.float32(self.src_nodata)] = np.nan
            reproject(db_to_power(db), out, src_transform=self.src.window_transform(source), src_crs=self.src.crs,
                      dst_transform=window_transform(window, self.transform), dst_crs=self.crs,
                      resampling=self.resampling, src_nodata=np.nan, dst_nodata=np.nan)
        return out[0] if isinstance(indexes, int) else out

    def _source_window(self, window: Window) -> Window | None:
        """The file's pixels under `window` with the reach of the resampling kernel around them; None where the file
        does not reach the window."""
        footprint = transform_bounds(self.crs, self.src.crs, *bounds(window, self.transform), densify_pts=21)
        found = from_bounds(*footprint, transform=self.src.transform)
        ratio = max(1.0, found.width / max(window.width, 1), found.height / max(window.height, 1))
        pad = math.ceil(KERNEL_REACH * ratio) + 1
        col0 = max(0, math.floor(found.col_off) - pad)
        row0 = max(0, math.floor(found.row_off) - pad)
        col1 = min(self.src.width, math.ceil(found.col_off + found.width) + pad)
        row1 = min(self.src.height, math.ceil(found.row_off + found.height) + pad)
        if col1 <= col0 or row1 <= row0:
            return None
        return Window(col0, row0, col1 - col0, row1 - row0)

    def close(self) -> None:
        """Nothing of its own to close: the file is the reader's."""


__all__ = ["PowerWarp"]
