"""Sentinel-2 L2A SAFE products: moved to `eoscale.raster.formats.safe` (this module keeps the old import path)."""

from eoscale.raster.formats.safe import (  # noqa: F401
    BAND_IDS,
    MTD_FILE,
    OFFSET_BASELINE,
    RESOLUTIONS,
    SCL_NODATA_CLASSES,
    is_safe,
    open_safe,
    products_in,
    read_metadata,
)
