"""The sensor registry: which instrument a band belongs to. A band's identity is (sensor, band), never a bare name.

Each sensor has one band table per platform (central wavelength, bandwidth, native ground sampling): Sentinel-2A/B/C
MSI, Landsat 8/9 OLI (Collection 2 Level-2 surface reflectance, `SR_B1`…`SR_B7`), and a `generic` sensor for RGB/RGBN
imagery (aerial mosaics) whose bands are named by the user or by GDAL's colour interpretation. A name alone is
ambiguous: Landsat's `SR_B5` (NIR, 865 nm) is not Sentinel-2's `B05` (red edge, 704 nm). Stores record their
sensor (`eoscale.schema.ATTR_SENSOR`), checkpoints carry it in their band contract (`eoscale.contract`), and a
model is applied to another sensor's bands only through an explicit `--band-map` (`parse_band_map`).

Records written before sensors were recorded (stores, checkpoints) are read as Sentinel-2 (`recorded_sensor`): every
band eoscale could name then got a Sentinel-2 name (a Landsat `SR_B5` file became `B05`: the bug this module ends).
Only a record whose band names belong to no Sentinel-2 band (a user's own `--band-names`) is read as what its names
say, so that an old model trained on such names still maps scenes named the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eoscale.bands import SENTINEL2_L2A, Band, normalise_band_name
from eoscale.errors import InputError

SENTINEL2, LANDSAT_OLI, GENERIC = "sentinel-2", "landsat-oli", "generic"
# what a store or checkpoint without a sensor record holds (see the module docstring)
DEFAULT_SENSOR = SENTINEL2


@dataclass(frozen=True)
class Sensor:
    """An instrument: its band table per platform (the first is the reference) and the bands eoscale takes by default."""

    name: str
    title: str
    platforms: tuple[tuple[str, tuple[Band, ...]], ...]
    default_bands: tuple[str, ...]

    @property
    def bands(self) -> tuple[Band, ...]:
        return self.platforms[0][1]

    @property
    def band_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bands)

    def table(self, platform: str | None = None) -> tuple[Band, ...]:
        """The band table of `platform` (the reference table when None or unknown)."""
        return dict(self.platforms).get((platform or "").lower(), self.bands)

    def wavelengths(self, names: list[str], platform: str | None = None) -> list[float | None]:
        """Central wavelengths (nm) of `names` on `platform`; None for a band the table does not know."""
        lookup = {b.name: b.wavelength_nm for b in self.table(platform)}
        return [lookup.get(normalise_band_name(n)) for n in names]

    def order(self, name: str) -> int:
        """Sort key: the band's place in the table (by wavelength), unknown bands last."""
        names = self.band_names
        return names.index(name) if name in names else len(names)


def _msi(values: tuple[tuple[str, float, float, float, str], ...]) -> tuple[Band, ...]:
    return tuple(Band(*v) for v in values)


# Sentinel-2A: eoscale.bands.SENTINEL2_L2A plus its 60 m bands (B01, B09; B10, cirrus, is in L1C products only)
_S2A = tuple(sorted(SENTINEL2_L2A + _msi((
    ("B01", 442.7, 21.0, 60.0, "coastal aerosol"), ("B09", 945.1, 20.0, 60.0, "water vapour"),
    ("B10", 1373.5, 31.0, 60.0, "cirrus"),
)), key=lambda b: b.wavelength_nm))
# Sentinel-2B: ESA's S2 spectral response functions (COPE-GSEG-EOPG-TN-15-0007, v3.x), central wavelength/bandwidth
_S2B = _msi((
    ("B01", 442.3, 21.0, 60.0, "coastal aerosol"), ("B02", 492.1, 66.0, 10.0, "blue"),
    ("B03", 559.0, 36.0, 10.0, "green"), ("B04", 665.0, 31.0, 10.0, "red"),
    ("B05", 703.8, 16.0, 20.0, "red edge 1"), ("B06", 739.1, 15.0, 20.0, "red edge 2"),
    ("B07", 779.7, 20.0, 20.0, "red edge 3"), ("B08", 833.0, 106.0, 10.0, "near infrared"),
    ("B8A", 864.0, 22.0, 20.0, "narrow near infrared"), ("B09", 943.2, 21.0, 60.0, "water vapour"),
    ("B10", 1376.9, 30.0, 60.0, "cirrus"), ("B11", 1610.4, 94.0, 20.0, "short-wave infrared 1"),
    ("B12", 2185.7, 185.0, 20.0, "short-wave infrared 2"),
))
# Sentinel-2C: the MSI's nominal band centres and widths (ESA's mission figures, as GDAL's SENTINEL2 driver lists
# them), until its measured spectral response is tabulated here
_S2C = _msi((
    ("B01", 443.0, 20.0, 60.0, "coastal aerosol"), ("B02", 490.0, 65.0, 10.0, "blue"),
    ("B03", 560.0, 35.0, 10.0, "green"), ("B04", 665.0, 30.0, 10.0, "red"),
    ("B05", 705.0, 15.0, 20.0, "red edge 1"), ("B06", 740.0, 15.0, 20.0, "red edge 2"),
    ("B07", 783.0, 20.0, 20.0, "red edge 3"), ("B08", 842.0, 115.0, 10.0, "near infrared"),
    ("B8A", 865.0, 20.0, 20.0, "narrow near infrared"), ("B09", 945.0, 20.0, 60.0, "water vapour"),
    ("B10", 1375.0, 30.0, 60.0, "cirrus"), ("B11", 1610.0, 90.0, 20.0, "short-wave infrared 1"),
    ("B12", 2190.0, 180.0, 20.0, "short-wave infrared 2"),
))
# Landsat 8 OLI and Landsat 9 OLI-2 (USGS Landsat 8/9 data users handbooks; band centres agree within 1 nm), 30 m
_OLI = _msi((
    ("SR_B1", 443.0, 20.0, 30.0, "coastal aerosol"), ("SR_B2", 482.0, 60.0, 30.0, "blue"),
    ("SR_B3", 561.4, 57.0, 30.0, "green"), ("SR_B4", 654.6, 37.0, 30.0, "red"),
    ("SR_B5", 864.6, 28.0, 30.0, "near infrared"), ("SR_B6", 1608.9, 85.0, 30.0, "short-wave infrared 1"),
    ("SR_B7", 2200.7, 187.0, 30.0, "short-wave infrared 2"),
))
# an RGB or RGBN camera: its spectral response is not known, so no wavelengths; the resolution is the file's own
_GENERIC = (Band("BLUE", None, None, 0.0, "blue"), Band("GREEN", None, None, 0.0, "green"),
            Band("RED", None, None, 0.0, "red"), Band("NIR", None, None, 0.0, "near infrared"))

SENSORS: dict[str, Sensor] = {
    s.name: s
    for s in (
        Sensor(SENTINEL2, "Sentinel-2 MSI", (("sentinel-2a", _S2A), ("sentinel-2b", _S2B), ("sentinel-2c", _S2C)),
               tuple(b.name for b in SENTINEL2_L2A)),
        Sensor(LANDSAT_OLI, "Landsat 8/9 OLI", (("landsat-8", _OLI), ("landsat-9", _OLI)),
               tuple(b.name for b in _OLI)),
        Sensor(GENERIC, "generic RGB/RGBN camera", ((GENERIC, _GENERIC),), tuple(b.name for b in _GENERIC)),
    )
}


def get_sensor(name: str | None) -> Sensor:
    """The sensor called `name`; None (a record from before sensors were recorded) is `DEFAULT_SENSOR`."""
    key = DEFAULT_SENSOR if name is None else str(name).strip().lower()
    if key not in SENSORS:
        raise InputError(f"unknown sensor {name!r}: expected one of {', '.join(SENSORS)}")
    return SENSORS[key]


def sensor_of_platform(platform: str) -> tuple[str | None, str | None]:
    """(sensor, platform) of a platform or constellation name as STAC Items give it (`sentinel-2a`, `sentinel-2`,
    USGS's `LANDSAT_9`, `landsat-8`); (None, None) for one the registry does not know."""
    key = platform.strip().lower().replace("_", "-").replace(" ", "-")
    for sensor in SENSORS.values():
        platforms = dict(sensor.platforms)
        if key in platforms:
            return sensor.name, key
        if any(p.startswith(key + "-") or p.rstrip("abcdefghijklmnopqrstuvwxyz") == key for p in platforms):
            return sensor.name, None  # a constellation: the sensor, not which satellite
    return None, None


def recorded_sensor(record: str | None, bands: list[str] | tuple[str, ...]) -> str:
    """The sensor a store or checkpoint records; without a record (written before sensors were), Sentinel-2 for
    Sentinel-2 band names and what the names say otherwise (see the module docstring)."""
    if record:
        return get_sensor(record).name
    try:
        return sensor_of_bands(list(bands), what="a record")
    except InputError:
        return DEFAULT_SENSOR


def sensor_of_bands(names: list[str], *, what: str) -> str:
    """The sensor whose bands `names` are: Landsat OLI or Sentinel-2 when every name is in its table, `generic`
    when none is in either (RGB/RGBN, or the user's own names); a mix of the two tables is an error."""
    keys = [normalise_band_name(n) for n in names]
    landsat = [k for k in keys if k in SENSORS[LANDSAT_OLI].band_names]
    sentinel = [k for k in keys if k in SENSORS[SENTINEL2].band_names]
    if landsat and sentinel:
        raise InputError(f"{what} mixes Landsat bands ({', '.join(landsat)}) and Sentinel-2 bands "
                         f"({', '.join(sentinel)}): give one sensor's bands per scene")
    if landsat and len(landsat) == len(keys):
        return LANDSAT_OLI
    if sentinel and len(sentinel) == len(keys):
        return SENTINEL2
    return GENERIC


# Landsat Collection 2 Level-2 file names: LC09_L2SP_196025_20230612_20230614_02_T1_SR_B5.TIF
_LANDSAT_SR = re.compile(r"(?:^|[_\-.])SR_B([1-7])(?:[_\-.]|$)", re.IGNORECASE)
# other Landsat layers (surface temperature ST_B10, QA bands): never Sentinel-2 bands
_LANDSAT_OTHER = re.compile(r"(?:^|[_\-.])(?:ST|SR|QA)_", re.IGNORECASE)
# Sentinel-2 file names: T32ULB_20240612T103031_B8A_20m.jp2, scene_B04.tif, B02.jp2
_SENTINEL2 = re.compile(r"(?:^|[_\-.])(B(?:0?[1-9]|1[0-2]|8A))(?:[_\-.]|$)", re.IGNORECASE)
_GENERIC_NAMES = {"blue": "BLUE", "green": "GREEN", "red": "RED", "nir": "NIR"}


def band_in_file_name(stem: str) -> tuple[str, str] | None:
    """(sensor, band) named by a file name (without its suffix), or None for a file that names no band (a cloud mask,
    a TCI preview, AOT/WVP layers, Landsat's QA or thermal bands)."""
    match = _LANDSAT_SR.search(stem)
    if match:
        return LANDSAT_OLI, f"SR_B{match.group(1)}"
    if _LANDSAT_OTHER.search(stem):
        return None
    match = _SENTINEL2.search(stem)
    if match:
        return SENTINEL2, normalise_band_name(match.group(1))
    key = stem.rsplit("_", 1)[-1].lower()
    return (GENERIC, _GENERIC_NAMES[key]) if key in _GENERIC_NAMES else None


# layers that real downloads hold beside the bands, by a token in their file names: what they are, for the listing of
# skipped files (the SCL of a Sentinel-2 band folder is its mask, `eoscale.raster.sources`)
_LAYERS = (
    (re.compile(r"(?:^|[_\-.])SCL(?:[_\-.]|$)", re.IGNORECASE), "Sentinel-2 scene classification (SCL)"),
    (re.compile(r"MSK_CLDPRB|CLDPRB|CLD_?PROB", re.IGNORECASE), "cloud probability, not used as the mask"),
    (re.compile(r"cloud[_\-]?mask|(?:^|[_\-.])CLM(?:[_\-.]|$)|MSK_CLOUDS|MSK_CLASSI", re.IGNORECASE),
     "cloud mask, not used as the mask"),
    (re.compile(r"MSK_SNWPRB|SNW_?PROB", re.IGNORECASE), "snow probability, not used as the mask"),
    (re.compile(r"(?:^|[_\-.])(?:TCI|visual)(?:[_\-.]|$)", re.IGNORECASE), "true-colour preview"),
    (re.compile(r"(?:^|[_\-.])AOT(?:[_\-.]|$)", re.IGNORECASE), "aerosol optical thickness"),
    (re.compile(r"(?:^|[_\-.])WVP(?:[_\-.]|$)", re.IGNORECASE), "water vapour"),
    (re.compile(r"(?:^|[_\-.])ST_", re.IGNORECASE), "Landsat surface temperature layer"),
    (re.compile(r"QA_RADSAT|SR_QA_AEROSOL|(?:^|[_\-.])QA(?:[_\-.]|$)", re.IGNORECASE), "quality flags"),
    (re.compile(r"thumb|preview|quicklook|browse|overview", re.IGNORECASE), "preview image"),
)


def layer_in_file_name(stem: str) -> str | None:
    """What a file that holds no band is, in words, from its name (a cloud mask, a TCI preview, …), or None."""
    return next((what for pattern, what in _LAYERS if pattern.search(stem)), None)


def is_scl_file(stem: str) -> bool:
    """Whether a file name names a Sentinel-2 scene classification layer (`…_SCL_20m`, `SCL`)."""
    return bool(_LAYERS[0][0].search(stem))


def band_of_description(description: str) -> tuple[str, str] | None:
    """(sensor, band) of a band description that is the name of a band in the registry, else None."""
    key = normalise_band_name(description)
    for sensor in SENSORS.values():
        if key in sensor.band_names:
            return sensor.name, key
    return None


def parse_band_map(text: str | None) -> dict[str, str]:
    """`--band-map SR_B2=B02,SR_B3=B03,…` as {scene band: model/store band}, names normalised."""
    if not text:
        return {}
    mapping: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",") if p.strip()):
        source, sep, target = pair.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise InputError(f"--band-map {text!r}: give SCENE_BAND=MODEL_BAND pairs separated by commas, "
                             f"e.g. --band-map SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A")
        source, target = normalise_band_name(source), normalise_band_name(target)
        if source in mapping or target in mapping.values():
            raise InputError(f"--band-map {text!r} names {source if source in mapping else target} twice: map each "
                             f"band once")
        mapping[source] = target
    return mapping
