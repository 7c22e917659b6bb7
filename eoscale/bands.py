"""Spectral bands: the Sentinel-2 L2A band set and band-name lookups.

Band *names* are the contract everywhere in eoscale (stores, checkpoints, scenes): bands are matched by
name, never by position, so a store or a scene may hold them in any order. Which instrument a band belongs to
(Sentinel-2, Landsat OLI, a generic camera) is `eoscale.sensors`' business: a name is only unique within a sensor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from eoscale.errors import InputError


@dataclass(frozen=True)
class Band:
    """One spectral band: its name, central wavelength and bandwidth (nm; None where the instrument's response is
    unknown) and native ground sampling (m)."""

    name: str
    wavelength_nm: float | None
    bandwidth_nm: float | None
    resolution_m: float
    description: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# Sentinel-2A MSI central wavelengths and bandwidths (ESA S2 MSI spectral response functions, v3.0);
# the 10 bands that L2A products carry at 10 m and 20 m (B01, B09 at 60 m and the cirrus B10 are left out,
# as land-cover work usually does).
SENTINEL2_L2A: tuple[Band, ...] = (
    Band("B02", 492.4, 66.0, 10.0, "blue"),
    Band("B03", 559.8, 36.0, 10.0, "green"),
    Band("B04", 664.6, 31.0, 10.0, "red"),
    Band("B05", 704.1, 15.0, 20.0, "red edge 1"),
    Band("B06", 740.5, 15.0, 20.0, "red edge 2"),
    Band("B07", 782.8, 20.0, 20.0, "red edge 3"),
    Band("B08", 832.8, 106.0, 10.0, "near infrared"),
    Band("B8A", 864.7, 21.0, 20.0, "narrow near infrared"),
    Band("B11", 1613.7, 91.0, 20.0, "short-wave infrared 1"),
    Band("B12", 2202.4, 175.0, 20.0, "short-wave infrared 2"),
)
SENTINEL2_NAMES: tuple[str, ...] = tuple(b.name for b in SENTINEL2_L2A)
# Sentinel-2 L2A stores surface reflectance scaled by 10,000 as uint16, with 0 as nodata.
REFLECTANCE_SCALE = 10_000
NODATA = 0


def sentinel2_band(name: str) -> Band:
    """The Sentinel-2 band called `name` (accepts 'B8A', 'b8a', 'B2' and 'B02')."""
    key = normalise_band_name(name)
    for band in SENTINEL2_L2A:
        if band.name == key:
            return band
    raise InputError(f"unknown Sentinel-2 band {name!r}: expected one of {', '.join(SENTINEL2_NAMES)}")


def normalise_band_name(name: str) -> str:
    """Canonical spelling of a band name: upper case, Sentinel-2 numbers zero-padded ('b2' -> 'B02')."""
    key = name.strip().upper()
    if len(key) == 2 and key[0] == "B" and key[1].isdigit():
        key = f"B0{key[1]}"
    return key


def select_bands(available: list[str], wanted: list[str] | None, *, what: str) -> list[int]:
    """Indices into `available` of the `wanted` band names (all of `available` when `wanted` is None).

    `what` names the thing that holds the bands, for the error message.
    """
    if wanted is None:
        return list(range(len(available)))
    lookup = {normalise_band_name(n): i for i, n in enumerate(available)}
    missing = [n for n in wanted if normalise_band_name(n) not in lookup]
    if missing:
        raise InputError(
            f"band(s) {', '.join(missing)} not in {what}: it has {', '.join(available)}"
        )
    return [lookup[normalise_band_name(n)] for n in wanted]
