"""Where synthetic scenes lie on the ground, and how they and their label rasters are written as GeoTIFFs.

Scenes are laid out on a grid of UTM zone 32N (EPSG:32632) around Jülich, west to east, then north to
south, without overlap. Labels are written as European land-cover products come: in LAEA Europe
(EPSG:3035) at 20 m, reprojected from the 10 m truth with nearest neighbour.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.warp import Resampling, reproject, transform_bounds

from eoscale.bands import NODATA, REFLECTANCE_SCALE, SENTINEL2_L2A, Band
from eoscale.classes import ClassTable
from eoscale.synth.render import upsample

SCENE_CRS = CRS.from_epsg(32632)
LABEL_CRS = CRS.from_epsg(3035)
SCENE_RESOLUTION_M = 10.0
LABEL_RESOLUTION_M = 20.0
# The Jülich area in UTM 32N: scenes start at its north-west corner and fill it west to east.
AREA_WEST, AREA_EAST, AREA_NORTH = 300_000.0, 340_000.0, 5_660_000.0
SCENE_GAP_M = 1_000.0

# Tiled and deflate-compressed, with the horizontal predictor that suits smooth integer images.
GTIFF_PROFILE = {
    "driver": "GTiff",
    "tiled": True,
    "blockxsize": 256,
    "blockysize": 256,
    "compress": "deflate",
    "predictor": 2,
}


def scene_transform(index: int, shape: tuple[int, int]) -> Affine:
    """The 10 m geotransform of scene `index` (0-based) of `shape` pixels: its own 1 km-aligned slot."""
    height, width = shape
    slot_x = math.ceil(width * SCENE_RESOLUTION_M / 1000) * 1000 + SCENE_GAP_M
    slot_y = math.ceil(height * SCENE_RESOLUTION_M / 1000) * 1000 + SCENE_GAP_M
    per_row = max(1, int((AREA_EAST - AREA_WEST + SCENE_GAP_M) // slot_x))
    row, col = divmod(index, per_row)
    west, north = AREA_WEST + col * slot_x, AREA_NORTH - row * slot_y
    return Affine(SCENE_RESOLUTION_M, 0.0, west, 0.0, -SCENE_RESOLUTION_M, north)


def coarse_transform(transform: Affine, factor: int = 2) -> Affine:
    """The same origin with pixels `factor` times larger (the 20 m grid of a 10 m scene)."""
    return transform @ Affine.scale(factor)


def write_multiband(
    path: Path, bands: list[np.ndarray], shape: tuple[int, int], transform: Affine, tags: dict[str, str]
) -> None:
    """One GeoTIFF of `shape` with every band of `SENTINEL2_L2A` at 10 m.

    20 m bands are repeated 2x2 onto the 10 m grid, as stacking L2A bands at 10 m gives, so both layouts
    hold the same measurements.
    """
    stack = np.stack([b if b.shape == shape else upsample(b, shape) for b in bands])
    with rasterio.open(
        path, "w", **GTIFF_PROFILE, width=shape[1], height=shape[0], count=len(bands), dtype="uint16",
        crs=SCENE_CRS, transform=transform, nodata=NODATA, interleave="pixel",
    ) as dst:
        dst.write(stack)
        dst.update_tags(**tags)
        for i, band in enumerate(SENTINEL2_L2A, start=1):
            _describe(dst, i, band)


def write_band(path: Path, band: Band, image: np.ndarray, transform: Affine, tags: dict[str, str]) -> None:
    """One single-band GeoTIFF at the band's own resolution (`transform` is the scene's 10 m transform)."""
    if band.resolution_m != SCENE_RESOLUTION_M:
        transform = coarse_transform(transform, int(round(band.resolution_m / SCENE_RESOLUTION_M)))
    with rasterio.open(
        path, "w", **GTIFF_PROFILE, width=image.shape[1], height=image.shape[0], count=1, dtype="uint16",
        crs=SCENE_CRS, transform=transform, nodata=NODATA,
    ) as dst:
        dst.write(image, 1)
        dst.update_tags(**tags)
        _describe(dst, 1, band)


def write_labels(path: Path, classes: np.ndarray, transform: Affine, table: ClassTable, tags: dict[str, str], *,
                 description: str = "land cover (ESA WorldCover codes)") -> None:
    """The class map reprojected to EPSG:3035 at 20 m (nearest neighbour), covering the scene's footprint."""
    height, width = classes.shape
    west, south, east, north = rasterio.transform.array_bounds(height, width, transform)
    left, bottom, right, top = transform_bounds(SCENE_CRS, LABEL_CRS, west, south, east, north, densify_pts=21)
    res = LABEL_RESOLUTION_M
    left, bottom = math.floor(left / res) * res, math.floor(bottom / res) * res
    right, top = math.ceil(right / res) * res, math.ceil(top / res) * res
    dst_shape = (int(round((top - bottom) / res)), int(round((right - left) / res)))
    dst_transform = Affine(res, 0.0, left, 0.0, -res, top)
    labels = np.zeros(dst_shape, np.uint8)
    reproject(
        source=classes, destination=labels, src_transform=transform, src_crs=SCENE_CRS, src_nodata=0,
        dst_transform=dst_transform, dst_crs=LABEL_CRS, dst_nodata=0, resampling=Resampling.nearest,
    )
    with rasterio.open(
        path, "w", **{**GTIFF_PROFILE, "predictor": 1}, width=dst_shape[1], height=dst_shape[0], count=1,
        dtype="uint8", crs=LABEL_CRS, transform=dst_transform, nodata=0,
    ) as dst:
        dst.write(labels, 1)
        dst.update_tags(**tags)
        dst.set_band_description(1, description)
        dst.write_colormap(1, {c.code: (*c.rgb, 255) for c in table.classes})


def _describe(dst: rasterio.io.DatasetWriter, index: int, band: Band) -> None:
    dst.set_band_description(index, band.name)
    dst.update_tags(
        index,
        name=band.name,
        wavelength_nm=f"{band.wavelength_nm:g}",
        bandwidth_nm=f"{band.bandwidth_nm:g}",
        resolution_m=f"{band.resolution_m:g}",
        description=band.description,
        reflectance_scale=str(REFLECTANCE_SCALE),
    )
