"""Small seeded tile stores for the data tests, made by the real `eoscale ingest`.

`write_scenes` writes 10-band uint16 Sentinel-2-like GeoTIFFs (UTM 32N) whose pixels encode their class
(`raw B02 // 1000 - 1` is the class index, see `class_of_pixels`), with a nodata corner, and one label raster
per scene: the first on the scene's own grid (so every label equals the class of its pixels exactly), the
others in EPSG:3035 at 20 m, as European land-cover products come.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.enums import Resampling
from rasterio.transform import array_bounds, from_origin
from rasterio.warp import calculate_default_transform, reproject

BANDS = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
CODES = np.array([10, 30, 40, 80], dtype=np.uint8)
CLASSES_CSV = "code,name,color\n10,Tree cover,#006400\n30,Grassland,#ffff4c\n40,Cropland,#f096ff\n80,Water,#0064c8\n"


def class_of_pixels(raw_b02: np.ndarray) -> np.ndarray:
    """The class index that `write_scenes` encoded in a raw B02 value."""
    return (np.asarray(raw_b02) // 1000 - 1).astype(np.int64)


def write_scenes(folder: Path, *, count: int = 2, height: int = 200, width: int = 230, seed: int = 0):
    """Write `count` scenes and their label rasters into `folder`; returns (scene paths, label paths, classes csv)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    scenes, labels = [], []
    for k in range(count):
        transform = from_origin(300_000 + k * 5_000, 5_650_000, 10, 10)
        rows = (np.arange(height) + 7 * k) // 23
        cols = (np.arange(width) + 11 * k) // 29
        classes = (np.add.outer(rows, cols) % len(CODES)).astype(np.int64)
        image = (1000 * (classes + 1))[None] + rng.integers(0, 900, (len(BANDS), height, width)) + 1
        image = image.astype(np.uint16)
        image[:, :25, :40] = 0  # a nodata corner
        path = folder / f"scene{k}.tif"
        profile = dict(driver="GTiff", height=height, width=width, count=len(BANDS), dtype="uint16",
                       crs="EPSG:32632", transform=transform, nodata=0, tiled=True, blockxsize=128, blockysize=128)
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(image)
            for i, name in enumerate(BANDS):
                dst.set_band_description(i + 1, name)
        codes = CODES[classes]
        label_path = folder / f"labels{k}.tif"
        if k == 0:  # on the scene's own grid: labels are exactly the pixels' classes
            with rasterio.open(label_path, "w", driver="GTiff", height=height, width=width, count=1, dtype="uint8",
                               crs="EPSG:32632", transform=transform, nodata=0) as dst:
                dst.write(codes, 1)
        else:
            bounds = array_bounds(height, width, transform)
            dst_transform, w, h = calculate_default_transform("EPSG:32632", "EPSG:3035", width, height, *bounds,
                                                              resolution=20)
            warped = np.zeros((h, w), dtype=np.uint8)
            reproject(codes, warped, src_transform=transform, src_crs="EPSG:32632", dst_transform=dst_transform,
                      dst_crs="EPSG:3035", resampling=Resampling.nearest, dst_nodata=0)
            with rasterio.open(label_path, "w", driver="GTiff", height=h, width=w, count=1, dtype="uint8",
                               crs="EPSG:3035", transform=dst_transform, nodata=0) as dst:
                dst.write(warped, 1)
        scenes.append(str(path))
        labels.append(str(label_path))
    classes_csv = folder / "classes.csv"
    classes_csv.write_text(CLASSES_CSV)
    return scenes, labels, str(classes_csv)


def make_store(folder: Path, *, tile_size: int = 16, shard_tiles: int = 8, **scene_options) -> str:
    """Ingest freshly written scenes into `folder/tiles.zarr`; returns the store's path."""
    from eoscale.ingest import ingest

    scenes, labels, classes = write_scenes(folder / "rasters", **scene_options)
    out = folder / "tiles.zarr"
    ingest(scenes, out, labels=labels, classes=classes, tile_size=tile_size, shard_tiles=shard_tiles,
           split=(0.6, 0.2, 0.2), workers=1, progress=False)
    return str(out)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """Two scenes of 200×230 px cut into 16 px tiles, 8 tiles per shard."""
    return make_store(tmp_path_factory.mktemp("data-store"))
