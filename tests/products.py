"""Real product layouts, small: Sentinel-2 L2A SAFE products (through `eoscale synth --layout safe`), Landsat 8/9
Collection 2 Level-2 band folders, and Sentinel-2 band folders with the files real downloads hold beside the bands."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import from_origin

from tests.rasters import write_band_directory, write_scene

LANDSAT_ID = "LC09_L2SP_196025_20230612_20230614_02_T1"


def safe_product(root: Path) -> Path:
    """The one SAFE folder under a synthetic set's `scenes/`."""
    (product,) = sorted((root / "scenes").glob("*.SAFE"))
    return product


def copy_product(product: Path, folder: Path) -> Path:
    """A copy of `product` in `folder` (to break without touching the original)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(product, folder / product.name))


def write_landsat_folder(folder: Path, *, size: int = 64, seed: int = 0,
                         origin: tuple[float, float] = (310_000.0, 5_650_000.0)) -> Path:
    """A Landsat 9 C2 L2 scene folder as USGS ships it: SR_B1..SR_B7 (30 m, uint16, no descriptions), QA_PIXEL (its
    top-left sixteenth flagged cloud), ST_B10, the MTL text (scale 2.75e-5, offset -0.2) and a thumbnail."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    profile = dict(driver="GTiff", height=size, width=size, count=1, crs="EPSG:32632", nodata=0,
                   transform=from_origin(*origin, 30, 30))
    for band in range(1, 8):
        with rasterio.open(folder / f"{LANDSAT_ID}_SR_B{band}.TIF", "w", dtype="uint16", **profile) as dst:
            dst.write((7273 + 400 * band + rng.integers(0, 2000, (size, size))).astype(np.uint16), 1)
    qa = np.full((size, size), 21824, np.uint16)  # clear, low confidences (USGS's value for clear land)
    qa[: size // 4, : size // 4] = 22280  # bit 3 set: cloud
    for name, pixels in (("QA_PIXEL", qa), ("ST_B10", np.full((size, size), 44000, np.uint16))):
        with rasterio.open(folder / f"{LANDSAT_ID}_{name}.TIF", "w", dtype="uint16", **profile) as dst:
            dst.write(pixels, 1)
    factors = "".join(f"    REFLECTANCE_MULT_BAND_{n} = 2.75E-05\n    REFLECTANCE_ADD_BAND_{n} = -0.200000\n"
                      for n in range(1, 8))
    (folder / f"{LANDSAT_ID}_MTL.txt").write_text(
        "GROUP = LANDSAT_METADATA_FILE\n  GROUP = LEVEL2_SURFACE_REFLECTANCE_PARAMETERS\n" + factors
        + "  END_GROUP = LEVEL2_SURFACE_REFLECTANCE_PARAMETERS\nEND_GROUP = LANDSAT_METADATA_FILE\nEND\n")
    (folder / f"{LANDSAT_ID}_thumb_small.jpeg").write_bytes(b"\xff\xd8\xff\xd9")
    return folder


def write_cluttered_band_folder(folder: Path, *, size: int = 96) -> tuple[Path, list[str]]:
    """A Sentinel-2 band folder (10/20 m bands) with a cloud mask, a TCI preview, an AOT layer, Sen2Cor's cloud
    probability and a thumbnail beside
    the bands; returns the folder and the names of the files that are not bands."""
    scene = folder.parent / f"{folder.name}_source.tif"
    write_scene(scene, height=size, width=size)
    write_band_directory(scene, folder)
    profile = dict(driver="GTiff", height=size, width=size, crs="EPSG:32632", transform=from_origin(310_000, 5_650_000, 10, 10))
    with rasterio.open(folder / "cloud_mask.tif", "w", count=1, dtype="uint8", **profile) as dst:
        dst.write(np.zeros((1, size, size), np.uint8))
        dst.set_band_description(1, "cloud mask")
    with rasterio.open(folder / "T32ULB_20240612T103031_TCI_10m.tif", "w", count=3, dtype="uint8", **profile) as dst:
        dst.write(np.full((3, size, size), 90, np.uint8))
    with rasterio.open(folder / "T32ULB_20240612T103031_AOT_10m.tif", "w", count=1, dtype="uint16", **profile) as dst:
        dst.write(np.full((1, size, size), 120, np.uint16))
    with rasterio.open(folder / "MSK_CLDPRB_20m.tif", "w", count=1, dtype="uint8", **profile) as dst:
        dst.write(np.zeros((1, size, size), np.uint8))  # Sen2Cor's cloud probability, 0-100 %
    (folder / "preview.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return folder, ["cloud_mask.tif", "T32ULB_20240612T103031_TCI_10m.tif", "T32ULB_20240612T103031_AOT_10m.tif",
                    "MSK_CLDPRB_20m.tif", "preview.png"]


def write_rgb(path: Path, *, size: int = 64, nir: bool = False, seed: int = 0) -> Path:
    """An aerial RGB (uint8, GDAL colour interpretation red/green/blue, no band descriptions) or, with `nir`, RGBN
    (uint16, four undescribed bands) mosaic tile in UTM 32N at 1 m."""
    rng = np.random.default_rng(seed)
    count, dtype = (4, "uint16") if nir else (3, "uint8")
    pixels = rng.integers(1, 250, (count, size, size)).astype(dtype)
    extra = {} if nir else {"photometric": "RGB"}
    with rasterio.open(path, "w", driver="GTiff", height=size, width=size, count=count, dtype=dtype, crs="EPSG:32632",
                       transform=from_origin(310_000, 5_650_000, 1, 1), nodata=0, **extra) as dst:
        dst.write(pixels)
    return path
