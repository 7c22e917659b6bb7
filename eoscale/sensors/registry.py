"""The sensor spec and the registry every sensor module registers its spec in; the look-ups that ask every sensor.

A `SensorSpec` says all eoscale knows of one instrument: its band table per platform (central wavelength, bandwidth,
native ground sampling), the bands taken by default, how its file names name bands (and which of its files hold no
band), its STAC asset keys, the layer that masks its pixels (Sentinel-2's SCL classes, Landsat's QA_PIXEL bits) and
the map from its digital numbers to reflectance where a product does not state it. The look-ups below
(`band_in_file_name`, `sensor_of_bands`, `sensor_of_platform`, …) ask the registered specs, so a new sensor is one
module defining its spec (see `eoscale.sensors.sentinel2`), registered in `eoscale/sensors/__init__.py` (or by
`register_sensor` from anywhere, as tests register a stub).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from eoscale.bands import Band, normalise_band_name
from eoscale.errors import InputError

SENTINEL2, LANDSAT_OLI, GENERIC = "sentinel-2", "landsat-oli", "generic"
# what a store or checkpoint without a sensor record holds (see `eoscale.sensors`)
DEFAULT_SENSOR = SENTINEL2


@dataclass(frozen=True)
class MaskRule:
    """The layer that makes a sensor's pixels nodata: its nodata `classes` (Sentinel-2's SCL) or set `bits` (Landsat's
    QA_PIXEL); the file that holds it in a band folder (`file_pattern`, on the file name without its suffix), its STAC
    asset key, and whether a band folder without it is refused (`missing`: what to tell the user)."""

    layer: str
    classes: tuple[int, ...] = ()
    bits: int = 0
    file_pattern: re.Pattern | None = None
    asset: str | None = None
    required: bool = False
    missing: str = ""


# (scale, offset, where it came from): reflectance = DN × scale + offset
Linear = tuple[float, float, str]


@dataclass(frozen=True)
class SensorSpec:
    """An instrument: its band table per platform (the first is the reference) and what eoscale reads of its files.

    - `file_bands`: (pattern, band template) pairs: a file name that matches names band `template.format(group 1)`
      (normalised); `not_bands`: patterns of this sensor's files that hold no band (a match ends the search);
      `file_priority`: the order the sensors' file patterns are tried in (lower first; specific patterns first).
    - `layers`: (pattern, what it is) of files beside the bands that hold none, for the listing of skipped files.
    - `assets`: STAC asset key (or common name) -> band; `assets_by_common_name`: an asset is also named by its
      eo:bands common name.
    - `mask`: the mask rule; `default_linear`: the DN -> reflectance map of a product that states none, from its
      STAC Item's properties (None where the properties do not say; `linear_property` names the one needed);
      None for a sensor whose values are taken as stored.
    - `band_folder_needs_item`: a band folder holding this sensor's STAC Item is refused (the Item states a scale
      and offset that a plain folder would lose).
    - `catch_all`: the sensor of bands no other sensor names (the generic camera): takes the bands found, in order.
    """

    name: str
    title: str
    platforms: tuple[tuple[str, tuple[Band, ...]], ...]
    default_bands: tuple[str, ...]
    file_bands: tuple[tuple[re.Pattern, str], ...] = ()
    not_bands: tuple[re.Pattern, ...] = ()
    file_priority: int = 50
    layers: tuple[tuple[re.Pattern, str], ...] = ()
    assets: Mapping[str, str] = field(default_factory=dict)
    assets_by_common_name: bool = False
    mask: MaskRule | None = None
    default_linear: Callable[[Mapping], Linear | None] | None = None
    linear_property: str = ""
    band_folder_needs_item: bool = False
    catch_all: bool = False

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

    def wavelength_table(self, platform: str | None = None) -> dict[str, float]:
        """{band: central wavelength (nm)} of the bands whose wavelength is known, on `platform`."""
        return {b.name: b.wavelength_nm for b in self.table(platform) if b.wavelength_nm is not None}

    def order(self, name: str) -> int:
        """Sort key: the band's place in the table (by wavelength), unknown bands last."""
        names = self.band_names
        return names.index(name) if name in names else len(names)

    def band_in_file_name(self, stem: str) -> str | None | bool:
        """The band a file name names (False: the file is this sensor's but holds no band; None: not this sensor's)."""
        for pattern, template in self.file_bands:
            match = pattern.search(stem)
            if match:
                return normalise_band_name(template.format(*match.groups()))
        if any(p.search(stem) for p in self.not_bands):
            return False
        return None


Sensor = SensorSpec  # the name this type had before the registry

SENSORS: dict[str, SensorSpec] = {}


def register_sensor(spec: SensorSpec) -> SensorSpec:
    """Add `spec` to the registry (its name must be new); returns it."""
    if spec.name in SENSORS and SENSORS[spec.name] is not spec:
        raise ValueError(f"a sensor called {spec.name!r} is registered already")
    SENSORS[spec.name] = spec
    return spec


def unregister_sensor(name: str) -> None:
    """Take sensor `name` out of the registry (tests that register a stub)."""
    SENSORS.pop(name, None)


def get_sensor(name: str | None) -> SensorSpec:
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
    Sentinel-2 band names and what the names say otherwise (see `eoscale.sensors`)."""
    if record:
        return get_sensor(record).name
    try:
        return sensor_of_bands(list(bands), what="a record")
    except InputError:
        return DEFAULT_SENSOR


def _catch_all() -> str:
    return next((s.name for s in SENSORS.values() if s.catch_all), GENERIC)


def sensor_of_bands(names: list[str], *, what: str) -> str:
    """The sensor whose bands `names` are: a sensor when every name is in its table, the catch-all (`generic`) when
    they are not all one sensor's (RGB/RGBN, or the user's own names); names of two sensors' tables are an error."""
    keys = [normalise_band_name(n) for n in names]
    claims = {s.name: [k for k in keys if k in s.band_names] for s in SENSORS.values() if not s.catch_all}
    claims = {name: found for name, found in claims.items() if found}
    if len(claims) > 1:
        (a, fa), (b, fb) = list(claims.items())[:2]
        raise InputError(f"{what} mixes {SENSORS[a].title} bands ({', '.join(fa)}) and {SENSORS[b].title} bands "
                         f"({', '.join(fb)}): give one sensor's bands per scene")
    for name, found in claims.items():
        if len(found) == len(keys):
            return name
    return _catch_all()


def band_in_file_name(stem: str) -> tuple[str, str] | None:
    """(sensor, band) named by a file name (without its suffix), or None for a file that names no band (a cloud mask,
    a TCI preview, AOT/WVP layers, Landsat's QA or thermal bands)."""
    for sensor in sorted(SENSORS.values(), key=lambda s: s.file_priority):
        band = sensor.band_in_file_name(stem)
        if band is False:
            return None
        if band:
            return sensor.name, band
    return None


def layer_in_file_name(stem: str) -> str | None:
    """What a file that holds no band is, in words, from its name (a cloud mask, a TCI preview, …), or None."""
    return next((what for s in SENSORS.values() for pattern, what in s.layers if pattern.search(stem)), None)


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
