"""A generic RGB/RGBN camera (aerial mosaics): its spectral response is not known, so no wavelengths; the resolution is
the file's own. Bands are named by the user, by GDAL's colour interpretation, or by a file name ending in `_red`…; it is
the sensor of bands no other sensor names, and its values are taken as stored."""

from __future__ import annotations

import re

from eoscale.bands import Band
from eoscale.sensors.registry import GENERIC, SensorSpec

_GENERIC = (Band("BLUE", None, None, 0.0, "blue"), Band("GREEN", None, None, 0.0, "green"),
            Band("RED", None, None, 0.0, "red"), Band("NIR", None, None, 0.0, "near infrared"))
ASSETS = {"blue": "BLUE", "green": "GREEN", "red": "RED", "nir": "NIR"}

SPEC = SensorSpec(
    name=GENERIC,
    title="generic RGB/RGBN camera",
    platforms=((GENERIC, _GENERIC),),
    default_bands=tuple(b.name for b in _GENERIC),
    file_bands=((re.compile(r"(?:^|_)(blue|green|red|nir)$", re.IGNORECASE), "{0}"),),
    file_priority=90,
    layers=((re.compile(r"thumb|preview|quicklook|browse|overview", re.IGNORECASE), "preview image"),),
    assets=ASSETS,
    assets_by_common_name=True,
    catch_all=True,
)
