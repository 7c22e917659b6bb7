"""Scene sources: find the rasters of each scene, name their bands, and check them before any work starts.

A scene is one multi-band file (bands named by their descriptions, by `band_names`, or by GDAL's colour
interpretation for RGB files), a directory of single-band files, one per band (the band named by the file's
description or by a band token in its file name, as `T32ULB_20240612_B8A.tif`, `B8A.jp2` or Landsat's
`…_SR_B5.TIF`), or a Sentinel-2 L2A SAFE product (`eoscale.raster.safe`). Bands are resampled onto the scene's
*reference grid*: the grid of its finest band (the file's own grid for a multi-band file).

Every scene knows its sensor (`eoscale.sensors`): band names are only unique within one. Files in a band
directory that name no band (cloud masks, TCI previews, AOT/WVP layers, thumbnails) are skipped and listed in
`Scene.skipped`, for the caller to report once (`describe_skipped` says what a recognised one is: a cloud mask, a
preview, …); a Sentinel-2 folder's SCL layer (`SCL.tif`, `…_SCL_20m.tif`) is its mask, as in a SAFE product.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import ColorInterp
from rasterio.errors import RasterioIOError
from rasterio.transform import array_bounds

from eoscale.bands import normalise_band_name
from eoscale.errors import InputError, InputNotFoundError
from eoscale.sensors import (
    DEFAULT_SENSOR,
    LANDSAT_OLI,
    SENTINEL2,
    band_in_file_name,
    band_of_description,
    get_sensor,
    is_scl_file,
    layer_in_file_name,
    sensor_of_bands,
)

RASTER_SUFFIXES = (".tif", ".tiff", ".jp2", ".vrt", ".img")
# files beside the bands that are listed when skipped (previews, thumbnails); other files pass unmentioned
_IMAGE_SUFFIXES = RASTER_SUFFIXES + (".png", ".jpg", ".jpeg")
_RGB = {ColorInterp.red: "RED", ColorInterp.green: "GREEN", ColorInterp.blue: "BLUE"}


@dataclass(frozen=True)
class BandFile:
    """Where one band of a scene lives: a file and the 1-based band index in it, and the linear map from the file's
    values to the store's scale (`value * scale + offset`; identity but for products with an offset, as Sentinel-2
    L2A from processing baseline 04.00)."""

    name: str
    path: str
    index: int
    scale: float = 1.0
    offset: float = 0.0


@dataclass(frozen=True)
class ClassMask:
    """A classification layer whose `classes` make a pixel nodata (Sentinel-2's SCL), or whose set `bits` do (Landsat's
    QA_PIXEL), resampled by nearest neighbour."""

    name: str
    path: str
    classes: tuple[int, ...]
    index: int = 1
    bits: int = 0

    def masked(self, values: np.ndarray) -> np.ndarray:
        if self.bits:
            return (values & self.bits) != 0
        return np.isin(values, self.classes)


@dataclass(frozen=True)
class Scene:
    """One scene: its bands (in the order the store will hold them) and its reference grid."""

    id: str
    bands: tuple[BandFile, ...]
    crs: CRS
    transform: Affine
    width: int
    height: int
    nodata: float
    paths: tuple[str, ...] = field(default=())
    sensor: str = DEFAULT_SENSOR
    platform: str | None = None
    radiometry: dict | None = None  # what was done to land on the store's scale (a SAFE's baseline and offsets)
    class_mask: ClassMask | None = None
    band_map: tuple[tuple[str, str], ...] = ()  # (the file's band, the name it was given) under --band-map
    skipped: tuple[str, ...] = ()  # files beside the bands that hold no band

    @property
    def band_names(self) -> list[str]:
        return [b.name for b in self.bands]

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(left, bottom, right, top) in the scene's CRS."""
        return array_bounds(self.height, self.width, self.transform)

    def to_attrs(self) -> dict:
        return {
            "id": self.id,
            "paths": list(self.paths),
            "crs": self.crs.to_wkt(),
            "epsg": self.crs.to_epsg() or 0,
            "width": self.width,
            "height": self.height,
            "transform": list(self.transform)[:6],
            "nodata": self.nodata,
            "sensor": self.sensor,
            "platform": self.platform,
            **({"radiometry": self.radiometry} if self.radiometry else {}),
            **({"mask": {"layer": self.class_mask.name, "path": self.class_mask.path,
                         "nodata_classes": list(self.class_mask.classes),
                         **({"nodata_bits": self.class_mask.bits} if self.class_mask.bits else {})}}
               if self.class_mask else {}),
            **({"band_map": dict(self.band_map)} if self.band_map else {}),
        }


def expand_paths(patterns: list[str], *, what: str) -> list[str]:
    """Paths named by `patterns` (paths or glob patterns), in the given order, globs sorted."""
    paths: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise InputNotFoundError(f"{what} pattern {pattern!r} matches no file")
            paths.extend(matches)
        elif not os.path.exists(pattern):
            raise InputNotFoundError(f"{what} {pattern!r} does not exist")
        else:
            paths.append(pattern)
    return paths


def open_raster(path: str) -> rasterio.io.DatasetReader:
    """Open a raster, turning GDAL's failures into one-line user errors."""
    try:
        return rasterio.open(path)
    except RasterioIOError as err:
        raise InputError(f"{path!r} is not a readable raster ({_first_line(err)})") from None


def check_crs(path: str, crs: CRS | None) -> CRS:
    if crs is None:
        raise InputError(
            f"{path!r} has no CRS: give it its CRS (e.g. 'gdal_edit.py -a_srs EPSG:<code> {path}') "
            "and run the command again"
        )
    return crs


SUPPORTED_DTYPES = ("uint8", "uint16")


def check_dtype(path: str, dtypes: tuple[str, ...]) -> None:
    """Stores hold uint16 scaled reflectance (as Sentinel-2 and Landsat products ship it)."""
    bad = sorted(set(dtypes) - set(SUPPORTED_DTYPES))
    if bad:
        raise InputError(
            f"{path!r} holds {', '.join(bad)} pixels: eoscale stores uint16 scaled reflectance; "
            f"convert it first (e.g. 'gdal_translate -ot UInt16 -scale 0 1 0 10000')"
        )


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _band_of(path: str, description: str | None) -> tuple[str, str] | None:
    """(sensor, band) of a file in a band directory: its description if that names a known band, else its file name."""
    return (band_of_description(description) if description else None) or band_in_file_name(Path(path).stem)


def scene_paths(patterns: list[str]) -> list[str]:
    """The scenes named by `patterns` (`expand_paths`), a folder of SAFE products standing for its products."""
    from eoscale.raster.safe import products_in

    return [q for p in expand_paths(patterns, what="scene") for q in (products_in(p) or [p])]


def open_scene(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
               scl_classes: tuple[int, ...] | None = None) -> Scene:
    """Describe the scene at `path` (a multi-band file, a directory of one file per band, or a SAFE product, of
    which `bands` are taken, default the sensor's usual set, and whose SCL `scl_classes` are masked)."""
    from eoscale.raster.safe import is_safe, open_safe

    if is_safe(path):
        return open_safe(path, bands=[normalise_band_name(b) for b in bands] if bands else None, scl_classes=scl_classes)
    if os.path.isdir(path):
        return _open_band_directory(path, scl_classes=scl_classes)
    with open_raster(path) as src:
        crs = check_crs(path, src.crs)
        check_dtype(path, src.dtypes)
        # an alpha band says where the others hold data (`eoscale.raster.reader`): it is not a band of the scene
        data = [i for i, c in enumerate(src.colorinterp, start=1) if c != ColorInterp.alpha]
        if band_names is not None:
            if len(band_names) != len(data):
                alpha = " (and an alpha band)" if len(data) < src.count else ""
                raise InputError(
                    f"{path!r} has {len(data)} bands{alpha} but --band-names gives {len(band_names)}: give one name per band"
                )
            names = [normalise_band_name(n) for n in band_names]
        else:
            names = [normalise_band_name(src.descriptions[i - 1]) if src.descriptions[i - 1] else "" for i in data]
            interp = [_RGB.get(src.colorinterp[i - 1]) for i in data]
            if not any(names) and all(interp) and len(set(interp)) == len(interp):
                names = interp  # an RGB file without band descriptions: GDAL's colour interpretation names them
            if not all(names):
                raise InputError(
                    f"{path!r} has bands without descriptions: name them with --band-names "
                    f"(e.g. --band-names B02,B03,B04,B08)"
                )
        if len(set(names)) != len(names):
            raise InputError(f"{path!r} names a band twice: {', '.join(names)}")
        return Scene(
            id=Path(path).stem,
            bands=tuple(BandFile(n, path, i) for i, n in zip(data, names, strict=True)),
            crs=crs,
            transform=src.transform,
            width=src.width,
            height=src.height,
            nodata=nodata_of(src),
            paths=(path,),
            sensor=sensor_of_bands(names, what=repr(path)),
        )


def nodata_of(src: rasterio.io.DatasetReader) -> float:
    """The file's nodata value; 0 when it declares none (Sentinel-2's convention: its JPEG 2000 bands declare
    none, and 0 is NO_DATA in the product)."""
    return float(src.nodata) if src.nodata is not None else 0.0


def _open_band_directory(path: str, *, scl_classes: tuple[int, ...] | None = None) -> Scene:
    files = sorted(f for f in Path(path).iterdir() if f.suffix.lower() in _IMAGE_SUFFIXES)
    if not any(f.suffix.lower() in RASTER_SUFFIXES for f in files):
        raise InputError(f"scene directory {path!r} holds no raster files ({', '.join(RASTER_SUFFIXES)})")
    bands: list[BandFile] = []
    sensors: dict[str, str] = {}  # sensor -> a file of it, for the error message
    skipped: list[str] = []
    finest: tuple[float, str] | None = None
    grids = {}
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
            check_dtype(str(f), src.dtypes)
            if src.count != 1:
                raise InputError(f"{str(f)!r} has {src.count} bands: a band directory needs one band per file")
            if any(b.name == name for b in bands):
                raise InputError(f"scene directory {path!r} has two files for band {name}")
            sensors.setdefault(sensor, str(f))
            bands.append(BandFile(name, str(f), 1))
            pixel = abs(src.transform.a)
            grids[str(f)] = (src.crs, src.transform, src.width, src.height, nodata_of(src))
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
    radiometry, class_mask, used = None, None, []
    if sensor.name == LANDSAT_OLI:
        from eoscale.raster.landsat import calibrate

        bands, radiometry, class_mask, used = calibrate(path, bands, skipped)
    if sensor.name == SENTINEL2 and (item := _stac_item_in(path)) is not None:
        # its raster:bands (or processing baseline) say how the DNs map to reflectance; a plain band folder would
        # keep baseline ≥ 04.00's +1000 offset and mix it with other scenes' reflectance unnoticed
        raise InputError(f"scene directory {path!r} holds its STAC Item {item.name}, which states the bands' scale "
                         f"and offset: ingest it with --stac {item} instead")
    scl = [p for p in skipped if is_scl_file(Path(p).stem)]
    if sensor.name == SENTINEL2 and scl:  # a Sentinel-2 COG folder's SCL.tif: the mask, as in a SAFE product
        from eoscale.raster.safe import SCL_NODATA_CLASSES

        class_mask = ClassMask("SCL", scl[0], SCL_NODATA_CLASSES if scl_classes is None else tuple(scl_classes))
        used = [scl[0]]
    return Scene(
        id=Path(path).name,
        bands=tuple(bands),
        crs=crs,
        transform=transform,
        width=width,
        height=height,
        nodata=nodata,
        paths=tuple(b.path for b in bands) + tuple(used),
        sensor=sensor.name,
        radiometry=radiometry,
        class_mask=class_mask,
        skipped=tuple(p for p in skipped if p not in used),
    )


def _stac_item_in(folder: str) -> Path | None:
    """A STAC Item JSON file in `folder` (a COG product downloaded with its Item), if there is one."""
    for f in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("type") == "Feature" and "stac_version" in data:
            return f
    return None


def describe_skipped(path: str) -> str:
    """A skipped file for the listing: its path, and what it is when its name says (`eoscale.sensors`)."""
    what = layer_in_file_name(Path(path).stem)
    return f"{path} ({what})" if what else path


def select_scene_bands(scene: Scene, wanted: list[str] | None) -> Scene:
    """The scene with only the `wanted` bands, in that order (all its bands when `wanted` is None)."""
    if wanted is None:
        return scene
    lookup = {b.name: b for b in scene.bands}
    missing = [n for n in wanted if normalise_band_name(n) not in lookup]
    if missing:
        raise InputError(
            f"band(s) {', '.join(missing)} not in scene {scene.id!r} ({', '.join(scene.paths[:1])}): "
            f"it has {', '.join(scene.band_names)}"
        )
    return replace(scene, bands=tuple(lookup[normalise_band_name(n)] for n in wanted))


def map_scene_bands(scene: Scene, band_map: dict[str, str]) -> Scene:
    """The scene's bands renamed by `--band-map` ({its band: the name it is taken as}) when the map names any of
    them (a map for other scenes leaves it as it is): only the mapped bands are kept, and the scene becomes of the
    sensor the new names belong to."""
    if not any(name in scene.band_names for name in band_map):
        return scene
    kept = [b for b in scene.bands if b.name in band_map]
    missing = [n for n in band_map if n not in scene.band_names]
    if missing:
        raise InputError(f"--band-map names band(s) {', '.join(missing)} that scene {scene.id!r} does not have: "
                         f"it has {', '.join(scene.band_names)}")
    targets = [band_map[b.name] for b in kept]
    return replace(scene, bands=tuple(replace(b, name=band_map[b.name]) for b in kept),
                   sensor=sensor_of_bands(targets, what="--band-map"),
                   band_map=tuple((b.name, band_map[b.name]) for b in kept))


def check_one_sensor(scenes: list[Scene]) -> None:
    """One ingest or prediction holds one sensor's bands: band names mean different light on different sensors."""
    first = scenes[0]
    for scene in scenes[1:]:
        if scene.sensor != first.sensor:
            raise InputError(
                f"scene {scene.id!r} holds {get_sensor(scene.sensor).title} bands ({', '.join(scene.band_names)}) "
                f"but {first.id!r} holds {get_sensor(first.sensor).title} bands: ingest them into separate stores, "
                f"or map one's bands onto the other's with --band-map (e.g. SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A)"
            )


def open_scenes(patterns: list[str], *, bands: list[str] | None = None, band_names: list[str] | None = None,
                band_map: dict[str, str] | None = None, scl_classes: tuple[int, ...] | None = None,
                stac: list[str] | None = None) -> list[Scene]:
    """All scenes named by `patterns` and by the STAC Items `stac` (`eoscale.raster.stac`), renamed by `band_map`,
    checked to hold one sensor's bands and to share one band set (the `bands` subset when given)."""
    from eoscale.raster.stac import open_items

    wanted = None if band_map else bands  # a product's bands to take; under a band map, --bands are the new names
    opened = [open_scene(p, band_names=band_names, bands=wanted, scl_classes=scl_classes) for p in scene_paths(patterns)]
    opened += open_items(stac, bands=wanted, scl_classes=scl_classes) if stac else []
    if not opened:
        raise InputError("no scenes given: name them with --scenes, or their STAC items with --stac")
    scenes = [map_scene_bands(scene, band_map or {}) for scene in opened]
    if stac and bands and not band_map:
        bands = [b.name for b in scenes[-1].bands]  # an Item's bands may be named by asset key or common name
    check_one_sensor(scenes)
    scenes = [select_scene_bands(s, bands) for s in scenes]
    ids = [s.id for s in scenes]
    if len(set(ids)) != len(ids):
        raise InputError(f"two scenes share an id (file or directory name): {sorted(ids)}")
    reference = scenes[0]
    for scene in scenes[1:]:
        if sorted(scene.band_names) != sorted(reference.band_names):
            raise InputError(
                f"scene {scene.id!r} has bands {', '.join(scene.band_names)} but {reference.id!r} has "
                f"{', '.join(reference.band_names)}: pick common ones with --bands"
            )
    order = reference.band_names
    return [select_scene_bands(s, order) for s in scenes]
