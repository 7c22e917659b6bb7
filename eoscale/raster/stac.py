"""STAC Items as scenes and as label rasters: moved to `eoscale.raster.formats.stac` (this module keeps the old import
path)."""

from eoscale.raster.formats.stac import (  # noqa: F401
    GENERIC_ASSETS,
    LABEL_ASSET_KEYS,
    LANDSAT_ASSETS,
    SENTINEL2_ASSETS,
    ItemSource,
    band_assets,
    item_date,
    item_sensor,
    label_files,
    open_item,
    open_items,
    read_items,
)
