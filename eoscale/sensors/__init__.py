"""The sensor registry: which instrument a band belongs to. A band's identity is (sensor, band), never a bare name.

One module a sensor, each registering one `SensorSpec` (`eoscale.sensors.registry`): Sentinel-2A/B/C MSI
(`sentinel2`), Landsat 8/9 OLI (Collection 2 Level-2 surface reflectance, `SR_B1`…`SR_B7`: `landsat`), Sentinel-1 C-SAR
backscatter (`VV`, `VH`: `sentinel1`), the Copernicus DEM's static layers (`ELEVATION`, `SLOPE`, `ASPECT`: `copdem`),
embedding fields in the Satellite Embedding layout (`A00`…, int8 de-quantised as `(v/127.5)² · sign(v)`: `embedding`),
and a `generic`
sensor for RGB/RGBN imagery (aerial mosaics) whose bands are named by the user or by GDAL's colour interpretation.
A spec holds the band table per platform (central wavelength, bandwidth, native ground sampling), the file-name band
patterns, the STAC asset keys, the mask rule and the reflectance scale. A new sensor is one more module here,
registered below.

A name alone is ambiguous: Landsat's `SR_B5` (NIR, 865 nm) is not Sentinel-2's `B05` (red edge, 704 nm). Stores record
their sensor (`eoscale.schema.ATTR_SENSOR`), checkpoints carry it in their band contract (`eoscale.contract`), and a
model is applied to another sensor's bands only through an explicit `--band-map` (`parse_band_map`).

Records written before sensors were recorded (stores, checkpoints) are read as Sentinel-2 (`recorded_sensor`): every
band eoscale could name then got a Sentinel-2 name (a Landsat `SR_B5` file became `B05`: the bug this package ends).
Only a record whose band names belong to no Sentinel-2 band (a user's own `--band-names`) is read as what its names
say, so that an old model trained on such names still maps scenes named the same way.
"""

from __future__ import annotations

from eoscale.sensors import copdem, embedding, generic, landsat, sentinel1, sentinel2
from eoscale.sensors.registry import (
    DEFAULT_SENSOR,
    GENERIC,
    LANDSAT_OLI,
    SENSORS,
    SENTINEL2,
    Linear,
    MaskRule,
    Sensor,
    SensorSpec,
    band_in_file_name,
    band_of_description,
    get_sensor,
    layer_in_file_name,
    parse_band_map,
    recorded_sensor,
    register_sensor,
    sensor_of_bands,
    sensor_of_platform,
    unregister_sensor,
)
from eoscale.sensors.sentinel2 import is_scl_file

# the built-in sensors, registered in the order they are listed and asked: Sentinel-2 (the default) first, the
# catch-all generic camera last; a new sensor module is imported above and its SPEC added here
for _spec in (sentinel2.SPEC, landsat.SPEC, sentinel1.SPEC, copdem.SPEC, embedding.SPEC, generic.SPEC):
    register_sensor(_spec)

__all__ = [
    "DEFAULT_SENSOR", "GENERIC", "LANDSAT_OLI", "SENSORS", "SENTINEL2", "Linear", "MaskRule", "Sensor", "SensorSpec",
    "band_in_file_name", "band_of_description", "copdem", "embedding", "generic", "get_sensor", "is_scl_file", "landsat",
    "layer_in_file_name", "parse_band_map", "recorded_sensor", "register_sensor", "sensor_of_bands",
    "sensor_of_platform", "sentinel1", "sentinel2", "unregister_sensor",
]
