"""Sentinel-2 L2A SAFE products as scenes: bands at their finest resolution, one reflectance scale, SCL as the mask.

A SAFE folder (`S2A_MSIL2A_…_N0510_….SAFE`) holds `MTD_MSIL2A.xml` and one granule whose bands lie under
`GRANULE/*/IMG_DATA/R10m|R20m|R60m/` as JPEG 2000 files (`T32ULB_20240612T103031_B8A_20m.jp2`), beside layers that are
not bands (TCI, AOT, WVP, SCL). GDAL reads the JPEG 2000 files (rasterio's JP2OpenJPEG driver); each band is taken
from the finest resolution that holds it, and resampled onto the 10 m grid by `eoscale.raster.reader`.

From processing baseline 04.00 (25 January 2022, and the whole Collection-1 reprocessing) L2A digital numbers carry
an offset: reflectance = (DN + BOA_ADD_OFFSET) / BOA_QUANTIFICATION_VALUE, with BOA_ADD_OFFSET = -1000; before, the
offset was 0. Both are read from `MTD_MSIL2A.xml` (GDAL's SENTINEL2 driver would need the granule metadata as well,
and reports no offsets), and every band's values are mapped onto eoscale's scale (reflectance × 10,000, nodata 0), so
products of either baseline land in a store on one scale; the scene's `radiometry` records what was done.

The scene classification layer (SCL, 20 m) is the mask: its classes in `SCL_NODATA_CLASSES` make a pixel nodata.
The scene's date is the MTD's PRODUCT_START_TIME.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from eoscale.bands import REFLECTANCE_SCALE, normalise_band_name
from eoscale.errors import InputError
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.scene import (
    BandFile,
    ClassMask,
    Scene,
    check_crs,
    check_dtype,
    nodata_of,
    open_raster,
    parse_date,
)
from eoscale.sensors import SENSORS, SENTINEL2, band_in_file_name
from eoscale.sensors.sentinel2 import OFFSET_BASELINE, SCL_NODATA_CLASSES

MTD_FILE = "MTD_MSIL2A.xml"
RESOLUTIONS = (10, 20, 60)  # the IMG_DATA folders, finest first
# SCL_NODATA_CLASSES (the SCL classes that make a pixel nodata) and OFFSET_BASELINE are the sensor's
# (`eoscale.sensors.sentinel2`)
# BOA_ADD_OFFSET's band_id: the index of the band in the MSI's 13 (B8A after B08)
BAND_IDS = {name: i for i, name in enumerate(SENSORS[SENTINEL2].band_names)}


def is_safe(path: str) -> bool:
    """Whether `path` is a Sentinel-2 L2A SAFE folder (its name ends in .SAFE, or it holds MTD_MSIL2A.xml)."""
    p = Path(path)
    if p.suffix.lower() == ".zip" and ".SAFE" in p.name.upper():
        raise InputError(f"{path!r} is a zipped SAFE product: unzip it (unzip {p.name}) and give the .SAFE folder")
    return p.is_dir() and (p.suffix.upper() == ".SAFE" or (p / MTD_FILE).is_file())


def products_in(path: str) -> list[str] | None:
    """The SAFE folders inside folder `path`, sorted (a folder of products), or None when it holds none."""
    if not os.path.isdir(path) or is_safe(path):
        return None
    found = sorted(str(p) for p in Path(path).iterdir() if p.is_dir() and is_safe(str(p)))
    return found or None


def _elements(root: ET.Element, tag: str) -> list[ET.Element]:
    return [e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == tag]


def read_metadata(path: Path) -> dict:
    """Processing baseline, spacecraft, BOA_QUANTIFICATION_VALUE, BOA_ADD_OFFSET per band id and the sensing date
    (PRODUCT_START_TIME) of a product's MTD."""
    if not path.is_file():
        raise InputError(f"SAFE product {str(path.parent)!r} has no {MTD_FILE}: the product is incomplete; "
                         f"download it again")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise InputError(f"{str(path)!r} is not readable XML ({err}): download the product again") from None
    baseline = [e.text.strip() for e in _elements(root, "PROCESSING_BASELINE") if e.text]
    if not baseline:
        raise InputError(f"{str(path)!r} gives no PROCESSING_BASELINE: it is not an L2A product's metadata")
    quantification = [float(e.text) for e in _elements(root, "BOA_QUANTIFICATION_VALUE") + _elements(
        root, "L2A_BOA_QUANTIFICATION_VALUE") if e.text]
    if not quantification or quantification[0] <= 0:
        raise InputError(f"{str(path)!r} gives no BOA_QUANTIFICATION_VALUE: eoscale cannot put its bands on a "
                         f"reflectance scale; download the product again")
    offsets = {int(e.get("band_id", -1)): float(e.text) for e in _elements(root, "BOA_ADD_OFFSET") if e.text}
    spacecraft = [e.text.strip() for e in _elements(root, "SPACECRAFT_NAME") if e.text]
    start = [e.text.strip() for e in _elements(root, "PRODUCT_START_TIME") if e.text]
    return {"processing_baseline": baseline[0], "spacecraft": spacecraft[0] if spacecraft else None,
            "quantification": quantification[0], "offsets": offsets, "date": parse_date(start[0]) if start else None}


def _baseline(text: str, path: Path) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in text.split("."))
    except ValueError:
        raise InputError(f"{str(path)!r} gives PROCESSING_BASELINE {text!r}: expected NN.NN, e.g. 05.10") from None
    return major, minor


def _band_files(product: Path) -> tuple[dict[str, tuple[int, Path]], dict[int, Path]]:
    """The finest file of every band ({band: (resolution, file)}) and the SCL file per resolution, of the one granule."""
    granules = sorted(p for p in (product / "GRANULE").glob("*") if p.is_dir())
    if len(granules) != 1:
        raise InputError(f"SAFE product {str(product)!r} holds {len(granules)} granules under GRANULE/: eoscale reads "
                         f"single-tile L2A products (those since 2016); split the product or download it again")
    bands: dict[str, tuple[int, Path]] = {}
    scl: dict[int, Path] = {}
    for resolution in RESOLUTIONS:
        for f in sorted((granules[0] / "IMG_DATA" / f"R{resolution}m").glob("*")):
            if f.suffix.lower() not in (".jp2", ".tif", ".tiff"):
                continue
            if f.stem.upper().split("_")[-2:-1] == ["SCL"]:
                scl[resolution] = f
                continue
            identity = band_in_file_name(f.stem)
            if identity and identity[0] == SENTINEL2 and identity[1] not in bands:
                bands[identity[1]] = (resolution, f)
    return bands, scl


def open_safe(path: str, *, bands: list[str] | None = None, scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The SAFE product at `path` as a scene of `bands` (default: the sensor's 10 land bands, B02…B12 without B09),
    its SCL classes `scl_classes` (default `SCL_NODATA_CLASSES`) masked."""
    product = Path(path)
    meta = read_metadata(product / MTD_FILE)
    baseline = _baseline(meta["processing_baseline"], product / MTD_FILE)
    files, scl = _band_files(product)
    wanted = list(bands) if bands else list(SENSORS[SENTINEL2].default_bands)
    missing = [b for b in wanted if b not in files]
    if missing:
        raise InputError(f"SAFE product {path!r} has no {', '.join(missing)} band file under GRANULE/*/IMG_DATA/"
                         f"R10m|R20m|R60m: the product is incomplete; download it again (or leave the band out with "
                         f"--bands)")
    if not scl:
        raise InputError(f"SAFE product {path!r} has no SCL file (…_SCL_20m.jp2) under GRANULE/*/IMG_DATA/R20m: "
                         f"eoscale masks clouds with it; download the product again")
    offsets = meta["offsets"]
    if baseline >= OFFSET_BASELINE:
        absent = [b for b in wanted if BAND_IDS[b] not in offsets]
        if absent:
            raise InputError(f"{str(product / MTD_FILE)!r} is of processing baseline {meta['processing_baseline']} but "
                             f"gives no BOA_ADD_OFFSET for {', '.join(absent)}: its values cannot be put on one "
                             f"reflectance scale; download the product again")
    scale = REFLECTANCE_SCALE / meta["quantification"]
    band_files, finest = [], None
    for name in wanted:
        resolution, f = files[name]
        offset = offsets.get(BAND_IDS[name], 0.0)
        band_files.append(BandFile(name, str(f), 1, scale=scale, offset=offset * scale))
        if finest is None or resolution < finest[0]:
            finest = (resolution, f)
    with open_raster(str(finest[1])) as src:
        crs = check_crs(str(finest[1]), src.crs)
        check_dtype(str(finest[1]), src.dtypes)
        grid = (src.transform, src.width, src.height, nodata_of(src))
    scl_file = scl[min(scl)]
    radiometry = {
        "product": "Sentinel-2 L2A SAFE",
        "processing_baseline": meta["processing_baseline"],
        "boa_quantification_value": meta["quantification"],
        "boa_add_offset": {name: offsets.get(BAND_IDS[name], 0.0) for name in wanted},
        "applied": f"store = (DN + BOA_ADD_OFFSET) * {REFLECTANCE_SCALE} / BOA_QUANTIFICATION_VALUE, at least 1; "
                   f"DN 0 stays nodata",
    }
    return Scene(
        id=product.name[: -len(".SAFE")] if product.name.upper().endswith(".SAFE") else product.name,
        bands=tuple(band_files),
        crs=crs,
        transform=grid[0],
        width=grid[1],
        height=grid[2],
        nodata=grid[3],
        paths=tuple(b.path for b in band_files) + (str(scl_file), str(product / MTD_FILE)),
        sensor=SENTINEL2,
        platform=(meta["spacecraft"] or "").lower() or None,
        radiometry=radiometry,
        class_mask=ClassMask("SCL", str(scl_file), SCL_NODATA_CLASSES if scl_classes is None else tuple(scl_classes)),
        date=meta["date"],
    )


def open_product(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                 scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The format's `open`: `open_safe` of the `bands` given (names normalised)."""
    return open_safe(path, bands=[normalise_band_name(b) for b in bands] if bands else None, scl_classes=scl_classes)


FORMAT = ProductFormat("Sentinel-2 L2A SAFE", is_safe, open_product, products_in=products_in)
