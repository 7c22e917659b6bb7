"""A synthetic Copernicus DEM tile under each scene, consistent with its land cover, written as GLO-30 is distributed.

    dem/<scene_id>/Copernicus_DSM_COG_10_N50_00_E006_00_DEM.tif   float32 heights (m above EGM2008), nodata -32767,
                                                                   EPSG:4326 at 1" latitude × 1.5" longitude (GLO-30's
                                                                   spacing between 50° and 60° N), a COG
    dem/<scene_id>/Copernicus_DSM_COG_10_N50_00_E006_00_DEM.json   its STAC Item (Planetary Computer's cop-dem-glo-30:
                                                                   asset `data`, platform TanDEM-X, gsd 30)

The terrain is a gentle plain (the Lower Rhine Bay: 80-130 m) whose water lies in valleys: open water is the local
floor (flat, at the valley's level), the ground rises away from it over a few hundred metres, and wetlands beside the
water are flat and only decimetres above it. Hills and dips elsewhere come from fractal noise, tapered to zero at the
water so that no land lies below the river. Built-up, fields and forest do not change the bare-earth heights, as a DSM
over trees would (the real GLO-30 is a surface model; the synthetic one is left as terrain for clarity).
The tile's stream is its own (seed, index, 2): adding it leaves the other files as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import numpy as np
import pystac
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.transform import array_bounds
from rasterio.warp import reproject, transform_bounds
from rio_stac.stac import create_stac_item, get_projection_info, get_raster_info
from scipy import ndimage

from eoscale.sensors.copdem import NODATA
from eoscale.synth.cog import COG_PROFILE
from eoscale.synth.landcover import WATER, WETLAND, LandCover
from eoscale.synth.noise import fbm, smooth_noise
from eoscale.synth.scene import SCENE_CRS, SCENE_RESOLUTION_M

GEOGRAPHIC = CRS.from_epsg(4326)
ARC_SECOND = 1 / 3600
LON_SPACING = 1.5 * ARC_SECOND  # GLO-30 between 50° and 60° of latitude
PLAIN_M, REGIONAL_M, RELIEF_M, VALLEY_M = 95.0, 15.0, 12.0, 10.0  # heights of the plain and its shapes
VALLEY_LENGTH_M = 200.0  # how far from water the valley side rises (e-folding)
WETLAND_ABOVE_WATER_M = 0.3
PAD_PX = 20  # terrain drawn beyond the scene's edge (200 m): slopes at the edge have their neighbours
RELEASED = dt.datetime(2021, 4, 22, tzinfo=dt.UTC)  # GLO-30's public release (its Items' datetime)


def elevation(landcover: LandCover, rng: np.random.Generator) -> np.ndarray:
    """Heights (m, float32) on the land cover's 10 m grid (module docstring)."""
    classes = landcover.classes
    shape = classes.shape
    water = classes == WATER
    wetland = classes == WETLAND
    floor = PLAIN_M + REGIONAL_M * smooth_noise(shape, 600.0, rng)  # the valley floor: smooth over kilometres
    if water.any():
        distance = ndimage.distance_transform_edt(~water) * SCENE_RESOLUTION_M
    else:
        distance = np.full(shape, 10 * VALLEY_LENGTH_M, np.float32)
    rise = 1.0 - np.exp(-distance / VALLEY_LENGTH_M)
    relief = RELIEF_M * (np.clip(fbm(shape, (120.0, 40.0), rng), -2.5, 2.5) + 2.5) / 5.0  # 0 … RELIEF_M
    heights = floor + (VALLEY_M + relief) * rise
    if wetland.any():
        heights[wetland] = floor[wetland] + WETLAND_ABOVE_WATER_M + 0.05 * rng.standard_normal(int(wetland.sum()))
    heights[water] = floor[water]
    return heights.astype(np.float32)


def tile_name(lat: float, lon: float) -> str:
    """Copernicus DEM's tile name of the 1° cell whose south-west corner is at `lat`, `lon`."""
    south, west = math.floor(lat), math.floor(lon)
    return (f"Copernicus_DSM_COG_10_{'N' if south >= 0 else 'S'}{abs(south):02d}_00_"
            f"{'E' if west >= 0 else 'W'}{abs(west):03d}_00_DEM")


def write_dem(root: Path, index: int, landcover: LandCover, transform: Affine, *, seed: int, scene: str) -> dict:
    """Write scene `index`'s DEM tile (geographic, GLO-30 spacing, covering the scene) with its STAC Item under
    `root/<scene>`; returns {"folder", "dem", "item"} relative to `root`."""
    rng = np.random.default_rng([seed, index, 2])
    # the terrain goes on beyond the scene (mirrored): the tile covers it with a margin, as a 1° tile covers a scene
    heights = np.pad(elevation(landcover, rng), PAD_PX, mode="reflect")
    transform = transform @ Affine.translation(-PAD_PX, -PAD_PX)
    height, width = heights.shape
    west, south, east, north = transform_bounds(SCENE_CRS, GEOGRAPHIC, *array_bounds(height, width, transform),
                                                densify_pts=21)
    west, south = math.floor(west / LON_SPACING) * LON_SPACING, math.floor(south / ARC_SECOND) * ARC_SECOND
    cols, rows = math.ceil((east - west) / LON_SPACING), math.ceil((north - south) / ARC_SECOND)
    grid = Affine(LON_SPACING, 0.0, west, 0.0, -ARC_SECOND, south + rows * ARC_SECOND)
    dem = np.full((rows, cols), NODATA, np.float32)
    reproject(heights, dem, src_transform=transform, src_crs=SCENE_CRS, dst_transform=grid, dst_crs=GEOGRAPHIC,
              resampling=Resampling.bilinear, src_nodata=None, dst_nodata=NODATA)
    name = tile_name(south, west)
    folder = root / scene
    folder.mkdir(parents=True)
    path = folder / f"{name}.tif"
    with rasterio.open(path, "w", **{**COG_PROFILE, "predictor": 3, "blocksize": 512 if min(rows, cols) > 1024 else 256},
                       width=cols, height=rows, count=1, dtype="float32", crs=GEOGRAPHIC, transform=grid,
                       nodata=NODATA) as dst:
        dst.write(dem[None])
        dst.set_band_unit(1, "metre")
        dst.set_band_description(1, "DEM")
    item = write_dem_item(path, f"{name}_{scene}")
    return {"folder": scene, "dem": f"{scene}/{path.name}", "item": str(item.relative_to(root))}


def write_dem_item(path: Path, item_id: str) -> Path:
    """The Planetary Computer-like `cop-dem-glo-30` Item of a DEM COG (asset `data`)."""
    with rasterio.open(path) as src:
        raster, projection = get_raster_info(src), get_projection_info(src)
    for band in raster:
        band.pop("histogram", None)
        band["unit"] = "metre"
    asset = pystac.Asset(href=f"./{path.name}", media_type=pystac.MediaType.COG, title=path.stem, roles=["data"],
                         extra_fields={"raster:bands": raster, "proj:shape": projection["shape"],
                                       "proj:transform": projection["transform"]})
    item = create_stac_item(str(path), input_datetime=RELEASED, id=item_id, assets={"data": asset}, with_proj=True,
                            properties={"platform": "TanDEM-X", "gsd": 30},
                            extensions=["https://stac-extensions.github.io/raster/v1.1.0/schema.json"],
                            collection="cop-dem-glo-30", geom_densify_pts=21, geom_precision=7)
    out = path.with_suffix(".json")
    out.write_text(json.dumps(item.to_dict(include_self_link=False, transform_hrefs=False), indent=2) + "\n")
    return out
