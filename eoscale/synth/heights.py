"""Synthetic canopy and object heights tied to a synthetic scene (`eoscale synth --heights`): a continuous target.

A canopy height model (CHM) as an airborne lidar survey gives it: metres above ground, at 20 m in EPSG:3035 (like
the label rasters, so ingest must reproject and resample it), nodata -9999 over open water (lidar gets no ground
return there). The height depends on the class and, by construction, on spatial context that a single pixel's
spectrum does not show:

- trees: a stand's top height grows with the forest cover within about 100 m (closed old forest is taller than
  woodlots and garden trees), and the canopy rises from the stand edge inwards, `1 - exp(-d / 3 px)` of the
  top (wind-exposed edges, younger edge trees); every stand (the renderer's Voronoi regions) differs a little;
- shrubland: regrowth in clearings enclosed by forest is taller than the belt along forest edges;
- built-up: buildings grow with the width of the built-up object (village centres tall, roads and thin
  strips about 0 m);
- cropland: each parcel's crop height follows its mean NDVI (growth stage), seen more cleanly over the parcel
  than in one noisy pixel; grassland, wetland reeds and bare ground are low.

A lidar noise of 0.3 m is added. Heights come from their own random stream (`[seed, index, HEIGHT_STREAM]`), so
writing them changes no byte of the scene, labels or manifest of a set written without them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.warp import Resampling, reproject, transform_bounds
from scipy import ndimage

from eoscale.synth.landcover import BARE, BUILT, CROP, GRASS, SHRUB, TREE, WATER, WETLAND, LandCover
from eoscale.synth.scene import LABEL_CRS, LABEL_RESOLUTION_M, SCENE_CRS

HEIGHT_NODATA = -9999.0
HEIGHT_STREAM = 35  # the third key of the heights' random stream (the scene uses [seed, index])
EDGE_SCALE_PX = 3.0  # canopy height reaches 1 - 1/e of its top 30 m inside a stand
LIDAR_NOISE_M = 0.3
HEIGHT_PROFILE = {"driver": "COG", "compress": "deflate", "predictor": "FLOATING_POINT", "blocksize": 256,
                  "overview_resampling": "average"}


def scene_heights(landcover: LandCover, red: np.ndarray, nir: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Heights in metres on the scene's 10 m grid (float32, NaN over water).

    `red` and `nir` are the scene's 10 m B04 and B08 (0 where it has no data); `rng` the heights' own stream.
    """
    classes = landcover.classes
    heights = np.zeros(classes.shape, np.float32)

    trees = classes == TREE
    forest_cover = ndimage.gaussian_filter(trees.astype(np.float32), sigma=8.0, mode="reflect")
    stand_offset = rng.normal(0.0, 1.5, landcover.n_regions).astype(np.float32)[landcover.regions]
    top = 12.0 + 18.0 * forest_cover + stand_offset
    inside = ndimage.distance_transform_edt(trees)  # 1 at the stand's edge pixel
    heights[trees] = (top * (1.0 - np.exp(-inside / EDGE_SCALE_PX)))[trees]

    shrubs = classes == SHRUB
    enclosed = ndimage.gaussian_filter(trees.astype(np.float32), sigma=4.0, mode="reflect")
    heights[shrubs] = (1.0 + 6.0 * enclosed**2)[shrubs]

    built = classes == BUILT
    width = ndimage.distance_transform_edt(built)  # half the object's width, in pixels
    heights[built] = np.where(width[built] <= 1.5, 0.2, 3.0 + 1.0 * np.minimum(width[built], 12.0))

    crops = classes == CROP
    ndvi = np.where((red > 0) & (nir > 0), (nir.astype(np.float32) - red) / np.maximum(nir.astype(np.float32) + red, 1), np.nan)
    valid = crops & np.isfinite(ndvi)
    sums = np.bincount(landcover.regions[valid], weights=ndvi[valid], minlength=landcover.n_regions)
    counts = np.bincount(landcover.regions[valid], minlength=landcover.n_regions)
    parcel_ndvi = np.where(counts > 0, sums / np.maximum(counts, 1), 0.5).astype(np.float32)
    heights[crops] = (0.1 + 2.0 * np.clip((parcel_ndvi[landcover.regions] - 0.3) / 0.5, 0.0, 1.0))[crops]

    heights[classes == GRASS] = 0.3
    heights[classes == WETLAND] = 1.2
    heights[classes == BARE] = 0.0
    heights += rng.normal(0.0, LIDAR_NOISE_M, classes.shape).astype(np.float32)
    np.maximum(heights, 0.0, out=heights)
    heights[classes == WATER] = np.nan
    return heights


def height_grid(transform: Affine, shape: tuple[int, int]) -> tuple[Affine, tuple[int, int]]:
    """The 20 m EPSG:3035 grid covering a scene's footprint (the label rasters' grid)."""
    west, south, east, north = rasterio.transform.array_bounds(shape[0], shape[1], transform)
    left, bottom, right, top = transform_bounds(SCENE_CRS, LABEL_CRS, west, south, east, north, densify_pts=21)
    res = LABEL_RESOLUTION_M
    left, bottom = math.floor(left / res) * res, math.floor(bottom / res) * res
    right, top = math.ceil(right / res) * res, math.ceil(top / res) * res
    return Affine(res, 0.0, left, 0.0, -res, top), (int(round((top - bottom) / res)), int(round((right - left) / res)))


def write_heights(path: Path, heights: np.ndarray, transform: Affine, tags: dict[str, str]) -> None:
    """`heights` (10 m, scene CRS, NaN for none) as a float32 COG at 20 m in EPSG:3035, averaged, nodata
    -9999 (also where more than half a 20 m cell is water)."""
    dst_transform, dst_shape = height_grid(transform, heights.shape)
    out = np.full(dst_shape, HEIGHT_NODATA, np.float32)
    reproject(source=np.nan_to_num(heights, nan=HEIGHT_NODATA), destination=out, src_transform=transform,
              src_crs=SCENE_CRS, src_nodata=HEIGHT_NODATA, dst_transform=dst_transform, dst_crs=LABEL_CRS,
              dst_nodata=HEIGHT_NODATA, resampling=Resampling.average)
    # the average skips nodata, so a cell mostly over water would get its shore's height: nodata where > half is water
    water = np.zeros(dst_shape, np.float32)
    reproject(source=np.isnan(heights).astype(np.float32), destination=water, src_transform=transform,
              src_crs=SCENE_CRS, dst_transform=dst_transform, dst_crs=LABEL_CRS, resampling=Resampling.average)
    out[water > 0.5] = HEIGHT_NODATA
    with rasterio.open(path, "w", **HEIGHT_PROFILE, width=dst_shape[1], height=dst_shape[0], count=1,
                       dtype="float32", crs=LABEL_CRS, transform=dst_transform, nodata=HEIGHT_NODATA) as dst:
        dst.write(out, 1)
        dst.update_tags(**tags, units="m")
        dst.set_band_description(1, "canopy height (m)")
