"""The tile store contract: the names `eoscale ingest` writes and `eoscale.data` reads.

A tile store is a Zarr v3 group that `xarray.open_zarr` opens as a labelled Dataset:

- ``images(tile, time, band, y, x)`` uint16 scaled reflectance, ``labels(tile, y, x)`` uint8 class indices
  (``IGNORE_INDEX`` for nodata and unmapped codes), optionally ``targets(tile, y, x)`` float32 per-pixel values
  (regression targets, NaN where unknown; attributes ``target_kind`` "values", name, units, statistics); one tile (all its dates) per chunk, ``shard_tiles`` tiles
  per shard. ``time`` has ``attrs['time_steps']`` (T) steps; a single-date store has T = 1.
- per-tile, per-date coordinates: ``dates(tile, time)`` (datetime64 through xarray, NaT where the date is not
  known) and ``date_valid(tile, time)`` float32 (the share of the tile's pixels with data on that date).
- per-tile coordinates: ``scene`` (index into the ``scenes`` attribute), ``row_off``/``col_off`` (pixel
  offset of the tile in its scene), ``transform(tile, affine)`` (the tile's affine transform, GDAL order
  a, b, c, d, e, f as `affine.Affine` takes them), ``split`` (index into ``SPLITS``), ``valid_fraction``
  and ``class_counts(tile, class)``.
- group attributes (keys below): schema version, completeness, sensor, bands and wavelengths, nodata, the class
  table, per-band statistics, the split ranges, the scenes with their CRS, the ingest parameters, and (since
  the store lineage) every input file's sha256.
- beside the arrays, ``collection.json``: the store's STAC Collection, which holds the store's fingerprint
  (`eoscale.catalog.digest.store_fingerprint`, a digest of every other file of the store).

Version 1 stores (before the time axis: ``images(tile, band, y, x)``, no dates) are still read, never rewritten:
`eoscale.store.open.open_store` gives them a time axis of one step (NaT dates, ``date_valid`` = ``valid_fraction``)
and `eoscale.store.reader` reads their tiles as (1, band, y, x).

Tiles are ordered by split, then scene, then row and column, so every split is one contiguous range of
tiles (``attrs['splits'][name] == [start, stop]``) and readers stream whole shards of it.
Both sides import this module (`eoscale.store.schema`; `eoscale.schema` re-exports it); nothing else defines these names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from affine import Affine
from rasterio.crs import CRS

from eoscale.classes import IGNORE_INDEX

SCHEMA_VERSION = 2  # what `eoscale ingest` writes: 2 added the time axis, dates and date_valid
READABLE_VERSIONS = (1, 2)  # what `eoscale.store.open` reads

# arrays
IMAGES = "images"
LABELS = "labels"
TARGETS = "targets"  # optional (tile, y, x) float32 per-pixel values (`ingest --targets`), NaN where unknown
# dimensions
TILE, TIME, BAND, Y, X, AFFINE, CLASS = "tile", "time", "band", "y", "x", "affine", "class"
# per-tile coordinates
SCENE = "scene"
ROW_OFF = "row_off"
COL_OFF = "col_off"
TRANSFORM = "transform"
SPLIT = "split"
VALID_FRACTION = "valid_fraction"
CLASS_COUNTS = "class_counts"
TILE_COORDS = (SCENE, ROW_OFF, COL_OFF, TRANSFORM, SPLIT, VALID_FRACTION, CLASS_COUNTS)
# per-tile, per-date coordinates (schema version 2)
DATES = "dates"  # (tile, time) datetime64[ns] in xarray, NaT where unknown
DATE_VALID = "date_valid"  # (tile, time) float32: the share of the tile's pixels with data on that date
TIME_COORDS = (DATES, DATE_VALID)
# optional (tile, time) int16 of a store of composites (`ingest --composite`): the clear observations in each step
OBSERVATIONS = "observations"

SPLITS = ("train", "val", "test")

# group attributes
ATTR_SCHEMA = "eoscale_schema_version"
ATTR_COMPLETE = "complete"
ATTR_BANDS = "bands"  # list of band names, in store order
ATTR_SENSOR = "sensor"  # the sensor the bands belong to (eoscale.sensors); absent in older stores: Sentinel-2
ATTR_WAVELENGTHS = "wavelengths_nm"
ATTR_NODATA = "nodata"
ATTR_IGNORE_INDEX = "ignore_index"
ATTR_CLASSES = "classes"  # list of {index, code, name, color}
ATTR_STATISTICS = "statistics"  # {stat: [value per band]} over valid pixels
ATTR_MASKED = "masked_pixels"  # per scene {scene, validity, pixels, by_mask, by_nodata}: its tiles' pixels without data
ATTR_SPLITS = "splits"  # {split: [start, stop]}
ATTR_TILE_SIZE = "tile_size"
ATTR_STRIDE = "stride"
ATTR_SHARD_TILES = "shard_tiles"
ATTR_SCENES = "scenes"  # list of {id, paths, crs, width, height, transform}
ATTR_INGEST = "ingest"  # the parameters the store was made with, and its summary
ATTR_UNMAPPED = "unmapped_label_codes"  # {code: pixel count} of label codes not in the class table
ATTR_TIME_STEPS = "time_steps"  # T, the length of the time axis (schema version 2; version 1: 1)
# a store of several sensors: [{name, bands}] in band order, each sensor a group of consecutive bands
# (`eoscale.sensors.groups`); absent: every band is `ATTR_SENSOR`'s
ATTR_SENSORS = "sensors"
ATTR_INPUTS = "inputs"  # the input files: list of {scene (id), role ("scene" | "labels" | "targets"), path, size, sha256}
# a store with `targets` (per-pixel values, `ingest --targets`): their kind ("values"), name, units and statistics
ATTR_TARGET_KIND = "target_kind"
ATTR_TARGET_NAME = "target_name"
ATTR_TARGET_UNITS = "target_units"
ATTR_TARGET_STATISTICS = "target_statistics"  # {mean, std, min, max, valid_pixels} over the stored target pixels

# files beside the arrays
COLLECTION_FILE = "collection.json"  # the store's STAC Collection (extent, classes, bands, fingerprint, inputs)

REQUIRED_ATTRS = (
    ATTR_SCHEMA, ATTR_COMPLETE, ATTR_BANDS, ATTR_WAVELENGTHS, ATTR_NODATA, ATTR_IGNORE_INDEX, ATTR_CLASSES,
    ATTR_STATISTICS, ATTR_SPLITS, ATTR_TILE_SIZE, ATTR_SHARD_TILES, ATTR_SCENES,
)
REQUIRED_ATTRS_V2 = (ATTR_TIME_STEPS,)  # required besides REQUIRED_ATTRS from schema version 2 on
STATISTICS = ("mean", "std", "min", "max", "p01", "p02", "p50", "p98", "p99", "valid_pixels")

__all__ = [name for name in dir() if name.isupper()] + ["IGNORE_INDEX", "TileGeoref", "tile_georef"]


@dataclass(frozen=True)
class TileGeoref:
    """Where a tile lies on the ground."""

    scene_id: str
    row_off: int
    col_off: int
    transform: Affine
    crs: CRS


def tile_georef(attrs: dict, scene: int, row_off: int, col_off: int, transform: np.ndarray) -> TileGeoref:
    """The georeferencing of one tile from its per-tile coordinates and the store's attributes."""
    info = attrs[ATTR_SCENES][int(scene)]
    return TileGeoref(
        scene_id=info["id"],
        row_off=int(row_off),
        col_off=int(col_off),
        transform=Affine(*(float(v) for v in np.asarray(transform)[:6])),
        crs=CRS.from_user_input(info["crs"]),
    )
