"""Static layers as extra bands of a scene: a DEM's elevation, slope and aspect on each scene's grid (`--static`).

`eoscale.raster.dem.static_layers` puts the layers onto a scene's grid, resampled once (slope and aspect computed on the
DEM's own grid in metres first). Here they are written as one uint16 GeoTIFF a scene, on the scene's grid and on the
Copernicus DEM's store scales (`eoscale.sensors.copdem.STORE_SCALE`: elevation at 0.1 m from -1000 m, slope at 0.01°,
the aspect's sine and cosine at 0.0001; 0 where the DEM has no height), and appended to the scene as `BandFile`s named
`ELEVATION`, `SLOPE`, `ASPECT_SIN`, `ASPECT_COS` (the layer `aspect` is the last two: an angle stored as degrees splits
north at the wrap). The ingest then cuts, counts and normalises them as any band: each has its own statistics in the
store, the store's band list and a checkpoint's contract carry them, and `predict --static` adds the same layers to the
scenes it maps, `ASPECT` in degrees for a checkpoint trained on a store from before. A static band says nothing of where
a scene holds data (`BandFile.static`): the scene's own bands decide its validity, as without them.

The files live where the command's work lives (an ingest's `<output>.partial/progress/static/`, `eoscale.ingest.static`;
a prediction's temporary folder) and are written atomically, so a resumed ingest reuses those of its earlier run. Before any is
written every scene is checked to lie inside the DEM, and the DEM's vertical datum is checked once
(`eoscale.raster.dem.check_datum`): one line, exit 2, nothing written.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import rasterio
from rasterio.warp import transform_bounds

from eoscale.errors import InputError, InputNotFoundError
from eoscale.raster.dem import check_datum, static_layers, to_store_values
from eoscale.raster.scene import BandFile, Scene, check_crs, open_raster
from eoscale.sensors.copdem import ASPECT, ASPECT_COS, ASPECT_SIN, ELEVATION, SLOPE, STORE_SCALE

STATIC_LAYERS = (ELEVATION, SLOPE, ASPECT_SIN, ASPECT_COS)  # the bands an ingest writes
OLDER_LAYERS = (ASPECT,)  # bands of stores and checkpoints from before, still computed for them
DEFAULT_LAYERS = STATIC_LAYERS
# `--static-layers` names: a layer is one band, or aspect its two
LAYER_NAMES = {"elevation": (ELEVATION,), "slope": (SLOPE,), "aspect": (ASPECT_SIN, ASPECT_COS)}


def parse_layers(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """`--static-layers elevation,slope,aspect` as band names in the order given (aspect: `ASPECT_SIN`,
    `ASPECT_COS`; default: all)."""
    if text is None:
        return DEFAULT_LAYERS
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    names = [n.lower() for n in names if n.strip()]
    unknown = [n for n in names if n not in LAYER_NAMES and n.upper() not in STATIC_LAYERS]
    if not names or unknown:
        raise InputError(f"--static-layers {text!r}: choose among {','.join(LAYER_NAMES)} (e.g. elevation,slope)")
    return tuple(dict.fromkeys(b for n in names for b in LAYER_NAMES.get(n, (n.upper(),))))


def static_bands(bands: list[str] | tuple[str, ...]) -> list[str]:
    """Which of `bands` (a store's, a contract's) are static layers (an older store's `ASPECT` in degrees too)."""
    return [b for b in bands if b.upper() in STATIC_LAYERS + OLDER_LAYERS]


def check_dem(dem: str, *, accept_datum: str | None = None) -> str:
    """The DEM's vertical datum as recorded (`check_datum`), after checking the file exists and has a CRS."""
    if not os.path.isfile(dem):
        raise InputNotFoundError(f"--static DEM {dem!r} does not exist: give a DEM file (a Copernicus DEM COG)")
    with open_raster(dem) as src:
        check_crs(dem, src.crs)
    return check_datum(dem, accept_datum=accept_datum)


def covers(dem: str, scene: Scene) -> bool:
    """Whether `scene` lies inside the DEM (to within half a DEM pixel)."""
    with open_raster(dem) as src:
        left, bottom, right, top = transform_bounds(scene.crs, src.crs, *scene.bounds, densify_pts=21)
        d_left, d_bottom, d_right, d_top = src.bounds
        tol_x, tol_y = abs(src.transform.a) / 2, abs(src.transform.e) / 2
    return not (left < d_left - tol_x or right > d_right + tol_x or bottom < d_bottom - tol_y or top > d_top + tol_y)


def dem_for(scene: Scene, dems: list[str]) -> str:
    """The first of `dems` that covers `scene`; a one-line error where none does."""
    for dem in dems:
        if covers(dem, scene):
            return dem
    named = repr(dems[0]) if len(dems) == 1 else f"none of the {len(dems)} DEMs given"
    raise InputError(f"DEM {named} does not cover scene {scene.id!r}: give a DEM that covers every scene (tiles that "
                     f"a scene straddles as one VRT mosaic: gdalbuildvrt dem.vrt tiles/*.tif)")


def as_dems(dem: str | list[str]) -> list[str]:
    return [dem] if isinstance(dem, str | os.PathLike) else [str(d) for d in dem]


def layer_file(folder: Path, scene: Scene) -> Path:
    return folder / f"{scene.id}.static.tif"


def write_layers(dem: str, scene: Scene, path: Path, *, layers: tuple[str, ...], accept_datum: str | None) -> None:
    """The scene's static layers as a uint16 GeoTIFF on its grid at `path` (written to a temporary name, then moved)."""
    computed = static_layers(dem, crs=scene.crs, transform=scene.transform, width=scene.width, height=scene.height,
                             layers=layers, accept_datum=accept_datum)
    stack = np.stack([to_store_values(computed.layers[name], *STORE_SCALE[name][:2]) for name in layers])
    tmp = path.with_name(path.name + ".tmp")
    profile = {"driver": "GTiff", "width": scene.width, "height": scene.height, "count": len(layers),
               "dtype": "uint16", "crs": scene.crs, "transform": scene.transform, "nodata": 0, "tiled": True,
               "blockxsize": 256, "blockysize": 256, "compress": "deflate", "predictor": 2}
    if scene.width < 256 or scene.height < 256:
        profile.update(tiled=False, blockxsize=None, blockysize=None)
        profile = {k: v for k, v in profile.items() if v is not None}
    with rasterio.open(tmp, "w", **profile) as dst:
        dst.write(stack)
        dst.descriptions = layers
        dst.update_tags(source=os.path.abspath(dem), vertical_datum=computed.datum)
    os.replace(tmp, path)


def static_sources(scene: Scene) -> list[str]:
    """The DEM files the scene's static layers were computed from (each layer file's `source` tag, `write_layers`),
    for a map's lineage; none for a scene without static layers."""
    layer_files = dict.fromkeys(b.path for b in scene.bands if b.static)
    sources = []
    for path in layer_files:
        with rasterio.open(path) as src:
            source = src.tags().get("source")
        if source and source not in sources:
            sources.append(source)
    return sources


def with_static_layers(scenes: list[Scene], dem: str | list[str], folder: Path, *,
                       layers: tuple[str, ...] = DEFAULT_LAYERS, accept_datum: str | None = None) -> list[Scene]:
    """`scenes`, each with the `layers` of the DEM that covers it (of `dem`, one or several files) appended as static
    bands (module docstring); the layer files are written into `folder`, those already there (a resumed run's) kept."""
    dems = as_dems(dem)
    for path in dems:
        check_dem(path, accept_datum=accept_datum)
    chosen = [dem_for(scene, dems) for scene in scenes]
    clash = [(s.id, n) for s in scenes for n in s.band_names if n.upper() in STATIC_LAYERS + OLDER_LAYERS]
    if clash:
        raise InputError(f"scene {clash[0][0]!r} already has a band {clash[0][1]!r}: leave out --static, or its band")
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for scene, source in zip(scenes, chosen, strict=True):
        path = layer_file(folder, scene)
        if not path.exists():
            write_layers(source, scene, path, layers=layers, accept_datum=accept_datum)
        extra = tuple(BandFile(name, str(path), i + 1, static=True) for i, name in enumerate(layers))
        out.append(replace(scene, bands=scene.bands + extra))
    return out


def predict_static_layers(scenes: list[Scene], dems: list[str] | None, needed: list[str], *,
                          accept_datum: str | None = None) -> list[Scene]:
    """`predict --static`: `scenes` with the static layers a checkpoint was trained with (`needed`, its contract's
    static bands: `ASPECT` in degrees for one trained on a store from before), from `dems`, in a temporary folder
    removed when the process exits. A checkpoint that needs them without `dems`, or `dems` for one that needs none, is
    a one-line error."""
    if needed and not dems:
        raise InputError(f"the checkpoint was trained with static layers {', '.join(needed)} (ingest --static): give "
                         f"the DEM covering the scenes with --static DEM.tif")
    if dems and not needed:
        raise InputError("the checkpoint was trained without static layers: leave out --static")
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="eoscale-static-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return with_static_layers(scenes, list(dems), folder, layers=tuple(n.upper() for n in needed),
                              accept_datum=accept_datum)


__all__ = ["DEFAULT_LAYERS", "LAYER_NAMES", "OLDER_LAYERS", "STATIC_LAYERS", "as_dems", "check_dem", "covers",
           "dem_for", "layer_file", "parse_layers", "predict_static_layers", "static_bands", "static_sources", "with_static_layers",
           "write_layers"]
