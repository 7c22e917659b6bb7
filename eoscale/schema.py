"""Moved: the tile store's contract is `eoscale.store.schema`. This module re-exports it so that imports of
`eoscale.schema` (notebooks, scripts, older code) keep working."""

from eoscale.store.schema import *  # noqa: F403
from eoscale.store.schema import TileGeoref, __all__, tile_georef  # noqa: F401
