"""A band folder: a directory of single-band files, one per band, each named by its description or by a band token in
its file name (`T32ULB_20240612_B8A.tif`, `B8A.jp2`, Landsat's `…_SR_B5.TIF`, `…_red.tif`: the sensors' file patterns,
`eoscale.sensors`). Bands are resampled onto the grid of the finest band. Files that name no band (cloud masks, TCI
previews, AOT/WVP layers, thumbnails) are skipped and listed in `Scene.skipped`; the file the sensor's mask rule names
(a Sentinel-2 folder's `SCL.tif`) is the scene's mask. The date is the first band file's ACQUISITIONDATETIME tag, if any.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from affine import Affine
from rasterio.crs import CRS

from eoscale.errors import InputError
from eoscale.raster.float_optical import UNSTATED, float_bands
from eoscale.raster.formats.registry import ProductFormat
from eoscale.raster.scene import (
    IMAGE_SUFFIXES,
    RASTER_SUFFIXES,
    BandFile,
    ClassMask,
    Scene,
    check_crs,
    nodata_of,
    open_raster,
    tiff_date,
)
from eoscale.sensors import SensorSpec, band_in_file_name, band_of_description, get_sensor


@dataclass
class FolderBands:
    """What a band folder holds: its bands (in the sensor's order), its sensor, the files skipped, the reference
    grid (the finest band's) and the date of its band files."""

    path: str
    bands: list[BandFile]
    sensor: SensorSpec
    skipped: list[str]
    crs: CRS
    transform: Affine
    width: int
    height: int
    nodata: float
    date: object = None


def _band_of(path: str, description: str | None) -> tuple[str, str] | None:
    """(sensor, band) of a file in a band directory: its description if that names a known band, else its file name."""
    return (band_of_description(description) if description else None) or band_in_file_name(Path(path).stem)


def read_band_folder(path: str) -> FolderBands:
    """The bands of the folder at `path` (see the module docstring); one sensor's only."""
    files = sorted(f for f in Path(path).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not any(f.suffix.lower() in RASTER_SUFFIXES for f in files):
        raise InputError(f"scene directory {path!r} holds no raster files ({', '.join(RASTER_SUFFIXES)})")
    bands: list[BandFile] = []
    sensors: dict[str, str] = {}  # sensor -> a file of it, for the error message
    skipped: list[str] = []
    finest: tuple[float, str] | None = None
    grids = {}
    date = None
    for f in files:
        if f.suffix.lower() not in RASTER_SUFFIXES:
            skipped.append(str(f))
            continue
        with open_raster(str(f)) as src:
            identity = _band_of(str(f), src.descriptions[0] if src.count == 1 else None)
            if identity is None:
                skipped.append(str(f))  # a cloud mask, a TCI preview, AOT/WVP, a QA band: not a band of the scene
                continue
            sensor, name = identity
            check_crs(str(f), src.crs)
            floating = float_bands(str(f), src.dtypes)[0]  # mapped once the conversion is known (float_optical)
            if src.count != 1:
                raise InputError(f"{str(f)!r} has {src.count} bands: a band directory needs one band per file")
            if any(b.name == name for b in bands):
                raise InputError(f"scene directory {path!r} has two files for band {name}")
            sensors.setdefault(sensor, str(f))
            bands.append(BandFile(name, str(f), 1, decode=UNSTATED if floating else ""))
            pixel = abs(src.transform.a)
            grids[str(f)] = (src.crs, src.transform, src.width, src.height, nodata_of(src))
            date = date or tiff_date(src)
            if finest is None or pixel < finest[0]:
                finest = (pixel, str(f))
    if finest is None:
        raise InputError(f"scene directory {path!r} holds no band files: name them by band (…_B04.tif, …_SR_B4.TIF) "
                         f"or set their descriptions")
    if len(sensors) > 1:
        (a, fa), (b, fb) = list(sensors.items())[:2]
        raise InputError(f"scene directory {path!r} mixes {get_sensor(a).title} bands ({fa}) and "
                         f"{get_sensor(b).title} bands ({fb}): put each scene's bands in a folder of their own")
    sensor = get_sensor(next(iter(sensors)))
    # bands in the sensor's order (by wavelength), other bands after them in file-name order
    bands.sort(key=lambda band: sensor.order(band.name))
    crs, transform, width, height, nodata = grids[finest[1]]
    return FolderBands(path, bands, sensor, skipped, crs, transform, width, height, nodata, date)


def folder_scene(folder: FolderBands, *, radiometry: dict | None = None, class_mask: ClassMask | None = None,
                 used: list[str] | tuple[str, ...] = (), date=None) -> Scene:
    """The scene of a band folder, with what its format found beside the bands (`used`: files no longer skipped)."""
    return Scene(
        id=Path(folder.path).name,
        bands=tuple(folder.bands),
        crs=folder.crs,
        transform=folder.transform,
        width=folder.width,
        height=folder.height,
        nodata=folder.nodata,
        paths=tuple(b.path for b in folder.bands) + tuple(used),
        sensor=folder.sensor.name,
        radiometry=radiometry,
        class_mask=class_mask,
        skipped=tuple(p for p in folder.skipped if p not in used),
        date=date if date is not None else folder.date,
    )


def stac_item_in(folder: str) -> Path | None:
    """A STAC Item JSON file in `folder` (a COG product downloaded with its Item), if there is one."""
    for f in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("type") == "Feature" and "stac_version" in data:
            return f
    return None


def open_band_folder(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
                     scl_classes: tuple[int, ...] | None = None) -> Scene:
    """The band folder at `path` as a scene; the file its sensor's mask rule names is the mask (`scl_classes`, when
    given, are the classes it masks)."""
    folder = read_band_folder(path)
    sensor = folder.sensor
    if sensor.band_folder_needs_item and (item := stac_item_in(path)) is not None:
        # its raster:bands (or processing baseline) say how the DNs map to reflectance; a plain band folder would
        # keep baseline ≥ 04.00's +1000 offset and mix it with other scenes' reflectance unnoticed
        raise InputError(f"scene directory {path!r} holds its STAC Item {item.name}, which states the bands' scale "
                         f"and offset: ingest it with --stac {item} instead")
    rule = sensor.mask
    found = [p for p in folder.skipped if rule and rule.file_pattern and rule.file_pattern.search(Path(p).stem)]
    if rule and rule.required and not found:
        raise InputError(f"{sensor.title} scene folder {path!r} has no {rule.missing or rule.layer + ' file'}")
    if not found:
        return folder_scene(folder)
    classes = rule.classes if scl_classes is None or not rule.classes else tuple(scl_classes)
    return folder_scene(folder, class_mask=ClassMask(rule.layer, found[0], classes, bits=rule.bits), used=[found[0]])


FORMAT = ProductFormat("band folder", os.path.isdir, open_band_folder)
