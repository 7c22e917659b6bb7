"""The Copernicus DEM (GLO-30, GLO-90) and the terrain layers eoscale derives from it: elevation, slope and aspect.

Copernicus DEM tiles are distributed as Cloud-Optimized GeoTIFFs (`Copernicus_DSM_COG_10_N50_00_E006_00_DEM.tif`,
Planetary Computer's `cop-dem-glo-30` and AWS's open data, asset `data`): float32 heights in metres above the EGM2008
geoid, nodata -32767, on a geographic grid (EPSG:4326) of 1 arc second in latitude and, north of 50°, 1.5 arc seconds
or more in longitude. Static layers carry no date and are the same under every scene of a place.

Slope and aspect are computed on the DEM's own grid, in metres (a geographic DEM's pixel size in metres per row, from
the ellipsoid), and only then resampled onto a scene's grid (`eoscale.raster.dem`): a slope taken after resampling
would depend on the scene's pixel size. Aspect is an angle: 359° and 1° face the same way, yet as numbers they lie at
the two ends of the scale, so it is held as its sine and cosine (`ASPECT_SIN`: east-facing +1, `ASPECT_COS`:
north-facing +1; both 0 on flat ground, which faces nowhere). Stores written before held `ASPECT` in degrees, which
still reads, and `predict` computes it for a checkpoint trained with it. Stores hold the layers as uint16 on
`STORE_SCALE` (0 stays nodata).
"""

from __future__ import annotations

import re

from eoscale.bands import Band
from eoscale.sensors.registry import SensorSpec

COPDEM = "copdem"
ELEVATION, SLOPE, ASPECT_SIN, ASPECT_COS = "ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"
ASPECT = "ASPECT"  # degrees, as stores and checkpoints before ASPECT_SIN/ASPECT_COS hold it
_LAYERS = (
    Band(ELEVATION, None, None, 30.0, "height above the EGM2008 geoid (m)"),
    Band(SLOPE, None, None, 30.0, "slope (degrees from horizontal)"),
    Band(ASPECT_SIN, None, None, 30.0, "sine of the aspect (+1 facing east, -1 west; 0 on flat ground)"),
    Band(ASPECT_COS, None, None, 30.0, "cosine of the aspect (+1 facing north, -1 south; 0 on flat ground)"),
    Band(ASPECT, None, None, 30.0, "aspect (degrees clockwise from north, the way the slope faces; older stores)"),
)
NODATA = -32767.0  # Copernicus DEM's nodata (ocean-filled tiles carry 0, not nodata)
VERTICAL_DATUM = "EGM2008"
# {layer: (scale, offset, units)}: physical = store × scale + offset; elevation -1000…5553 m at 0.1 m, slope (and the
# older aspect) at 0.01°, the aspect's sine and cosine at 0.0001 (-1…1 on 10,000…30,000); a valid pixel is at least 1,
# so 0 stays nodata
STORE_SCALE = {ELEVATION: (0.1, -1000.0, "m"), SLOPE: (0.01, 0.0, "degree"), ASPECT_SIN: (0.0001, -2.0, "1"),
               ASPECT_COS: (0.0001, -2.0, "1"), ASPECT: (0.01, 0.0, "degree")}
FILE_BAND = re.compile(r"(?:^|[_\-.])(?:DEM|DSM|elevation)$", re.IGNORECASE)

SPEC = SensorSpec(
    name=COPDEM,
    title="Copernicus DEM",
    platforms=(("tandem-x", _LAYERS),),
    default_bands=(ELEVATION, SLOPE),
    file_bands=((FILE_BAND, ELEVATION),),
    file_priority=30,
    layers=((re.compile(r"(?:^|_)(?:EDM|FLM|HEM|WBM)$", re.IGNORECASE), "Copernicus DEM quality layer"),),
    assets={"data": ELEVATION, "elevation": ELEVATION},
)
