"""`ingest --static DEM`: a DEM's elevation, slope and aspect (its sine and cosine) as extra bands of the store
(`eoscale.raster.static`).

The layer files are written into the ingest's work folder (`<output>.partial/progress/static/`), so they are removed
with it and a resumed ingest reuses them; the DEM enters the ingest's fingerprint as an input file (its path, size and
modification time, or its sha256 with --verify) and the layers, their store scales and the vertical datum enter its
parameters, which the store records (`ingest.static` in its attributes).
"""

from __future__ import annotations

import os
from pathlib import Path

from eoscale.raster.scene import Scene
from eoscale.raster.static import DEFAULT_LAYERS, as_dems, check_dem, dem_for, with_static_layers
from eoscale.sensors.copdem import STORE_SCALE

FOLDER = "static"  # under the ingest's progress folder


def static_parameters(dem: str | list[str], scenes: list[Scene], *, layers: tuple[str, ...] = DEFAULT_LAYERS,
                      accept_datum: str | None = None) -> dict:
    """What the store records (and the fingerprint holds) of its static layers, after checking the DEMs (their
    datum, that one covers each scene): one line before anything is written."""
    dems = as_dems(dem)
    datums = sorted({check_dem(d, accept_datum=accept_datum) for d in dems})
    for scene in scenes:
        dem_for(scene, dems)
    return {"dem": [os.path.abspath(d) for d in dems], "layers": list(layers), "dem_datum": accept_datum,
            "vertical_datum": "; ".join(datums),
            "scales": {name: dict(zip(("scale", "offset", "units"), STORE_SCALE[name], strict=True)) for name in layers}}


def add_static_layers(scenes: list[Scene], dem: str | list[str], progress_dir: Path, *, layers: tuple[str, ...] = DEFAULT_LAYERS,
                      accept_datum: str | None = None) -> list[Scene]:
    """`scenes` with the DEM's layers as their last bands, the layer files in the ingest's progress folder."""
    return with_static_layers(scenes, dem, Path(progress_dir) / FOLDER, layers=layers, accept_datum=accept_datum)


__all__ = ["DEFAULT_LAYERS", "FOLDER", "add_static_layers", "static_parameters"]
