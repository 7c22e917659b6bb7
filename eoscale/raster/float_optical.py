"""Optical scenes of float pixels onto the store's uint16 scale, by a conversion the user states.

The commonest export a user holds is float32: surface reflectance 0–1 from Google Earth Engine or openEO, or digital
numbers stored as floats. The tile store holds uint16 (`eoscale.store.schema`), and nothing in such a file says which
scale its floats are on, so eoscale does not guess: a multi-band file or band folder of float pixels opens with its
bands marked `UNSTATED`, and `with_input_scale` maps them with the conversion stated for the run, `store = value ×
scale + offset` (ingest's `--scale`/`--offset`, e.g. `--scale 10000` for reflectance 0–1 onto the 0–10,000 scale of
Sentinel-2 L2A), read as SAR decibels are (`eoscale.raster.float_bands`: rounded, clipped to 1…65535, the file's
nodata and NaN onto the store's nodata 0). Without a stated conversion such a scene is refused in one line that names
the option. The store records the conversion (its ingest parameters and each scene's `radiometry`), the checkpoint's
band contract takes it from the store (`BandContract.input_scale`), and `predict` maps float scenes with it, so a
model trained on converted reflectance is given the same conversion; a checkpoint trained without one refuses a float
scene. Integer scenes are read as they are, whatever is stated.
"""

from __future__ import annotations

import math
from dataclasses import replace

from eoscale.errors import InputError
from eoscale.raster.scene import Scene, check_dtype
from eoscale.sensors.sentinel1 import SENTINEL1

UNSTATED = "unstated"  # `BandFile.decode` of a float band opened before its conversion is known; the reader refuses it
FLOAT_DTYPES = ("float32", "float64")
EXAMPLE = "--scale 10000 for surface reflectance 0-1 as Earth Engine and openEO export it"


def float_bands(path: str, dtypes: tuple[str, ...]) -> list[bool]:
    """Which bands of the raster at `path` hold float pixels (uint8 and uint16 are read as they are; any other type
    is refused by `check_dtype`)."""
    floating = [d in FLOAT_DTYPES for d in dtypes]
    check_dtype(path, tuple(d for d, f in zip(dtypes, floating, strict=True) if not f))
    return floating


def check_input_scale(scale: float | None, offset: float | None) -> dict | None:
    """`{"scale", "offset"}` of the options as given (None when neither is), or a one-line error."""
    if scale is None and offset is None:
        return None
    scale = 1.0 if scale is None else float(scale)
    offset = 0.0 if offset is None else float(offset)
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(offset)):
        raise InputError(f"--scale {scale:g} --offset {offset:g}: the scale must be a positive number and the offset a "
                         f"number (store = value × scale + offset; e.g. {EXAMPLE})")
    return {"scale": scale, "offset": offset}


def has_unstated(scene: Scene) -> bool:
    return any(b.decode == UNSTATED for b in scene.bands)


def with_input_scale(scene: Scene, input_scale: dict | None, *, advice: str) -> Scene:
    """`scene` with its float bands mapped by `input_scale` (`{"scale", "offset"}`) onto the store's scale and the
    conversion in its `radiometry`; a scene without float bands as it is. A float scene without `input_scale` is
    refused in one line ending in `advice` (what this command takes to state one)."""
    if not has_unstated(scene):
        return scene
    floating = [b for b in scene.bands if b.decode == UNSTATED]
    if scene.sensor == SENTINEL1:  # backscatter is linear power or dB, never a stated linear map: its format's job
        raise InputError(f"scene {scene.id!r} ({floating[0].path}) holds Sentinel-1 backscatter as float pixels in one "
                         f"file: give each polarisation a file of its own in a folder (…_vv.tif, …_vh.tif) or its STAC "
                         f"Item, whose units eoscale reads")
    if input_scale is None:
        raise InputError(f"scene {scene.id!r} ({floating[0].path}) holds float pixels, and nothing says which scale "
                         f"they are on: {advice}")
    scale, offset = float(input_scale["scale"]), float(input_scale["offset"])
    bands = tuple(replace(b, decode="float", scale=scale, offset=offset) if b.decode == UNSTATED else b
                  for b in scene.bands)
    record = {"input": "float", "bands": [b.name for b in floating], "scale": scale, "offset": offset,
              "applied": f"store = value × {scale:g} {'+' if offset >= 0 else '-'} {abs(offset):g}, rounded and "
                         f"clipped to 1-65535; the file's nodata and NaN are the store's nodata 0"}
    # the store's nodata is a uint16 value: a float file's own (NaN, -9999) is mapped onto 0 as it is read
    nodata = 0.0 if len(floating) == len(scene.bands) or not _uint16(scene.nodata) else scene.nodata
    return replace(scene, bands=bands, nodata=nodata, radiometry={**(scene.radiometry or {}), "float_input": record})


def _uint16(value: float) -> bool:
    return math.isfinite(value) and value == int(value) and 0 <= value <= 65535
