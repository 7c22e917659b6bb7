"""Float bands onto the store's scale: backscatter (linear power or decibels) and terrain layers are float32 files,
the tile store holds uint16 (`eoscale.store.schema`). A `BandFile` whose `decode` is set is read as float and mapped
here, as integer bands are mapped by their scale and offset in the reader:

- `"float"`: store = value × scale + offset (any float quantity on a store scale);
- `"db"`: store = max(dB, floor) × scale + offset (decibels as users hold them, floored as linear power is); on
  another grid the reader resamples such a file in linear power (`eoscale.raster.power_warp`) and maps it as
  `"power_db"`;
- `"power_db"`: store = 10·log10(power, floored) × scale + offset (linear σ0/γ0 power as the catalogues ship it).

A valid pixel lands on 1…65535 (rounded, clipped). The file's nodata and NaN land on the store's nodata; nothing else
does: power at or below 0 that is not the file's nodata (thermal-noise removal leaves small negative values over
calm water) lands on the floor (`eoscale.sensors.sentinel1.DB_FLOOR`), so a water body is data, not a hole.
"""

from __future__ import annotations

import numpy as np

from eoscale.sensors.sentinel1 import DB_FLOOR, power_to_db

DECODES = ("float", "db", "power_db")


def to_store(values: np.ndarray, *, decode: str, scale: float, offset: float, file_nodata: float | None,
             store_nodata: float) -> np.ndarray:
    """`values` (float, any shape) of a band decoded by `decode` as uint16 on the store's scale (module docstring)."""
    if decode not in DECODES:
        raise ValueError(f"decode={decode!r}: expected one of {', '.join(DECODES)}")
    values = np.asarray(values, np.float32)
    missing = ~np.isfinite(values)
    if file_nodata is not None and np.isfinite(file_nodata):
        missing |= values == np.float32(file_nodata)
    values = np.where(missing, np.float32(1.0), values)
    if decode == "power_db":
        values = power_to_db(values)
    elif decode == "db":
        values = np.maximum(values, np.float32(DB_FLOOR))
    mapped = np.rint(values * np.float32(scale) + np.float32(offset))
    return np.where(missing, np.uint16(store_nodata), mapped.clip(1, 65535).astype(np.uint16))
