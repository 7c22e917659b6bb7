"""Landsat 8/9 Collection 2 Level-2 scene folders: surface reflectance on eoscale's scale, QA_PIXEL as the mask.

A C2 L2 folder (as USGS ships it) holds `…_SR_B1.TIF`…`…_SR_B7.TIF` (uint16 digital numbers, 0 = fill),
`…_QA_PIXEL.TIF` and `…_MTL.txt` (and `…_MTL.xml`, read when the text form is absent). Reflectance = DN × REFLECTANCE_MULT_BAND_n + REFLECTANCE_ADD_BAND_n, read from the
MTL's LEVEL2_SURFACE_REFLECTANCE_PARAMETERS group (2.75e-5 and -0.2 for every C2 L2 product, which is what a folder
without an MTL gets: only Collection 2 names its files SR_Bn); eoscale's scale is reflectance × 10,000, so Landsat
and Sentinel-2 stores hold the same physical quantity. QA_PIXEL's bits 0-5 (fill, dilated cloud, cirrus, cloud,
cloud shadow, snow) make a pixel nodata. The scene's date is the MTL's DATE_ACQUIRED. A folder is taken for one when a
file in it is named as a Landsat SR band (`eoscale.sensors.landsat`); the rest of its reading is a band folder's.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from eoscale.bands import REFLECTANCE_SCALE
from eoscale.errors import InputError
from eoscale.raster.formats.band_folder import folder_scene, open_band_folder, read_band_folder
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.scene import RASTER_SUFFIXES, BandFile, ClassMask, Scene, parse_date
from eoscale.sensors import LANDSAT_OLI
from eoscale.sensors.landsat import C2_ADD, C2_MULT, QA_NODATA_BITS
from eoscale.sensors.landsat import SPEC as LANDSAT

_DATE = re.compile(r"^\s*DATE_ACQUIRED\s*=\s*\"?([0-9-]+)", re.MULTILINE)
_GROUP = re.compile(r"GROUP = LEVEL2_SURFACE_REFLECTANCE_PARAMETERS(.*?)END_GROUP = LEVEL2_SURFACE_REFLECTANCE_PARAMETERS",
                    re.DOTALL)
_FACTOR = re.compile(r"REFLECTANCE_(MULT|ADD)_BAND_(\d+)\s*=\s*\"?([-+0-9.Ee]+)")


def _factors(mtl: Path) -> dict[tuple[str, int], float]:
    if mtl.suffix.lower() == ".xml":
        return _xml_factors(mtl)
    group = _GROUP.search(mtl.read_text(errors="replace"))
    if not group:
        raise InputError(f"{str(mtl)!r} has no LEVEL2_SURFACE_REFLECTANCE_PARAMETERS group: it is not a Collection 2 "
                         f"Level-2 MTL; download the scene again")
    return {(kind, int(band)): float(value) for kind, band, value in _FACTOR.findall(group.group(1))}


def _xml_factors(mtl: Path) -> dict[tuple[str, int], float]:
    """The factors of an MTL's XML form (`<LEVEL2_SURFACE_REFLECTANCE_PARAMETERS><REFLECTANCE_MULT_BAND_1>…`)."""
    try:
        group = ET.parse(mtl).getroot().find("LEVEL2_SURFACE_REFLECTANCE_PARAMETERS")
    except ET.ParseError as err:
        raise InputError(f"{str(mtl)!r} is not readable XML ({err}): download the scene again") from None
    if group is None:
        raise InputError(f"{str(mtl)!r} has no LEVEL2_SURFACE_REFLECTANCE_PARAMETERS group: it is not a Collection 2 "
                         f"Level-2 MTL; download the scene again")
    return {(kind, int(band)): float(value) for kind, band, value in _FACTOR.findall(
        "\n".join(f"{e.tag} = {e.text}" for e in group))}


def calibrate(folder: str, bands: list[BandFile], skipped: list[str]) -> tuple[list[BandFile], dict, ClassMask, list[str]]:
    """The folder's bands mapped onto the store's scale, what was done, the QA_PIXEL mask, and the files used
    (QA_PIXEL, the MTL) that are no longer skipped."""
    qa = [p for p in skipped if Path(p).stem.upper().endswith("_QA_PIXEL")]
    if not qa:
        raise InputError(f"Landsat scene folder {folder!r} has no QA_PIXEL file (…_QA_PIXEL.TIF): eoscale masks fill, "
                         f"clouds, shadows and snow with it; copy it from the product beside the SR bands")
    mtl = sorted(Path(folder).glob("*_MTL.txt")) or sorted(Path(folder).glob("*_MTL.xml"))  # the ODL text, else XML
    factors = _factors(mtl[0]) if mtl else {}
    calibrated, record = [], {}
    for band in bands:
        n = int(band.name.removeprefix("SR_B"))
        mult, add = factors.get(("MULT", n), C2_MULT), factors.get(("ADD", n), C2_ADD)
        calibrated.append(replace(band, scale=mult * REFLECTANCE_SCALE, offset=add * REFLECTANCE_SCALE))
        record[band.name] = {"mult": mult, "add": add}
    radiometry = {
        "product": "Landsat Collection 2 Level-2",
        "source": str(mtl[0]) if mtl else "Collection 2 Level-2 constants (no MTL file)",
        "reflectance_factors": record,
        "applied": f"store = (DN × REFLECTANCE_MULT + REFLECTANCE_ADD) × {REFLECTANCE_SCALE}, at least 1; DN 0 stays "
                   f"nodata",
    }
    mask = ClassMask("QA_PIXEL", qa[0], (), bits=QA_NODATA_BITS)
    return calibrated, radiometry, mask, [qa[0], *(str(m) for m in mtl[:1])]


def acquired(folder: str) -> dt.date | None:
    """The MTL's DATE_ACQUIRED (its text form, else its XML form); None without an MTL that gives one."""
    for mtl in sorted(Path(folder).glob("*_MTL.txt")):
        match = _DATE.search(mtl.read_text(errors="replace"))
        if match:
            return parse_date(match.group(1))
    for mtl in sorted(Path(folder).glob("*_MTL.xml")):
        try:
            found = [e.text for e in ET.parse(mtl).getroot().iter("DATE_ACQUIRED") if e.text]
        except ET.ParseError:
            continue
        if found:
            return parse_date(found[0])
    return None


def is_landsat_folder(path: str) -> bool:
    """Whether `path` is a folder with a file named as a Landsat SR band (`…_SR_B5.TIF`), or whose bands say they are
    Landsat SR bands by their descriptions only (files renamed by a user): both are calibrated by the MTL."""
    if not os.path.isdir(path):
        return False
    if any(f.suffix.lower() in RASTER_SUFFIXES and LANDSAT.band_in_file_name(f.stem) for f in Path(path).iterdir()):
        return True
    try:
        return read_band_folder(path).sensor.name == LANDSAT_OLI
    except InputError:  # no band in it: not for this format to say
        return False


def open_landsat(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                 scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The Landsat C2 L2 folder at `path` as a scene on the store's scale, QA_PIXEL its mask, dated by its MTL."""
    folder = read_band_folder(path)
    if folder.sensor.name != LANDSAT_OLI:  # its bands are named otherwise by their descriptions: a band folder
        return open_band_folder(path, band_names=band_names, bands=bands, scl_classes=scl_classes)
    calibrated, radiometry, mask, used = calibrate(path, folder.bands, folder.skipped)
    folder.bands = calibrated
    return folder_scene(folder, radiometry=radiometry, class_mask=mask, used=used, date=acquired(path))


FORMAT = ProductFormat("Landsat Collection 2 Level-2 folder", is_landsat_folder, open_landsat)
