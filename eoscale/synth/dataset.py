"""A synthetic scene set on disk: `synthesize` writes it; `SynthResult` and `manifest.json` describe it.

Layout of a set (paths relative to its directory, all listed in `manifest.json`):

    classes.csv                               the class table (a sub-table of ESA WorldCover)
    scenes/<scene_id>.tif                     --layout multiband: 10 bands at 10 m
    scenes/<scene_id>/<scene_id>_<BAND>.tif   --layout perband: one file per band, 20 m bands at 20 m
    scenes/S2A_MSIL2A_…_N0510_….SAFE/         --layout safe: a Sentinel-2 L2A product (`eoscale.synth.safe`)
    scenes/S2A_32ULB_…_0_L2A/                 --layout cog: Sentinel-2 L2A COGs and their STAC Item (`eoscale.synth.cog`)
    scenes/LC09_L2SP_…_02_T1/                 --layout landsat: a Landsat 9 C2 L2 folder with MTL, QA_PIXEL and a
                                              STAC Item (`eoscale.synth.landsat`), 30 m
    labels/<scene_id>_landcover.tif           WorldCover codes, EPSG:3035 at 20 m
    heights/<scene_id>_height.tif             with heights=True: canopy height in m, float32 COG, EPSG:3035 at
                                              20 m, nodata -9999 (`eoscale.synth.heights`)
    manifest.json

A set is written into a hidden sibling directory and renamed into place at the end, so an interrupted run
leaves nothing that looks finished. Scene i depends only on (seed, i, size, nodata_fraction): the same
arguments give byte-identical files, and adding scenes does not change the earlier ones.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eoscale.bands import NODATA, REFLECTANCE_SCALE, SENTINEL2_L2A
from eoscale.classes import WORLDCOVER, ClassTable
from eoscale.errors import InputError, OutputExistsError
from eoscale.sensors import LANDSAT_OLI, SENSORS
from eoscale.synth.cog import write_cog
from eoscale.synth.heights import HEIGHT_NODATA, HEIGHT_STREAM, scene_heights, write_heights
from eoscale.synth.landcover import CLASS_CODES, generate_landcover
from eoscale.synth.landsat import write_landsat
from eoscale.synth.render import render_scene
from eoscale.synth.safe import check_baseline, write_safe
from eoscale.synth.scene import (
    LABEL_CRS,
    LABEL_RESOLUTION_M,
    SCENE_CRS,
    SCENE_RESOLUTION_M,
    scene_transform,
    write_band,
    write_labels,
    write_multiband,
)

LAYOUTS = ("multiband", "perband", "safe", "cog", "landsat")
DEFAULT_BASELINE = "05.10"  # --layout safe: the processing baseline of today's products (with BOA_ADD_OFFSET)
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "eoscale-synth/1"
CLASS_TABLE_FILE = "classes.csv"
DEFAULT_NODATA_FRACTION = 0.05
MIN_SIZE = 64


@dataclass(frozen=True)
class SynthResult:
    """What a synthetic set holds; paths are `out_dir` joined with the manifest's relative paths."""

    out_dir: Path
    layout: str
    scene_ids: list[str]
    scene_paths: list[Path] | list[list[Path]]  # per scene: the file (multiband), its SAFE folder (safe), its folder
    # (cog, landsat: the STAC Item is `item_paths`), or its band files in band order (perband)
    label_paths: list[Path]
    class_table_path: Path
    manifest_path: Path
    item_paths: list[Path] = field(default_factory=list)  # cog, landsat: each scene's STAC Item
    height_paths: list[Path] = field(default_factory=list)  # heights=True: each scene's canopy height COG

    @classmethod
    def from_manifest(cls, out_dir: str | Path) -> SynthResult:
        """Read the `manifest.json` of a set written by `synthesize`."""
        out_dir = Path(out_dir)
        manifest = json.loads((out_dir / MANIFEST).read_text())
        scenes = manifest["scenes"]
        if manifest["layout"] == "multiband":
            scene_paths: list = [out_dir / s["image"] for s in scenes]
        elif manifest["layout"] == "safe":
            scene_paths = [out_dir / s["product"] for s in scenes]
        elif manifest["layout"] in ("cog", "landsat"):
            scene_paths = [out_dir / s["folder"] for s in scenes]
        else:
            scene_paths = [[out_dir / p for p in s["bands"].values()] for s in scenes]
        return cls(
            out_dir=out_dir,
            layout=manifest["layout"],
            scene_ids=[s["id"] for s in scenes],
            scene_paths=scene_paths,
            label_paths=[out_dir / s["labels"] for s in scenes],
            class_table_path=out_dir / manifest["class_table"],
            manifest_path=out_dir / MANIFEST,
            item_paths=[out_dir / s["item"] for s in scenes if "item" in s],
            height_paths=[out_dir / s["heights"] for s in scenes if "heights" in s],
        )


def class_table() -> ClassTable:
    """The classes synthetic maps use: the WorldCover rows of `CLASS_CODES`, codes, names and colours kept."""
    return ClassTable(tuple(c for c in WORLDCOVER.classes if c.code in CLASS_CODES))


def synthesize(
    out_dir: str | Path,
    *,
    scenes: int = 5,
    size: int | tuple[int, int] = 1000,
    seed: int = 0,
    layout: str = "multiband",
    nodata_fraction: float = DEFAULT_NODATA_FRACTION,
    baseline: str = DEFAULT_BASELINE,
    overwrite: bool = False,
    on_scene: Callable[[int, str], None] | None = None,
    heights: bool = False,
) -> SynthResult:
    """Write a set of synthetic Sentinel-2 L2A scenes with land-cover labels into `out_dir`.

    `size` is pixels of 10 m, square or (height, width); `nodata_fraction` is the mean share of a scene under
    cloud (0 for none; above 0, some scenes also lose a wedge beyond the swath edge); `on_scene(i, id)` is
    called after each scene is written; `baseline` is the processing baseline a SAFE product (`layout="safe"`) is
    written under (the same scene holds the same reflectance under any); `heights` adds a canopy height raster
    per scene (`eoscale.synth.heights`), leaving every other file as it is without.
    """
    shape = _check_arguments(scenes, size, seed, layout, nodata_fraction)
    check_baseline(baseline)
    scenes, seed, nodata_fraction = int(scenes), int(seed), float(nodata_fraction)
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    _check_output(target, out_dir, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        table = class_table()
        table.save(staging / CLASS_TABLE_FILE)
        records = []
        for index in range(scenes):
            records.append(_write_scene(staging, index, shape, seed, layout, nodata_fraction, table, baseline, heights))
            if on_scene is not None:
                on_scene(index, records[-1]["id"])
        manifest = _manifest(records, shape, seed, layout, nodata_fraction)
        if layout in ("safe", "cog"):
            manifest["processing_baseline"] = baseline
        if heights:
            manifest["heights"] = {"name": "canopy_height", "units": "m", "crs": LABEL_CRS.to_string(),
                                   "resolution_m": LABEL_RESOLUTION_M, "nodata": HEIGHT_NODATA}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return SynthResult.from_manifest(out_dir)


def scene_id(index: int) -> str:
    return f"scene_{index:03d}"


def _write_scene(
    root: Path, index: int, shape: tuple[int, int], seed: int, layout: str, nodata_fraction: float, table: ClassTable,
    baseline: str = DEFAULT_BASELINE, heights: bool = False,
) -> dict:
    sid = scene_id(index)
    rng = np.random.default_rng([seed, index])  # one stream per scene: scene i never depends on the others
    landcover = generate_landcover(shape, rng)
    bands = render_scene(landcover, rng, nodata_fraction=nodata_fraction)
    transform = scene_transform(index, shape)
    tags = {
        "scene_id": sid,
        "generator": "eoscale synth (synthetic Sentinel-2 L2A)",
        "seed": str(seed),
        "reflectance_scale": str(REFLECTANCE_SCALE),
    }
    record: dict = {"id": sid}
    (root / "scenes").mkdir(exist_ok=True)
    if layout == "multiband":
        record["image"] = f"scenes/{sid}.tif"
        write_multiband(root / record["image"], bands, shape, transform, tags)
    elif layout == "safe":
        written = write_safe(root / "scenes", index, bands, transform, baseline=baseline)
        record["product"] = f"scenes/{written['product']}"
        record["bands"] = {band: f"scenes/{path}" for band, path in written["bands"].items()}
    elif layout in ("cog", "landsat"):
        if layout == "cog":
            written = write_cog(root / "scenes", index, bands, transform, baseline=baseline)
        else:
            written = write_landsat(root / "scenes", index, bands, landcover.classes, transform)
        record["folder"] = f"scenes/{written['folder']}"
        record["item"] = f"scenes/{written['item']}"
        record["bands"] = {band: f"scenes/{path}" for band, path in written["bands"].items()}
    else:
        (root / "scenes" / sid).mkdir()
        record["bands"] = {}
        for band, image in zip(SENTINEL2_L2A, bands, strict=True):
            path = f"scenes/{sid}/{sid}_{band.name}.tif"
            write_band(root / path, band, image, transform, tags)
            record["bands"][band.name] = path
    (root / "labels").mkdir(exist_ok=True)
    record["labels"] = f"labels/{sid}_landcover.tif"
    write_labels(root / record["labels"], landcover.classes, transform, table, {"scene_id": sid, "source": "eoscale synth"})
    if heights:
        _write_heights(root, record, index, seed, landcover, bands, transform)
    west, north = transform.c, transform.f
    record["bounds"] = [west, north - shape[0] * SCENE_RESOLUTION_M, west + shape[1] * SCENE_RESOLUTION_M, north]
    return record


def _write_heights(root: Path, record: dict, index: int, seed: int, landcover, bands: list[np.ndarray], transform) -> None:
    """The scene's canopy heights, from their own random stream (the scene's is left as it was)."""
    by_name = {band.name: image for band, image in zip(SENTINEL2_L2A, bands, strict=True)}
    values = scene_heights(landcover, by_name["B04"], by_name["B08"], np.random.default_rng([seed, index, HEIGHT_STREAM]))
    (root / "heights").mkdir(exist_ok=True)
    record["heights"] = f"heights/{record['id']}_height.tif"
    write_heights(root / record["heights"], values, transform, {"scene_id": record["id"], "source": "eoscale synth"})


def _manifest(records: list[dict], shape: tuple[int, int], seed: int, layout: str, nodata_fraction: float) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "generator": "eoscale synth",
        "seed": seed,
        "size": list(shape),
        "layout": layout,
        "nodata_fraction": nodata_fraction,
        "crs": SCENE_CRS.to_string(),
        "resolution_m": 30.0 if layout == "landsat" else SCENE_RESOLUTION_M,
        "bands": [b.to_dict() for b in (SENSORS[LANDSAT_OLI].table("landsat-9") if layout == "landsat" else SENTINEL2_L2A)],
        "reflectance_scale": REFLECTANCE_SCALE,
        "nodata": NODATA,
        "label_crs": LABEL_CRS.to_string(),
        "label_resolution_m": LABEL_RESOLUTION_M,
        "label_nodata": 0,
        "class_table": CLASS_TABLE_FILE,
        "scenes": records,
    }


def _check_arguments(scenes: int, size: int | tuple[int, int], seed: int, layout: str, nodata_fraction: float) -> tuple[int, int]:
    """Validate the arguments of `synthesize`; returns the scene shape (height, width)."""
    if not _is_int(scenes) or scenes < 1:
        raise InputError(f"scenes={scenes!r}: give a whole number of scenes, at least 1")
    shape = (size, size) if _is_int(size) else tuple(size) if isinstance(size, (tuple, list)) else None
    if shape is None or len(shape) != 2 or not all(_is_int(s) for s in shape):
        raise InputError(f"size={size!r}: give pixels as one whole number or (height, width)")
    if min(shape) < MIN_SIZE:
        raise InputError(f"size={size!r}: scenes need at least {MIN_SIZE} pixels on each side")
    if not _is_int(seed) or seed < 0:
        raise InputError(f"seed={seed!r}: give a whole number >= 0")
    if layout not in LAYOUTS:
        raise InputError(f"layout={layout!r}: expected one of {', '.join(LAYOUTS)}")
    if isinstance(nodata_fraction, bool) or not isinstance(nodata_fraction, (int, float)) or not 0 <= nodata_fraction <= 0.5:
        raise InputError(f"nodata_fraction={nodata_fraction!r}: give a fraction between 0 and 0.5")
    return int(shape[0]), int(shape[1])


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_output(target: Path, given: Path, overwrite: bool) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise OutputExistsError(f"output '{given}' exists and is not a directory: choose another path")
    if not any(target.iterdir()):
        return
    if not overwrite:
        raise OutputExistsError(f"output directory '{given}' exists and is not empty: pass --overwrite to replace it")
    if not (target / MANIFEST).is_file():
        # --overwrite replaces a synthetic set, never an unrelated directory someone pointed us at by mistake
        raise OutputExistsError(
            f"output directory '{given}' is not empty and holds no {MANIFEST} of 'eoscale synth': "
            "not replacing it, even with --overwrite; choose another path"
        )


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename the finished `staging` directory to `target`, replacing an old set or an empty directory."""
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the set should look like any other directory
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
        os.replace(target, old)  # onto the empty directory mkdtemp made
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
