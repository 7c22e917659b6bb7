"""Small seeded rasters with a real CRS and geotransform, for tests that need exact control of the input.

`write_scene` makes a 10-band uint16 Sentinel-2-like GeoTIFF in UTM 32N whose class regions are visible in
the pixels; `write_labels` writes those regions' codes in EPSG:3035 at 20 m, as European land-cover
products come; `write_band_directory` splits a scene into one file per band with the 20 m bands at 20 m; `damaged_copy`
breaks a scene's pixels but not its header; `write_reflectance` makes a scene's float32 reflectance as Earth Engine
exports it; `read_map` reads a written map's band.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.transform import array_bounds, from_origin
from rasterio.warp import calculate_default_transform, reproject

from eoscale.bands import SENTINEL2_L2A

CODES = np.array([10, 30, 40, 80], dtype=np.uint8)
CLASSES_CSV = "code,name,color\n10,Tree cover,#006400\n30,Grassland,#ffff4c\n40,Cropland,#f096ff\n80,Permanent water bodies,#0064c8\n"


def class_of_pixels(raw_b02: np.ndarray) -> np.ndarray:
    """The class index that `write_scene` encoded in a raw B02 value (900 per class, noise below 400)."""
    return (np.asarray(raw_b02) // 900 - 1).astype(np.int64)


def class_map(height: int, width: int, seed: int) -> np.ndarray:
    """Blocky class indices 0..3 (into CODES), shifted by the seed."""
    rows = (np.arange(height) + 7 * seed) // 37
    cols = (np.arange(width) + 11 * seed) // 45
    return (np.add.outer(rows, cols) % len(CODES)).astype(np.uint8)


def write_scene(
    path: Path,
    *,
    height: int = 200,
    width: int = 230,
    seed: int = 0,
    origin: tuple[float, float] = (310_000.0, 5_650_000.0),
    crs: str | None = "EPSG:32632",
    nodata_box: tuple[slice, slice] | None = (slice(0, 30), slice(0, 50)),
    band_names: list[str] | None = None,
    describe: bool = True,
    resolution: float = 10.0,
) -> np.ndarray:
    """Write a multi-band scene; returns its class map (indices into CODES)."""
    names = band_names or [b.name for b in SENTINEL2_L2A]
    rng = np.random.default_rng(seed)
    classes = class_map(height, width, seed)
    image = (rng.integers(1, 400, (len(names), height, width)) + 900 * (classes[None].astype(np.int64) + 1)
             + 37 * np.arange(len(names))[:, None, None]).astype(np.uint16)
    if nodata_box is not None:
        image[:, nodata_box[0], nodata_box[1]] = 0
    profile = dict(driver="GTiff", height=height, width=width, count=len(names), dtype="uint16", nodata=0,
                   transform=from_origin(*origin, resolution, resolution), tiled=True, blockxsize=128, blockysize=128, compress="deflate")
    if crs is not None:
        profile["crs"] = crs
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(image)
        if describe:
            for i, name in enumerate(names):
                dst.set_band_description(i + 1, name)
    return classes


def write_labels(path: Path, scene: Path, classes: np.ndarray, *, crs: str = "EPSG:3035", resolution: float = 20.0,
                 codes: np.ndarray = CODES) -> None:
    """The scene's class codes reprojected to `crs` at `resolution` (nearest), nodata 0."""
    with rasterio.open(scene) as src:
        transform, w, h = calculate_default_transform(
            src.crs, crs, src.width, src.height, *array_bounds(src.height, src.width, src.transform), resolution=resolution
        )
        out = np.zeros((h, w), dtype=np.uint8)
        reproject(codes[classes], out, src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                  dst_crs=crs, resampling=Resampling.nearest, src_nodata=0, dst_nodata=0)
    with rasterio.open(path, "w", driver="GTiff", height=h, width=w, count=1, dtype="uint8", crs=crs,
                       transform=transform, nodata=0) as dst:
        dst.write(out, 1)


def write_band_directory(scene: Path, directory: Path) -> None:
    """One file per band, 20 m bands averaged over 2×2 pixels (same origin), named `<scene>_<band>.tif`."""
    directory.mkdir(parents=True)
    with rasterio.open(scene) as src:
        for i, name in enumerate(src.descriptions):
            band = next(b for b in SENTINEL2_L2A if b.name == name)
            data = src.read(i + 1)
            transform = src.transform
            if band.resolution_m == 20:
                h, w = data.shape[0] // 2, data.shape[1] // 2
                data = data[: 2 * h, : 2 * w].reshape(h, 2, w, 2).mean(axis=(1, 3)).astype(np.uint16)
                transform = transform @ transform.scale(2)
            with rasterio.open(directory / f"{scene.stem}_{name}.tif", "w", driver="GTiff", height=data.shape[0],
                               width=data.shape[1], count=1, dtype="uint16", crs=src.crs, transform=transform,
                               nodata=0) as dst:
                dst.write(data, 1)


def write_reflectance(scene: Path, path: Path, *, scale: float = 1e-4) -> None:
    """`scene` (uint16, nodata 0) as float32 `value × scale`, NaN where it has no data: an Earth Engine export."""
    with rasterio.open(scene) as src:
        profile, pixels, names = src.profile, src.read(), src.descriptions
    values = (pixels * scale).astype(np.float32)
    values[:, (pixels == 0).all(axis=0)] = np.nan
    profile.update(dtype="float32", nodata=float("nan"))
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(values)
        for i, name in enumerate(names):
            dst.set_band_description(i + 1, name)


def damaged_copy(scene: Path, folder: Path) -> Path:
    """`folder/damaged.tif`: `scene` with part of its pixel tiles overwritten (the header still reads)."""
    data = bytearray(scene.read_bytes())
    data[len(data) // 3 : len(data) // 2] = b"\x07" * (len(data) // 2 - len(data) // 3)
    damaged = folder / "damaged.tif"
    damaged.write_bytes(bytes(data))
    return damaged


def read_map(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read(1)
