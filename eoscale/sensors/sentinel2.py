"""Sentinel-2A/B/C MSI: band tables, file names (`T32ULB_…_B8A_20m.jp2`, `B04.tif`), Earth Search's asset keys, the
SCL mask, and the L2A reflectance scale of a product that states none (by processing baseline)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from eoscale.bands import SENTINEL2_L2A, Band
from eoscale.sensors.registry import SENTINEL2, Linear, MaskRule, SensorSpec


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

# Sentinel-2 file names: T32ULB_20240612T103031_B8A_20m.jp2, scene_B04.tif, B02.jp2
FILE_BAND = re.compile(r"(?:^|[_\-.])(B(?:0?[1-9]|1[0-2]|8A))(?:[_\-.]|$)", re.IGNORECASE)
SCL_FILE = re.compile(r"(?:^|[_\-.])SCL(?:[_\-.]|$)", re.IGNORECASE)
# Earth Search's asset keys of Sentinel-2 bands (Planetary Computer's keys are the band names themselves)
ASSETS = {"coastal": "B01", "blue": "B02", "green": "B03", "red": "B04", "rededge1": "B05",
          "rededge2": "B06", "rededge3": "B07", "nir": "B08", "nir08": "B8A", "nir09": "B09",
          "cirrus": "B10", "swir16": "B11", "swir22": "B12"}
# SCL classes (ESA L2A product specification) that make a pixel nodata: 0 no data, 1 saturated or defective,
# 3 cloud shadows, 8 cloud medium probability, 9 cloud high probability, 10 thin cirrus
SCL_NODATA_CLASSES = (0, 1, 3, 8, 9, 10)
OFFSET_BASELINE = (4, 0)  # the first processing baseline whose DNs carry BOA_ADD_OFFSET (-1000)
REFLECTANCE_QUANTIFICATION = 10_000  # L2A's BOA_QUANTIFICATION_VALUE


def baseline_linear(properties: Mapping) -> Linear | None:
    """DN -> reflectance of an L2A product that states no scale/offset, by its `s2:processing_baseline` (the offset
    from 04.00, as the Planetary Computer's Items need); None without a baseline."""
    baseline = properties.get("s2:processing_baseline")
    if not baseline:
        return None
    later = tuple(int(p) for p in str(baseline).split(".")[:2]) >= OFFSET_BASELINE
    return 1 / REFLECTANCE_QUANTIFICATION, (-0.1 if later else 0.0), f"s2:processing_baseline {baseline}"


def is_scl_file(stem: str) -> bool:
    """Whether a file name names a Sentinel-2 scene classification layer (`…_SCL_20m`, `SCL`)."""
    return bool(SCL_FILE.search(stem))


SPEC = SensorSpec(
    name=SENTINEL2,
    title="Sentinel-2 MSI",
    platforms=(("sentinel-2a", _S2A), ("sentinel-2b", _S2B), ("sentinel-2c", _S2C)),
    default_bands=tuple(b.name for b in SENTINEL2_L2A),
    file_bands=((FILE_BAND, "{0}"),),
    file_priority=20,
    layers=(
        (SCL_FILE, "Sentinel-2 scene classification (SCL)"),
        (re.compile(r"MSK_CLDPRB|CLDPRB|CLD_?PROB", re.IGNORECASE), "cloud probability, not used as the mask"),
        (re.compile(r"cloud[_\-]?mask|(?:^|[_\-.])CLM(?:[_\-.]|$)|MSK_CLOUDS|MSK_CLASSI", re.IGNORECASE),
         "cloud mask, not used as the mask"),
        (re.compile(r"MSK_SNWPRB|SNW_?PROB", re.IGNORECASE), "snow probability, not used as the mask"),
        (re.compile(r"(?:^|[_\-.])(?:TCI|visual)(?:[_\-.]|$)", re.IGNORECASE), "true-colour preview"),
        (re.compile(r"(?:^|[_\-.])AOT(?:[_\-.]|$)", re.IGNORECASE), "aerosol optical thickness"),
        (re.compile(r"(?:^|[_\-.])WVP(?:[_\-.]|$)", re.IGNORECASE), "water vapour"),
    ),
    assets=ASSETS,
    mask=MaskRule("SCL", classes=SCL_NODATA_CLASSES, file_pattern=SCL_FILE, asset="scl"),
    default_linear=baseline_linear,
    linear_property="s2:processing_baseline",
    band_folder_needs_item=True,
)
