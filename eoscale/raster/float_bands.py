"""Float bands onto the store's scale: backscatter (linear power or decibels) and terrain layers are float32 files,
the tile store holds uint16 (`eoscale.store.schema`). A `BandFile` whose `decode` is set is read as float and mapped
here, as integer bands are mapped by their scale and offset in the reader:

- `"float"`: store = value × scale + offset (decibels onto Sentinel-1's store scale, elevation onto the DEM's);
- `"power_db"`: store = 10·log10(power, floored) × scale + offset (linear σ0/γ0 power as the catalogues ship it).

A valid pixel lands on 1…65535 (rounded, clipped); the file's nodata, NaN, and for power a value at or below 0 (no
return: the fill of a GRD swath edge) land on the store's nodata.
"""

from __future__ import annotations

import numpy as np

from eoscale.sensors.sentinel1 import power_to_db

DECODES = ("float", "power_db")


def to_store(values: np.ndarray, *, decode: str, scale: float, offset: float, file_nodata: float | None,
             store_nodata: float) -> np.ndarray:
    """`values` (float, any shape) of a band decoded by `decode` as uint16 on the store's scale (module docstring)."""
    if decode not in DECODES:
        raise ValueError(f"decode={decode!r}: expected one of {', '.join(DECODES)}")
    values = np.asarray(values, np.float32)
    missing = ~np.isfinite(values)
    if file_nodata is not None and np.isfinite(file_nodata):
        missing |= values == np.float32(file_nodata)
    if decode == "power_db":
        missing |= values <= 0
        values = power_to_db(np.where(missing, 1.0, values))
    mapped = np.rint(np.where(missing, 0.0, values) * np.float32(scale) + np.float32(offset))
    return np.where(missing, np.uint16(store_nodata), mapped.clip(1, 65535).astype(np.uint16))
