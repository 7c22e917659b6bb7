"""Product formats, one module each, registered in the order they are asked (`registry`): a Sentinel-2 L2A SAFE
product (`safe`), a STAC Item file (`stac`, which also reads `--stac` Items and label Items), a Landsat Collection 2
Level-2 folder (`landsat`), a Sentinel-1 folder of one backscatter COG a polarisation (`sentinel1`, which also opens
Sentinel-1 STAC Items for `stac`), a band folder of one file per band (`band_folder`), and a multi-band file
(`multiband`, the last: any path no other format recognises). A new format is one more module here defining a `ProductFormat`,
registered below in its place (or `register_format(fmt, before=...)` from elsewhere)."""

from __future__ import annotations

from eoscale.raster.formats import band_folder, landsat, multiband, safe, sentinel1, stac
from eoscale.raster.formats.registry import (
    FORMATS,
    ProductFormat,
    detect_format,
    products_in,
    register_format,
    unregister_format,
)

# the built-in formats, registered in the order they are asked (specific ones first; the multiband file takes any path)
for _format in (safe.FORMAT, stac.FORMAT, landsat.FORMAT, sentinel1.FORMAT, band_folder.FORMAT, multiband.FORMAT):
    register_format(_format)
stac.ITEM_OPENERS[sentinel1.SENTINEL1] = sentinel1.open_sentinel1_item

__all__ = ["FORMATS", "ProductFormat", "band_folder", "detect_format", "landsat", "multiband", "products_in",
           "register_format", "safe", "sentinel1", "stac", "unregister_format"]
