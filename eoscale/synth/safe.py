"""A synthetic scene written as a Sentinel-2 L2A SAFE product (`eoscale synth --layout safe`), with known contents.

The layout is the real one, cut down to what ingest reads:

    S2A_MSIL2A_<sensing>_N<baseline>_R108_T32ULB_<sensing>.SAFE/
        MTD_MSIL2A.xml                       processing baseline, BOA_QUANTIFICATION_VALUE, BOA_ADD_OFFSET (>= 04.00)
        GRANULE/L2A_T32ULB_A036000_<sensing>/IMG_DATA/
            R10m/T32ULB_<sensing>_B02_10m.jp2 …  B02 B03 B04 B08, and AOT, WVP, TCI (not bands)
            R20m/T32ULB_<sensing>_B05_20m.jp2 …  B02 B03 B04 (again, coarser) B05 B06 B07 B8A B11 B12, SCL, AOT, WVP

Band files are lossless JPEG 2000 (GDAL's JP2OpenJPEG, georeferenced by GeoJP2/GMLJP2 boxes). A pixel's digital
number is its reflectance × 10,000, plus 1,000 from processing baseline 04.00 (BOA_ADD_OFFSET = -1000, as ESA's
products since January 2022), so one scene written under baselines 03.xx and 05.xx holds the same reflectance. The
SCL layer says: 9 (cloud high probability) where the rendered scene has nodata (clouds, swath edge); 8 (cloud medium
probability) over `CLOUD_BOX`, where the bands hold bright cloud tops that only the SCL marks; elsewhere water (6),
vegetation (4) or not vegetated (5) by NDVI.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine

from eoscale.bands import NODATA, SENTINEL2_L2A
from eoscale.errors import InputError
from eoscale.sensors import SENSORS, SENTINEL2
from eoscale.synth.render import upsample
from eoscale.synth.scene import SCENE_CRS, coarse_transform

JP2_PROFILE = {"driver": "JP2OpenJPEG", "QUALITY": 100, "REVERSIBLE": "YES", "YCBCR420": "NO"}
TILE = "T32ULB"
OFFSET = 1000  # added to every valid DN from baseline 04.00 (BOA_ADD_OFFSET = -1000)
CLOUD_DN = 5500  # a cloud top's reflectance × 10,000
# (rows, columns) of the 20 m grid, as fractions of the scene: cloud tops the SCL marks as class 8
CLOUD_BOX = ((0.0, 0.25), (0.5, 0.75))
_RESOLUTION_OF = {b.name: int(b.resolution_m) for b in SENTINEL2_L2A}


def check_baseline(text: str) -> tuple[int, int]:
    """'05.10' -> (5, 10); anything else is an InputError."""
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() and len(p) == 2 for p in parts):
        raise InputError(f"baseline={text!r}: give a processing baseline as NN.NN, e.g. 03.01 or 05.10")
    return int(parts[0]), int(parts[1])


def product_name(index: int, baseline: str, *, sensing: str | None = None, tile: str = TILE) -> str:
    sensing = sensing or sensing_time(index)
    return f"S2A_MSIL2A_{sensing}_N{baseline.replace('.', '')}_R108_{tile}_{sensing}.SAFE"


def sensing_time(index: int) -> str:
    return (dt.datetime(2024, 6, 1, 10, 30, 31) + dt.timedelta(days=5 * index)).strftime("%Y%m%dT%H%M%S")


def baseline_offset(baseline: str) -> int:
    """What a product of `baseline` adds to every valid DN: `OFFSET` from 04.00, else 0."""
    return OFFSET if check_baseline(baseline) >= (4, 0) else 0


def write_safe(root: Path, index: int, bands: list[np.ndarray], transform: Affine, *, baseline: str,
               sensing: str | None = None, tile: str = TILE, cloud: np.ndarray | None = None) -> dict:
    """Write scene `index` (`bands`: `render_scene`'s uint16 reflectance at each band's resolution) as a SAFE product
    under `root`; returns {"product": its folder, "bands": {band: finest file}} relative to `root`. A season's scenes
    (`eoscale.synth.season`) give their own `sensing` time, MGRS `tile` and `cloud` tops (20 m; default `CLOUD_BOX`)."""
    offset = baseline_offset(baseline)
    sensing = sensing or sensing_time(index)
    name = product_name(index, baseline, sensing=sensing, tile=tile)
    granule = Path(name) / "GRANULE" / f"L2A_{tile}_A036000_{sensing}" / "IMG_DATA"
    by_name = {b.name: image for b, image in zip(SENTINEL2_L2A, bands, strict=True)}
    fine = by_name["B02"].shape
    coarse = by_name["B05"].shape
    cloud = cloud_tops(by_name) if cloud is None else cloud & (by_name["B05"] != NODATA)
    files: dict[str, str] = {}
    written: list[str] = []
    for resolution, names in ((10, ("B02", "B03", "B04", "B08")),
                              (20, ("B02", "B03", "B04", "B05", "B06", "B07", "B8A", "B11", "B12"))):
        folder = granule / f"R{resolution}m"
        grid = transform if resolution == 10 else coarse_transform(transform)
        for band in names:
            image = by_name[band]
            if _RESOLUTION_OF[band] < resolution:
                image = image[::2, ::2]  # a 10 m band's 20 m copy, as L2A products carry them
            path = folder / f"{tile}_{sensing}_{band}_{resolution}m.jp2"
            _write(root / path, digital_numbers(image, cloud, offset)[None], grid)
            files.setdefault(band, str(path))
            written.append(str(path))
        shape = fine if resolution == 10 else coarse
        for layer, value in (("AOT", 120), ("WVP", 1500)):  # aerosol optical thickness, water vapour: not bands
            _write(root / folder / f"{tile}_{sensing}_{layer}_{resolution}m.jp2", np.full((1, *shape), value, np.uint16), grid)
    tci = np.stack([np.clip(by_name[b] // 12, 0, 255).astype(np.uint8) for b in ("B04", "B03", "B02")])
    _write(root / granule / "R10m" / f"{tile}_{sensing}_TCI_10m.jp2", tci, transform)
    scl = scene_classes(by_name, cloud)
    _write(root / granule / "R20m" / f"{tile}_{sensing}_SCL_20m.jp2", scl[None], coarse_transform(transform))
    (root / name / "MTD_MSIL2A.xml").write_bytes(_metadata(baseline, sensing, offset != 0, written))
    return {"product": name, "bands": {b.name: files[b.name] for b in SENTINEL2_L2A}}


def cloud_tops(by_name: dict[str, np.ndarray]) -> np.ndarray:
    """Where (on the 20 m grid) the scene holds the cloud tops only the SCL marks: `CLOUD_BOX`, where it has data."""
    coarse = by_name["B05"].shape
    (r0, r1), (c0, c1) = CLOUD_BOX
    cloud = np.zeros(coarse, bool)
    cloud[int(r0 * coarse[0]): int(r1 * coarse[0]), int(c0 * coarse[1]): int(c1 * coarse[1])] = True
    return cloud & (by_name["B05"] != NODATA)


def digital_numbers(image: np.ndarray, cloud: np.ndarray, offset: int) -> np.ndarray:
    """A band's digital numbers at its resolution (10 or 20 m): cloud tops over `cloud` (20 m, repeated onto a 10 m
    band), `offset` added to every valid pixel, 0 (NO_DATA) kept."""
    mask = cloud if image.shape == cloud.shape else upsample(cloud, image.shape)
    out = np.where(mask, np.uint16(CLOUD_DN), image)
    return np.where(out == NODATA, NODATA, out + offset).astype(np.uint16)


def scene_classes(by_name: dict[str, np.ndarray], cloud: np.ndarray) -> np.ndarray:
    red, nir = by_name["B04"][::2, ::2].astype(np.float32), by_name["B8A"].astype(np.float32)
    ndvi = (nir - red) / np.maximum(nir + red, 1)
    scl = np.where(nir < red, 6, np.where(ndvi > 0.3, 4, 5)).astype(np.uint8)
    scl[by_name["B05"] == NODATA] = 9
    scl[cloud] = 8
    return scl


def _write(path: Path, pixels: np.ndarray, transform: Affine) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", **JP2_PROFILE, width=pixels.shape[2], height=pixels.shape[1], count=pixels.shape[0],
                       dtype=pixels.dtype, crs=SCENE_CRS, transform=transform) as dst:
        dst.write(pixels)


def _metadata(baseline: str, sensing: str, with_offsets: bool, band_files: list[str]) -> bytes:
    """MTD_MSIL2A.xml as the L2A product specification (PSD 14.9) lays it out, cut to what readers use."""
    ns = "https://psd-14.sentinel2.eo.esa.int/PSD/User_Product_Level-2A.xsd"
    ET.register_namespace("n1", ns)
    root = ET.Element(f"{{{ns}}}Level-2A_User_Product")
    general = ET.SubElement(root, f"{{{ns}}}General_Info")
    info = ET.SubElement(general, "Product_Info")
    when = dt.datetime.strptime(sensing, "%Y%m%dT%H%M%S").isoformat() + ".024Z"
    for tag, text in (("PRODUCT_START_TIME", when), ("PRODUCT_STOP_TIME", when), ("PRODUCT_TYPE", "S2MSI2A"),
                      ("PROCESSING_LEVEL", "Level-2A"), ("PROCESSING_BASELINE", baseline)):
        ET.SubElement(info, tag).text = text
    datatake = ET.SubElement(info, "Datatake", datatakeIdentifier=f"GS2A_{sensing}_036000_N{baseline.replace('.', '')}")
    ET.SubElement(datatake, "SPACECRAFT_NAME").text = "Sentinel-2A"
    ET.SubElement(datatake, "DATATAKE_TYPE").text = "INS-NOBS"
    granules = ET.SubElement(ET.SubElement(ET.SubElement(info, "Product_Organisation"), "Granule_List"), "Granule",
                             imageFormat="JPEG2000")
    for path in band_files:
        ET.SubElement(granules, "IMAGE_FILE").text = str(Path(*Path(path).parts[1:]).with_suffix(""))
    characteristics = ET.SubElement(general, "Product_Image_Characteristics")
    for text, value in (("NODATA", 0), ("SATURATED", 65535)):
        special = ET.SubElement(characteristics, "Special_Values")
        ET.SubElement(special, "SPECIAL_VALUE_TEXT").text = text
        ET.SubElement(special, "SPECIAL_VALUE_INDEX").text = str(value)
    quantification = ET.SubElement(characteristics, "QUANTIFICATION_VALUES_LIST")
    ET.SubElement(quantification, "BOA_QUANTIFICATION_VALUE", unit="none").text = "10000"
    ET.SubElement(quantification, "AOT_QUANTIFICATION_VALUE", unit="none").text = "1000.0"
    ET.SubElement(quantification, "WVP_QUANTIFICATION_VALUE", unit="cm").text = "1000.0"
    if with_offsets:
        offsets = ET.SubElement(characteristics, "BOA_ADD_OFFSET_VALUES_LIST")
        for band_id in range(len(SENSORS[SENTINEL2].band_names)):
            ET.SubElement(offsets, "BOA_ADD_OFFSET", band_id=str(band_id)).text = str(-OFFSET)
    classes = ET.SubElement(characteristics, "Scene_Classification_List")
    for index, text in enumerate(("SC_NODATA", "SC_SATURATED_DEFECTIVE", "SC_DARK_FEATURE_SHADOW", "SC_CLOUD_SHADOW",
                                  "SC_VEGETATION", "SC_NOT_VEGETATED", "SC_WATER", "SC_UNCLASSIFIED",
                                  "SC_CLOUD_MEDIUM_PROBA", "SC_CLOUD_HIGH_PROBA", "SC_THIN_CIRRUS", "SC_SNOW_ICE")):
        entry = ET.SubElement(classes, "Scene_Classification_ID")
        ET.SubElement(entry, "SCENE_CLASSIFICATION_TEXT").text = text
        ET.SubElement(entry, "SCENE_CLASSIFICATION_INDEX").text = str(index)
    ET.indent(root)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)
