"""Sentinel-1A/B/C C-SAR: backscatter bands (VV, VH; HH, HV over polar and some sea areas), file names
(`S1A_IW_GRDH_1SDV_20230615T171524_…_vv.tif`, `iw-vh.tiff`, `VV.tif`), the catalogues' asset keys (`vv`, `vh` on Element
84's Earth Search `sentinel-1-grd` and Microsoft's Planetary Computer `sentinel-1-rtc`), and the store's decibel scale.

A radar band is no reflectance: it is backscatter, the power returned per unit area, either σ0 (normalised by the area
on the ellipsoid: GRD products calibrated with their sigmaNought LUT) or γ0 (normalised by the area seen from the
sensor, terrain-flattened: RTC products). The catalogues distribute it as linear power (float32, ≥ 0, mostly below 1);
users often hold it in decibels (float32, mostly negative). eoscale resamples it in linear power (an average of
decibels over speckle sits below the decibels of the average power) and then takes decibels: 10·log10(power), floored
at `DB_FLOOR` (a pixel at 0 power has no finite dB; thermal-noise removal leaves small negative power over calm water,
which is data at the floor, not nodata), and stores them as uint16 on `DB_STORE` (store = dB × 100 + 10,000,
so −100…+555 dB at 0.01 dB steps; 0 stays nodata), so the tile store keeps its one pixel type. What a store holds is
recorded with each scene (`radiometry`: units, scale and offset back to dB, where the values came from).
"""

from __future__ import annotations

import datetime as dt
import re

import numpy as np

from eoscale.bands import Band
from eoscale.sensors.registry import SensorSpec

SENTINEL1 = "sentinel-1"
# C band: 5.405 GHz, a wavelength of 5.5466 cm (ESA's Sentinel-1 SAR user guide), in nm as the band tables hold it
C_BAND_NM = 299_792_458 / 5.405e9 * 1e9
_POLARISATIONS = (
    ("VV", "vertical transmit, vertical receive (co-polarised)"),
    ("VH", "vertical transmit, horizontal receive (cross-polarised)"),
    ("HH", "horizontal transmit, horizontal receive (co-polarised)"),
    ("HV", "horizontal transmit, vertical receive (cross-polarised)"),
)
# IW GRD high resolution: 10 m pixels (20 × 22 m resolution); RTC products are resampled to 10 m as well
_C_SAR = tuple(Band(name, round(C_BAND_NM, 1), None, 10.0, what) for name, what in _POLARISATIONS)

# file names: `…_vv.tif`, `iw-vh.tiff` (GRD's measurement files), `VV.tif`; a separator on both sides, so the
# `1SDV` of a product name is not taken for a band
FILE_BAND = re.compile(r"(?:^|[_\-.])(VV|VH|HH|HV)(?:[_\-.]|$)", re.IGNORECASE)
# S1A_IW_GRDH_1SDV_20230615T171524_20230615T171549_049000_05E4A1_1F2B: mission, mode, product, class/polarisations,
# start and stop of sensing, absolute orbit, datatake, product id
PRODUCT_NAME = re.compile(
    r"(S1[ABCD])_(IW|EW|SM|WV|S[1-6])_(GRD[FHM]|SLC|RTC|OCN|RAW)_?\w*?_(\d{8}T\d{6})_(\d{8}T\d{6})_(\d{6})",
    re.IGNORECASE)
ASSETS = {"vv": "VV", "vh": "VH", "hh": "HH", "hv": "HV"}

# decibels: the floor of 10·log10 (power below 1e-5, as 0 or thermal-noise residue, is -50 dB) and the store scale
DB_FLOOR = -50.0
DB_STORE = {"scale": 0.01, "offset": -100.0}  # dB = store × scale + offset
STORE_PER_DB, STORE_AT_0_DB = 100.0, 10_000.0  # store = dB × 100 + 10,000
# border noise: GRD swath edges carry a strip of near-zero power beside the nodata fill; pixels whose every band is
# below this within `BORDER_MARGIN_M` of nodata are taken as noise (calm water is above it in VV: about -25 dB)
BORDER_NOISE_DB = -35.0
BORDER_MARGIN_M = 500.0
# Linear power is mostly below 1 (σ0 of land -25…0 dB is 0.003…1), ≥ 0 but for noise removal's small negative
# residue; decibels are mostly negative
LINEAR, DECIBELS = "linear", "dB"


def power_to_db(power: np.ndarray, *, floor_db: float = DB_FLOOR) -> np.ndarray:
    """10·log10 of linear power, at least `floor_db` (0 power, and negative residue of noise removal, land there)."""
    floor = np.float32(10.0 ** (floor_db / 10.0))
    return (np.float32(10.0) * np.log10(np.maximum(np.asarray(power, np.float32), floor))).astype(np.float32)


def db_to_power(db: np.ndarray) -> np.ndarray:
    """Linear power of decibels."""
    return (np.float32(10.0) ** (np.asarray(db, np.float32) / np.float32(10.0))).astype(np.float32)


def scale_of_values(values: np.ndarray) -> str | None:
    """Whether finite, non-zero backscatter `values` look linear (all above -1, most below 1: noise removal leaves
    small negative power, decibels of land and water lie far below -1) or in dB (most negative); None when they say
    neither (too few values, or a mix)."""
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values) & (values != 0)]
    if values.size < 16:
        return None
    if values.min() > -1.0 and np.mean(values < 1.0) >= 0.9:
        return LINEAR
    if np.mean(values < 0) >= 0.8:
        return DECIBELS
    return None


def unit_scale(unit: str | None) -> str | None:
    """The scale a unit string states (GDAL's band unit, STAC raster:bands `unit`): dB, linear, or None."""
    key = (unit or "").strip().lower().replace(" ", "")
    if key in ("db", "decibel", "decibels"):
        return DECIBELS
    if key in ("linear", "power", "linearpower", "1", "m2/m2", "m^2/m^2", "amplitude^2"):
        return LINEAR
    return None


def product_date(name: str) -> dt.date | None:
    """The sensing date in a Sentinel-1 product name (its start of sensing); None for another name."""
    match = PRODUCT_NAME.search(name)
    return dt.datetime.strptime(match.group(4).upper(), "%Y%m%dT%H%M%S").date() if match else None


def product_platform(name: str) -> str | None:
    """`sentinel-1a` … of a Sentinel-1 product name; None for another name."""
    match = PRODUCT_NAME.search(name)
    return f"sentinel-1{match.group(1)[-1].lower()}" if match else None


SPEC = SensorSpec(
    name=SENTINEL1,
    title="Sentinel-1 C-SAR",
    platforms=(("sentinel-1a", _C_SAR), ("sentinel-1b", _C_SAR), ("sentinel-1c", _C_SAR), ("sentinel-1d", _C_SAR)),
    default_bands=("VV", "VH"),
    file_bands=((FILE_BAND, "{0}"),),
    file_priority=15,
    layers=(
        (re.compile(r"(?:^|[_\-.])(?:ls|layover|shadow)(?:[_\-.]|$)", re.IGNORECASE), "layover/shadow mask"),
        (re.compile(r"(?:^|[_\-.])(?:lia|incidence|inc_angle)(?:[_\-.]|$)", re.IGNORECASE), "incidence angle"),
    ),
    assets=ASSETS,
)
