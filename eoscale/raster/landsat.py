"""Landsat 8/9 Collection 2 Level-2 folders: moved to `eoscale.raster.formats.landsat` (this module keeps the old import
path)."""

from eoscale.raster.formats.landsat import (  # noqa: F401
    C2_ADD,
    C2_MULT,
    QA_NODATA_BITS,
    acquired,
    calibrate,
    is_landsat_folder,
    open_landsat,
)
