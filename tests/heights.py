"""Synthetic tree heights tied to a test scene (`tests.rasters.write_scene`): a continuous target for regression.

The height depends on the class (trees tall, cropland low, grass lower, water none) and on the scene's texture
(its B02 noise, smoothed over 5×5 pixels), so a model that sees a pixel's neighbourhood predicts it better than
one that sees the pixel alone. Written as a float32 raster in another CRS and resolution, nodata -9999.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.transform import array_bounds
from rasterio.warp import calculate_default_transform, reproject

BASE_HEIGHT = np.array([18.0, 0.5, 1.5, 0.0], dtype=np.float32)  # per class index of tests.rasters.CODES
TEXTURE_GAIN = np.array([8.0, 0.3, 1.0, 0.0], dtype=np.float32)
NODATA = -9999.0


def scene_heights(scene: Path) -> np.ndarray:
    """The heights on the scene's own grid (float32, NaN where the scene has no data)."""
    with rasterio.open(scene) as src:
        b02 = src.read(1).astype(np.float32)
    classes = np.clip(b02 // 900 - 1, 0, 3).astype(np.int64)
    noise = (b02 - 900 * (classes + 1)) / 400.0  # 0..1
    pad = np.pad(noise, 2, mode="edge")
    smooth = sum(pad[i : i + noise.shape[0], j : j + noise.shape[1]] for i in range(5) for j in range(5)) / 25.0
    heights = BASE_HEIGHT[classes] + TEXTURE_GAIN[classes] * (smooth - 0.5) * 4
    heights[b02 == 0] = np.nan
    return heights.astype(np.float32)


def write_heights(path: Path, scene: Path, *, crs: str = "EPSG:3035", resolution: float = 20.0,
                  colours: bool = False) -> np.ndarray:
    """The scene's heights reprojected to `crs` at `resolution` (bilinear), nodata -9999; returns them on the
    scene's grid. `colours` adds a colour table (a raster ingest must refuse as targets)."""
    heights = scene_heights(scene)
    with rasterio.open(scene) as src:
        transform, w, h = calculate_default_transform(
            src.crs, crs, src.width, src.height, *array_bounds(src.height, src.width, src.transform), resolution=resolution)
        out = np.full((h, w), NODATA, dtype=np.float32)
        reproject(np.nan_to_num(heights, nan=NODATA), out, src_transform=src.transform, src_crs=src.crs,
                  dst_transform=transform, dst_crs=crs, resampling=Resampling.average, src_nodata=NODATA,
                  dst_nodata=NODATA)
    dtype = "uint8" if colours else "float32"
    with rasterio.open(path, "w", driver="GTiff", height=h, width=w, count=1, dtype=dtype, crs=crs,
                       transform=transform, nodata=255 if colours else NODATA) as dst:
        if colours:
            dst.write(np.clip(out, 0, 254).astype(np.uint8), 1)
            dst.write_colormap(1, {0: (0, 0, 0, 255), 1: (0, 128, 0, 255)})
        else:
            dst.write(out, 1)
    return heights
