"""Scene sources: find the rasters of each scene, name their bands, and check them before any work starts.

A scene is either one multi-band file (bands named by their descriptions, or by `band_names`) or a
directory of single-band files, one per band (the band named by the file's description or by a band token
in its file name, as `T32ULB_20240612_B8A.tif` or `B8A.jp2`). Bands are resampled onto the scene's
*reference grid*: the grid of its finest band (the file's own grid for a multi-band file).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import ColorInterp
from rasterio.errors import RasterioIOError
from rasterio.transform import array_bounds

from eoscale.bands import SENTINEL2_NAMES, normalise_band_name
from eoscale.errors import InputError, InputNotFoundError

RASTER_SUFFIXES = (".tif", ".tiff", ".jp2", ".vrt", ".img")
_BAND_TOKEN = re.compile(r"(?:^|[_\-.])(B(?:0?[1-9]|1[0-2]|8A))(?:[_\-.]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class BandFile:
    """Where one band of a scene lives: a file and the 1-based band index in it."""

    name: str
    path: str
    index: int


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


def _band_name_of(path: str, description: str | None) -> str | None:
    if description:
        return normalise_band_name(description)
    match = _BAND_TOKEN.search(Path(path).stem)
    return normalise_band_name(match.group(1)) if match else None


def open_scene(path: str, *, band_names: list[str] | None = None) -> Scene:
    """Describe the scene at `path` (a multi-band file or a directory of one file per band)."""
    if os.path.isdir(path):
        return _open_band_directory(path)
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
        )


def nodata_of(src: rasterio.io.DatasetReader) -> float:
    """The file's nodata value; 0 when it declares none (Sentinel-2's convention: its JPEG 2000 bands declare
    none, and 0 is NO_DATA in the product)."""
    return float(src.nodata) if src.nodata is not None else 0.0


def _open_band_directory(path: str) -> Scene:
    files = sorted(f for f in Path(path).iterdir() if f.suffix.lower() in RASTER_SUFFIXES)
    if not files:
        raise InputError(f"scene directory {path!r} holds no raster files ({', '.join(RASTER_SUFFIXES)})")
    bands: list[BandFile] = []
    finest: tuple[float, str] | None = None
    grids = {}
    for f in files:
        with open_raster(str(f)) as src:
            check_crs(str(f), src.crs)
            check_dtype(str(f), src.dtypes)
            if src.count != 1:
                raise InputError(f"{str(f)!r} has {src.count} bands: a band directory needs one band per file")
            name = _band_name_of(str(f), src.descriptions[0])
            if name is None:
                raise InputError(
                    f"cannot tell which band {str(f)!r} holds: set its description or put the band in its name (…_B04.tif)"
                )
            if any(b.name == name for b in bands):
                raise InputError(f"scene directory {path!r} has two files for band {name}")
            bands.append(BandFile(name, str(f), 1))
            pixel = abs(src.transform.a)
            grids[str(f)] = (src.crs, src.transform, src.width, src.height, nodata_of(src))
            if finest is None or pixel < finest[0]:
                finest = (pixel, str(f))
    assert finest is not None
    # Sentinel-2 bands in the product's order (by wavelength), other bands after them in file-name order
    bands.sort(key=lambda b: SENTINEL2_NAMES.index(b.name) if b.name in SENTINEL2_NAMES else len(SENTINEL2_NAMES))
    crs, transform, width, height, nodata = grids[finest[1]]
    return Scene(
        id=Path(path).name,
        bands=tuple(bands),
        crs=crs,
        transform=transform,
        width=width,
        height=height,
        nodata=nodata,
        paths=tuple(str(f) for f in files),
    )


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
    return Scene(
        id=scene.id,
        bands=tuple(lookup[normalise_band_name(n)] for n in wanted),
        crs=scene.crs,
        transform=scene.transform,
        width=scene.width,
        height=scene.height,
        nodata=scene.nodata,
        paths=scene.paths,
    )


def open_scenes(patterns: list[str], *, bands: list[str] | None = None, band_names: list[str] | None = None) -> list[Scene]:
    """All scenes named by `patterns`, checked to share one band set (the `bands` subset when given)."""
    scenes = [select_scene_bands(open_scene(p, band_names=band_names), bands) for p in expand_paths(patterns, what="scene")]
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
