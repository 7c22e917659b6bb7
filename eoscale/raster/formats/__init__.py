"""Product formats, one module each, registered in the order they are asked (`registry`): a Sentinel-2 L2A SAFE
product (`safe`), a STAC Item file (`stac`, which also reads `--stac` Items and label Items), a Landsat Collection 2
Level-2 folder (`landsat`), a band folder of one file per band (`band_folder`), and a multi-band file
(`multiband`, the last: any path no other format recognises). A new format is one more module here that registers a
`ProductFormat` (with `before=` to be asked ahead of the catch-all band folder and multiband file)."""

from __future__ import annotations

from eoscale.raster.formats.registry import (
    FORMATS,
    ProductFormat,
    detect_format,
    products_in,
    register_format,
    unregister_format,
)
from eoscale.raster.formats import safe  # noqa: E402,I001  (the order below is the order formats are asked in)
from eoscale.raster.formats import stac  # noqa: E402
from eoscale.raster.formats import landsat  # noqa: E402
from eoscale.raster.formats import band_folder  # noqa: E402
from eoscale.raster.formats import multiband  # noqa: E402

__all__ = ["FORMATS", "ProductFormat", "band_folder", "detect_format", "landsat", "multiband", "products_in",
           "register_format", "safe", "stac", "unregister_format"]
