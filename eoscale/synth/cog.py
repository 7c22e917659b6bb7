"""A synthetic scene written as Sentinel-2 L2A COGs with a STAC Item (`eoscale synth --layout cog`), as Earth Search
distributes them (Element 84's `sentinel-2-l2a` collection):

    S2A_32ULB_<date>_0_L2A/
        B02.tif B03.tif B04.tif B08.tif          10 m bands (Cloud-Optimized GeoTIFFs, uint16 DN)
        B05.tif … B8A.tif B11.tif B12.tif        20 m bands
        SCL.tif AOT.tif WVP.tif TCI.tif           scene classes (20 m), aerosol, water vapour, true-colour preview
        S2A_32ULB_<date>_0_L2A.json               the STAC Item (`eoscale.synth.stac.write_sentinel2_item`): assets
                                                  blue, green, red, rededge1-3, nir, nir08, swir16, swir22, scl, aot,
                                                  wvp, visual, with eo:bands and raster:bands scale/offset/nodata

The pixels are those of the SAFE layout (`eoscale.synth.safe`) of the same scene and baseline, so a scene ingested
from its SAFE product and from its COGs must give identical tiles: digital numbers carry +1000 from baseline 04.00,
which the Item's raster:bands offset (-0.1 on scale 0.0001) undoes, as Earth Search's Items say.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine

from eoscale.bands import SENTINEL2_L2A
from eoscale.synth.safe import baseline_offset, cloud_tops, digital_numbers, scene_classes, sensing_time
from eoscale.synth.scene import SCENE_CRS, coarse_transform

COG_PROFILE = {"driver": "COG", "compress": "deflate", "predictor": 2, "blocksize": 256, "overviews": "NONE"}


def item_id(index: int, *, sensing: str | None = None, tile: str = "T32ULB") -> str:
    when = dt.datetime.strptime(sensing or sensing_time(index), "%Y%m%dT%H%M%S")
    return f"S2A_{tile.removeprefix('T')}_{when:%Y%m%d}_0_L2A"


def write_cog(root: Path, index: int, bands: list[np.ndarray], transform: Affine, *, baseline: str,
              sensing: str | None = None, tile: str = "T32ULB", cloud: np.ndarray | None = None) -> dict:
    """Write scene `index` (`render_scene`'s bands) as a COG folder with its STAC Item under `root`; returns
    {"folder", "bands": {band: file}, "item"} relative to `root`. A season's scenes give their own `sensing` time, MGRS
    `tile` and `cloud` tops (20 m), as `eoscale.synth.safe.write_safe` takes them."""
    from eoscale.synth.stac import write_sentinel2_item

    sensing = sensing or sensing_time(index)
    name = item_id(index, sensing=sensing, tile=tile)
    folder = root / name
    folder.mkdir(parents=True)
    offset = baseline_offset(baseline)
    by_name = {b.name: image for b, image in zip(SENTINEL2_L2A, bands, strict=True)}
    cloud = cloud_tops(by_name) if cloud is None else cloud & (by_name["B05"] != 0)
    files = {}
    for band in SENTINEL2_L2A:
        grid = transform if band.resolution_m == 10 else coarse_transform(transform)
        files[band.name] = f"{name}/{band.name}.tif"
        _write(root / files[band.name], digital_numbers(by_name[band.name], cloud, offset)[None], grid, nodata=0)
    coarse = coarse_transform(transform)
    _write(folder / "SCL.tif", scene_classes(by_name, cloud)[None], coarse, nodata=0)
    _write(folder / "AOT.tif", np.full((1, *cloud.shape), 120, np.uint16), coarse, nodata=0)
    _write(folder / "WVP.tif", np.full((1, *cloud.shape), 1500, np.uint16), coarse, nodata=0)
    tci = np.stack([np.clip(by_name[b] // 12, 0, 255).astype(np.uint8) for b in ("B04", "B03", "B02")])
    _write(folder / "TCI.tif", tci, transform, nodata=0)
    when = dt.datetime.strptime(sensing, "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC)
    item = write_sentinel2_item(folder, name, sensing=when, baseline=baseline, offset=offset)
    return {"folder": name, "bands": files, "item": str(item.relative_to(root))}


def _write(path: Path, pixels: np.ndarray, transform: Affine, *, nodata: float | None) -> None:
    with rasterio.open(path, "w", **COG_PROFILE, width=pixels.shape[2], height=pixels.shape[1], count=pixels.shape[0],
                       dtype=pixels.dtype, crs=SCENE_CRS, transform=transform, nodata=nodata) as dst:
        dst.write(pixels)
