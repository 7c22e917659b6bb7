"""A synthetic scene written as a Landsat 9 Collection 2 Level-2 scene folder (`eoscale synth --layout landsat`).

The folder is laid out as USGS ships a C2 L2 (L2SP) product, cut down to a few files beside the bands:

    LC09_L2SP_196025_<date>_<processed>_02_T1/
        …_SR_B1.TIF … …_SR_B7.TIF     surface reflectance, uint16 DN: reflectance = DN × 2.75e-5 - 0.2, 0 = fill
        …_QA_PIXEL.TIF                 bit flags: 0 fill, 1 dilated cloud, 2 cirrus, 3 cloud, 4 shadow, 5 snow, 6 clear,
                                       7 water, 8-15 confidences (cloud, shadow, snow, cirrus; 2 bits each)
        …_QA_RADSAT.TIF …_SR_QA_AEROSOL.TIF …_ST_B10.TIF   other layers, not bands
        …_MTL.txt …_MTL.xml            the metadata (REFLECTANCE_MULT_BAND_n / REFLECTANCE_ADD_BAND_n), ODL and XML
        …_ANG.txt …_thumb_small.jpeg   angle coefficients, a preview
        …_SR_stac.json                 the scene's STAC Item (`eoscale.synth.stac`)

The 30 m bands are 3 × 3 means of the rendered 10 m scene (the last rows and columns that fill no 30 m pixel are
left out), each from the Sentinel-2 band that OLI's band matches (the pairing of NASA's Harmonized Landsat
Sentinel-2 product): SR_B2 from B02, SR_B3 B03, SR_B4 B04, SR_B5 B8A, SR_B6 B11, SR_B7 B12; the coastal SR_B1 from B02,
as synth renders no B01. Where the rendered scene has nodata (its clouds, a swath edge) the bands hold bright cloud
tops and QA_PIXEL says cloud; around them a one-pixel ring is dilated cloud, up-left of them cloud shadow (darkened),
and `CIRRUS_BOX` / `SNOW_BOX` hold thin cirrus and snow; a corner triangle beyond the (tilted) WRS-2 footprint is
fill. So every QA_PIXEL flag eoscale masks (bits 0-5) is present with known pixels.
"""

from __future__ import annotations

import datetime as dt
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.errors import NotGeoreferencedWarning
from scipy import ndimage

from eoscale.bands import NODATA, REFLECTANCE_SCALE, SENTINEL2_L2A
from eoscale.synth.render import upsample
from eoscale.synth.scene import GTIFF_PROFILE, SCENE_CRS

FACTOR = 3  # 30 m pixels of the 10 m rendering
MULT, ADD = 2.75e-5, -0.2  # Collection 2 Level-2 surface reflectance scale factors
SOURCE_BAND = {"SR_B1": "B02", "SR_B2": "B02", "SR_B3": "B03", "SR_B4": "B04", "SR_B5": "B8A", "SR_B6": "B11",
               "SR_B7": "B12"}
# reflectance of cloud tops and of snow in SR_B1…SR_B7
CLOUD = (0.55, 0.55, 0.55, 0.55, 0.55, 0.40, 0.30)
SNOW = (0.85, 0.85, 0.84, 0.80, 0.72, 0.10, 0.08)
CIRRUS_ADD = 0.04  # thin cirrus brightens the surface a little
SHADOW = 0.4  # a cloud shadow leaves the diffuse light
SHADOW_SHIFT = 2  # pixels up and left of the cloud (morning overpass, sun in the south-east)
# (rows, columns) as fractions of the scene
CIRRUS_BOX = ((0.55, 0.75), (0.05, 0.35))
SNOW_BOX = ((0.80, 0.95), (0.70, 0.90))
FILL_CORNER = 0.2  # the top-left triangle of rows + columns below this share of (height + width) is fill

# QA_PIXEL bits (USGS Landsat 8-9 C2 L2 product guide, LSDS-1619) and 2-bit confidences (1 low, 3 high)
FILL, DILATED, CIRRUS, CLOUD_BIT, SHADOW_BIT, SNOW_BIT, CLEAR, WATER = (1 << i for i in range(8))


def _confidence(cloud: int = 1, shadow: int = 1, snow: int = 1, cirrus: int = 1) -> int:
    return (cloud << 8) | (shadow << 10) | (snow << 12) | (cirrus << 14)


QA_CLEAR = CLEAR | _confidence()  # 21824, USGS's value for clear land with low confidences
QA_VALUES = {
    "fill": FILL,
    "dilated cloud": DILATED | _confidence(),
    "cirrus": CIRRUS | CLEAR | _confidence(cirrus=3),
    "cloud": CLOUD_BIT | _confidence(cloud=3),
    "cloud shadow": SHADOW_BIT | CLEAR | _confidence(shadow=3),
    "snow": SNOW_BIT | CLEAR | _confidence(snow=3),
}
WATER_CODE = 80  # ESA WorldCover's permanent water bodies


def product_id(index: int) -> str:
    acquired = dt.date(2023, 6, 12) + dt.timedelta(days=16 * index)  # the 16-day repeat cycle
    processed = acquired + dt.timedelta(days=2)
    return f"LC09_L2SP_196025_{acquired:%Y%m%d}_{processed:%Y%m%d}_02_T1"


def _box(shape: tuple[int, int], box: tuple[tuple[float, float], tuple[float, float]]) -> np.ndarray:
    (r0, r1), (c0, c1) = box
    out = np.zeros(shape, bool)
    out[int(r0 * shape[0]): int(r1 * shape[0]), int(c0 * shape[1]): int(c1 * shape[1])] = True
    return out


def _block_mean(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    h, w = shape
    cut = image[: h * FACTOR, : w * FACTOR].astype(np.float32)
    return cut.reshape(h, FACTOR, w, FACTOR).mean(axis=(1, 3))


def landsat_layers(bands: list[np.ndarray], classes: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The 30 m SR_B1…SR_B7 digital numbers and QA_PIXEL of a rendered scene (`render_scene`'s bands at 10/20 m and
    the land-cover codes at 10 m)."""
    fine = bands[0].shape
    shape = (fine[0] // FACTOR, fine[1] // FACTOR)
    by_name = {b.name: image if image.shape == fine else upsample(image, fine)
               for b, image in zip(SENTINEL2_L2A, bands, strict=True)}
    cloud = _block_mean(by_name["B02"] == NODATA, shape) > 0  # any rendered nodata under a 30 m pixel
    rows, cols = np.indices(shape)
    fill = rows + cols < FILL_CORNER * (shape[0] + shape[1])
    cloud &= ~fill
    dilated = ndimage.binary_dilation(cloud) & ~cloud & ~fill
    shadow = np.zeros(shape, bool)
    s = SHADOW_SHIFT
    shadow[: shape[0] - s, : shape[1] - s] = cloud[s:, s:]
    shadow &= ~cloud & ~dilated & ~fill
    clear = ~(fill | cloud | dilated | shadow)
    cirrus = _box(shape, CIRRUS_BOX) & clear
    snow = _box(shape, SNOW_BOX) & clear & ~cirrus
    water = (classes[: shape[0] * FACTOR: FACTOR, : shape[1] * FACTOR: FACTOR] == WATER_CODE)
    qa = np.full(shape, QA_CLEAR, np.uint16)
    qa[water & clear] |= WATER
    for name, where in (("dilated cloud", dilated), ("cloud shadow", shadow), ("cirrus", cirrus), ("snow", snow),
                        ("cloud", cloud), ("fill", fill)):
        qa[where] = QA_VALUES[name]
    out = {}
    for i, (name, source) in enumerate(SOURCE_BAND.items()):
        reflectance = _block_mean(by_name[source], shape) / REFLECTANCE_SCALE
        reflectance[shadow] *= SHADOW
        reflectance[cirrus] += CIRRUS_ADD
        reflectance[snow] = SNOW[i]
        reflectance[cloud] = CLOUD[i]
        dn = np.rint((reflectance - ADD) / MULT).clip(1, 65535).astype(np.uint16)
        dn[fill] = 0
        out[name] = dn
    return out, qa


def write_landsat(root: Path, index: int, bands: list[np.ndarray], classes: np.ndarray, transform: Affine) -> dict:
    """Write scene `index` as a C2 L2 folder under `root`; returns {"folder", "bands": {band: file}, "item"} relative
    to `root` (`transform` is the scene's 10 m grid; the folder's is 30 m from the same origin)."""
    from eoscale.synth.stac import write_landsat_item

    name = product_id(index)
    folder = root / name
    folder.mkdir(parents=True)
    sr, qa = landsat_layers(bands, classes)
    grid = transform @ Affine.scale(FACTOR)
    files = {}
    for band, dn in sr.items():
        files[band] = f"{name}/{name}_{band}.TIF"
        _write(root / files[band], dn, grid, nodata=0)
    _write(folder / f"{name}_QA_PIXEL.TIF", qa, grid, nodata=FILL)
    fill = qa == FILL
    surface_temperature = np.where(fill, 0, np.rint((293.0 - 149.0) / 0.00341802)).astype(np.uint16)
    _write(folder / f"{name}_ST_B10.TIF", surface_temperature, grid, nodata=0)
    _write(folder / f"{name}_QA_RADSAT.TIF", np.where(fill, 1, 0).astype(np.uint16), grid, nodata=None)
    _write(folder / f"{name}_SR_QA_AEROSOL.TIF", np.where(fill, 1, 224).astype(np.uint8), grid, nodata=1)
    preview = np.stack([np.clip(sr[b] // 160, 0, 255).astype(np.uint8) for b in ("SR_B4", "SR_B3", "SR_B2")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)  # a thumbnail has no grid, as USGS's
        with rasterio.open(folder / f"{name}_thumb_small.jpeg", "w", driver="JPEG", width=preview.shape[2],
                           height=preview.shape[1], count=3, dtype="uint8") as dst:
            dst.write(preview)
    metadata = _metadata(name, index, qa)
    (folder / f"{name}_MTL.txt").write_text(_odl(metadata))
    (folder / f"{name}_MTL.xml").write_bytes(_xml(metadata))
    (folder / f"{name}_ANG.txt").write_text("GROUP = FILE_HEADER\n  LANDSAT_SCENE_ID = \"LC91960252023163LGN00\"\n"
                                            "  SPACECRAFT_ID = \"LANDSAT_9\"\nEND_GROUP = FILE_HEADER\nEND\n")
    item = write_landsat_item(folder, name, metadata)
    return {"folder": name, "bands": files, "item": str(item.relative_to(root))}


def _write(path: Path, pixels: np.ndarray, transform: Affine, *, nodata: float | None) -> None:
    with rasterio.open(path, "w", **GTIFF_PROFILE, width=pixels.shape[1], height=pixels.shape[0], count=1,
                       dtype=pixels.dtype, crs=SCENE_CRS, transform=transform, nodata=nodata) as dst:
        dst.write(pixels, 1)


def _metadata(name: str, index: int, qa: np.ndarray) -> dict:
    """The MTL's groups (as nested dicts, in USGS's order), cut to what readers use."""
    acquired = dt.datetime.strptime(name.split("_")[3], "%Y%m%d").date()
    cloudy = (qa & (CLOUD_BIT | DILATED)) != 0
    cover = 100.0 * float(cloudy.sum()) / max(int((qa != FILL).sum()), 1)
    contents = {"ORIGIN": "Image courtesy of the U.S. Geological Survey (synthetic: eoscale synth)",
                "LANDSAT_PRODUCT_ID": name, "PROCESSING_LEVEL": "L2SP", "COLLECTION_NUMBER": 2,
                "COLLECTION_CATEGORY": "T1", "OUTPUT_FORMAT": "GEOTIFF"}
    contents.update({f"FILE_NAME_BAND_{n}": f"{name}_SR_B{n}.TIF" for n in range(1, 8)})
    contents.update({"FILE_NAME_BAND_ST_B10": f"{name}_ST_B10.TIF", "FILE_NAME_QUALITY_L1_PIXEL": f"{name}_QA_PIXEL.TIF",
                     "FILE_NAME_QUALITY_L1_RADIOMETRIC_SATURATION": f"{name}_QA_RADSAT.TIF",
                     "FILE_NAME_QUALITY_L2_AEROSOL": f"{name}_SR_QA_AEROSOL.TIF",
                     "FILE_NAME_ANGLE_COEFFICIENT": f"{name}_ANG.txt", "FILE_NAME_METADATA_ODL": f"{name}_MTL.txt",
                     "FILE_NAME_METADATA_XML": f"{name}_MTL.xml"})
    image = {"SPACECRAFT_ID": "LANDSAT_9", "SENSOR_ID": "OLI_TIRS", "WRS_PATH": 196, "WRS_ROW": 25,
             "DATE_ACQUIRED": acquired.isoformat(), "SCENE_CENTER_TIME": f"10:{27 + index % 30:02d}:40.1234560Z",
             "CLOUD_COVER": round(cover, 2)}
    projection = {"MAP_PROJECTION": "UTM", "DATUM": "WGS84", "UTM_ZONE": 32, "GRID_CELL_SIZE_REFLECTIVE": 30.0,
                  "REFLECTIVE_LINES": qa.shape[0], "REFLECTIVE_SAMPLES": qa.shape[1]}
    reflectance: dict = {}
    for n in range(1, 8):
        reflectance[f"REFLECTANCE_MAXIMUM_BAND_{n}"] = round(65535 * MULT + ADD, 6)
        reflectance[f"REFLECTANCE_MINIMUM_BAND_{n}"] = round(MULT + ADD, 6)
    for n in range(1, 8):
        reflectance[f"REFLECTANCE_MULT_BAND_{n}"] = MULT
        reflectance[f"REFLECTANCE_ADD_BAND_{n}"] = ADD
    temperature = {"TEMPERATURE_MULT_BAND_ST_B10": 0.00341802, "TEMPERATURE_ADD_BAND_ST_B10": 149.0}
    return {"PRODUCT_CONTENTS": contents, "IMAGE_ATTRIBUTES": image, "PROJECTION_ATTRIBUTES": projection,
            "LEVEL2_SURFACE_REFLECTANCE_PARAMETERS": reflectance, "LEVEL2_SURFACE_TEMPERATURE_PARAMETERS": temperature}


def _value(value: object, *, odl: bool) -> str:
    if isinstance(value, float):
        return f"{value:.2E}" if 0 < abs(value) < 1e-3 else f"{value:.6f}"
    if isinstance(value, int):
        return f"{value:02d}"
    text = str(value)
    quote = odl and not (len(text) == 10 and text[4] == "-" and text[7] == "-")  # ODL dates go unquoted
    return f'"{text}"' if quote else text


def _odl(metadata: dict) -> str:
    lines = ["GROUP = LANDSAT_METADATA_FILE"]
    for group, entries in metadata.items():
        lines.append(f"  GROUP = {group}")
        lines += [f"    {key} = {_value(value, odl=True)}" for key, value in entries.items()]
        lines.append(f"  END_GROUP = {group}")
    return "\n".join([*lines, "END_GROUP = LANDSAT_METADATA_FILE", "END", ""])


def _xml(metadata: dict) -> bytes:
    root = ET.Element("LANDSAT_METADATA_FILE")
    for group, entries in metadata.items():
        element = ET.SubElement(root, group)
        for key, value in entries.items():
            ET.SubElement(element, key).text = _value(value, odl=False)
    ET.indent(root)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)
