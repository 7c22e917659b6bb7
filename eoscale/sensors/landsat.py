"""Landsat 8 OLI and Landsat 9 OLI-2 (Collection 2 Level-2): band table, file names (`…_SR_B5.TIF`), USGS's asset keys,
the QA_PIXEL mask and the C2 L2 surface reflectance scale."""

from __future__ import annotations

import re
from collections.abc import Mapping

from eoscale.bands import Band
from eoscale.sensors.registry import LANDSAT_OLI, Linear, MaskRule, SensorSpec

# Landsat 8 OLI and Landsat 9 OLI-2 (USGS Landsat 8/9 data users handbooks; band centres agree within 1 nm), 30 m
_OLI = tuple(Band(*v) for v in (
    ("SR_B1", 443.0, 20.0, 30.0, "coastal aerosol"), ("SR_B2", 482.0, 60.0, 30.0, "blue"),
    ("SR_B3", 561.4, 57.0, 30.0, "green"), ("SR_B4", 654.6, 37.0, 30.0, "red"),
    ("SR_B5", 864.6, 28.0, 30.0, "near infrared"), ("SR_B6", 1608.9, 85.0, 30.0, "short-wave infrared 1"),
    ("SR_B7", 2200.7, 187.0, 30.0, "short-wave infrared 2"),
))
# Landsat Collection 2 Level-2 file names: LC09_L2SP_196025_20230612_20230614_02_T1_SR_B5.TIF
FILE_BAND = re.compile(r"(?:^|[_\-.])SR_B([1-7])(?:[_\-.]|$)", re.IGNORECASE)
# other Landsat layers (surface temperature ST_B10, QA bands): never Sentinel-2 bands
NOT_BANDS = re.compile(r"(?:^|[_\-.])(?:ST|SR|QA)_", re.IGNORECASE)
QA_PIXEL_FILE = re.compile(r"_QA_PIXEL$", re.IGNORECASE)
# USGS's asset keys of the SR bands
ASSETS = {"coastal": "SR_B1", "blue": "SR_B2", "green": "SR_B3", "red": "SR_B4", "nir08": "SR_B5",
          "swir16": "SR_B6", "swir22": "SR_B7"}
C2_MULT, C2_ADD = 2.75e-5, -0.2  # USGS Landsat Collection 2 Level-2 surface reflectance scale factors
QA_NODATA_BITS = 0b111111  # QA_PIXEL bits 0-5: fill, dilated cloud, cirrus, cloud, cloud shadow, snow


def c2_linear(properties: Mapping) -> Linear:
    """DN -> reflectance of a C2 L2 product that states none: the Collection 2 constants."""
    return C2_MULT, C2_ADD, "Collection 2 Level-2 constants"


SPEC = SensorSpec(
    name=LANDSAT_OLI,
    title="Landsat 8/9 OLI",
    platforms=(("landsat-8", _OLI), ("landsat-9", _OLI)),
    default_bands=tuple(b.name for b in _OLI),
    file_bands=((FILE_BAND, "SR_B{0}"),),
    not_bands=(NOT_BANDS,),
    file_priority=10,
    layers=(
        (re.compile(r"(?:^|[_\-.])ST_", re.IGNORECASE), "Landsat surface temperature layer"),
        (re.compile(r"QA_RADSAT|SR_QA_AEROSOL|(?:^|[_\-.])QA(?:[_\-.]|$)", re.IGNORECASE), "quality flags"),
    ),
    assets=ASSETS,
    mask=MaskRule("QA_PIXEL", bits=QA_NODATA_BITS, file_pattern=QA_PIXEL_FILE, asset="qa_pixel", required=True,
                  missing="QA_PIXEL file (…_QA_PIXEL.TIF): eoscale masks fill, clouds, shadows and snow with it; copy "
                          "it from the product beside the SR bands"),
    default_linear=c2_linear,
)
