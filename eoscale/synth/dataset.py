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
    sar/S1A_IW_GRDH_1SDV_…/                   --sensors s2,s1: Sentinel-1 backscatter COGs (vv, vh) and their STAC Item
                                              of the same ground (`eoscale.synth.sar`)
    dem/<scene_id>/Copernicus_DSM_COG_…_DEM.* --sensors s2,dem: a Copernicus DEM tile under the scene and its STAC Item
                                              (`eoscale.synth.dem`); with --dates, each place's passes on their own
                                              dates and its DEM (`eoscale.synth.season_sensors`)
    heights/<scene_id>_height.tif             with heights=True: canopy height in m, float32 COG, EPSG:3035 at
                                              20 m, nodata -9999 (`eoscale.synth.heights`)
    manifest.json
    --change (multiband): scenes/<scene_id>_after.tif, labels/<scene_id>_after_landcover.tif and
    labels/<scene_id>_change.tif (codes of change_classes.csv): the same place a year later (`eoscale.synth.change`)

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
from eoscale.synth.change import (
    CHANGE_TABLE,
    change_areas,
    change_landcover,
    date_tags,
    dates_of,
    write_change_table,
)
from eoscale.synth.cog import write_cog
from eoscale.synth.heights import HEIGHT_NODATA, HEIGHT_STREAM, scene_heights, write_heights
from eoscale.synth.landcover import CLASS_CODES, generate_landcover
from eoscale.synth.landsat import write_landsat
from eoscale.synth.phenology import SEASON_CLASSES
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
from eoscale.synth.season import DATES_FILE, acquisition_dates, check_season, write_season

LAYOUTS = ("multiband", "perband", "safe", "cog", "landsat")
SENSORS_WRITTEN = ("s2", "s1", "dem")  # --sensors: the optical scenes (always), Sentinel-1 backscatter, a DEM
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
    sar_items: list[Path] = field(default_factory=list)  # --sensors …s1: each scene's Sentinel-1 Item (its folder beside)
    dem_items: list[Path] = field(default_factory=list)  # --sensors …dem: each scene's DEM Item (the COG beside it)
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
            sar_items=[out_dir / s["sentinel1"]["item"] for s in scenes if "sentinel1" in s]
            + [out_dir / s["item"] for s in manifest.get("sentinel1", [])],  # a season's passes (own dates)
            dem_items=[out_dir / s["dem"]["item"] for s in scenes if "dem" in s]
            + [out_dir / d["item"] for d in manifest.get("dems", [])],  # a season's DEMs, one a place
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
    change: bool = False,
    on_scene: Callable[[int, str], None] | None = None,
    sensors: tuple[str, ...] | list[str] = ("s2",),
    dates: int | None = None,
    heights: bool = False,
) -> SynthResult:
    """Write a set of synthetic Sentinel-2 L2A scenes with land-cover labels into `out_dir`.

    `size` is pixels of 10 m, square or (height, width); `nodata_fraction` is the mean share of a scene under
    cloud (0 for none; above 0, some scenes also lose a wedge beyond the swath edge); `on_scene(i, id)` is
    called after each scene is written; `baseline` is the processing baseline a SAFE product (`layout="safe"`) is
    written under (the same scene holds the same reflectance under any). `sensors` adds, of the same ground, Sentinel-1
    backscatter ("s1") and a DEM ("dem") beside the optical scenes ("s2", always written). `change` adds a second date
    of each scene with known changes and the change labels (`eoscale.synth.change`; multiband only); the first dates'
    pixels are the same as without it. With `dates`, each of the `scenes` places is seen on that many dates through a
    year, its classes changing with the season (`eoscale.synth.season`). `heights` adds a canopy height raster
    per scene (`eoscale.synth.heights`), leaving every other file as it is without.
    """
    shape = _check_arguments(scenes, size, seed, layout, nodata_fraction)
    extra = _check_sensors(sensors)
    if change and layout != "multiband":
        raise InputError(f"change pairs are written as multiband GeoTIFFs: drop --layout {layout} or --change")
    if change and dates is not None:
        raise InputError("--change and --dates write different sets (a pair of years, a season): give one of them")
    if dates is not None:
        check_season(dates, layout)
        if heights:
            raise InputError("a season (--dates) is written without heights: drop --heights, or --dates")
    check_baseline(baseline)
    scenes, seed, nodata_fraction = int(scenes), int(seed), float(nodata_fraction)
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    _check_output(target, out_dir, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        table = class_table() if dates is None else SEASON_CLASSES
        table.save(staging / CLASS_TABLE_FILE)
        if change:
            write_change_table(staging)
        records = []
        if dates is not None:
            records = write_season(staging, places=scenes, dates=int(dates), shape=shape, seed=seed, layout=layout,
                                   cloud_fraction=nodata_fraction, baseline=baseline, on_scene=on_scene)
            if extra:  # the season's Sentinel-1 passes on their own dates and each place's DEM
                from eoscale.synth.season_sensors import write_season_sensors

                passes, dems = write_season_sensors(staging, places=scenes, dates=int(dates), shape=shape, seed=seed,
                                                    extra=extra)
        for index in range(scenes if dates is None else 0):
            records.append(_write_scene(staging, index, shape, seed, layout, nodata_fraction, table, baseline, extra,
                                        change, heights))
            if on_scene is not None:
                on_scene(index, records[-1]["id"])
        manifest = _manifest(records, shape, seed, layout, nodata_fraction)
        if dates is not None:
            manifest.update(dates=[d.date().isoformat() for d in acquisition_dates(int(dates))], dates_file=DATES_FILE)
            if extra:
                manifest.update({k: v for k, v in (("sentinel1", passes), ("dems", dems)) if v})
        if layout in ("safe", "cog"):
            manifest["processing_baseline"] = baseline
        if extra:
            manifest["sensors"] = ["s2", *extra]
        if change:
            manifest["change_class_table"] = "change_classes.csv"
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
    baseline: str = DEFAULT_BASELINE, extra: tuple[str, ...] = (), change: bool = False, heights: bool = False,
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
    if change:
        first, second = dates_of(index)
        tags_a = {**tags, **date_tags(first)}
    if layout == "multiband":
        record["image"] = f"scenes/{sid}.tif"
        write_multiband(root / record["image"], bands, shape, transform, tags_a if change else tags)
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
    if "s1" in extra:
        from eoscale.synth.sar import write_sentinel1

        written = write_sentinel1(root / "sar", index, landcover, transform, seed=seed)
        record["sentinel1"] = {"folder": f"sar/{written['folder']}", "item": f"sar/{written['item']}",
                               "bands": {band: f"sar/{path}" for band, path in written["bands"].items()}}
    if "dem" in extra:
        from eoscale.synth.dem import write_dem

        written = write_dem(root / "dem", index, landcover, transform, seed=seed, scene=sid)
        record["dem"] = {"file": f"dem/{written['dem']}", "item": f"dem/{written['item']}"}
    if change:
        record["date"] = first.isoformat()
        record["after"] = _write_after(root, index, sid, landcover, shape, seed, nodata_fraction, table, transform,
                                       {**tags, **date_tags(second)}, second)
    if heights:
        _write_heights(root, record, index, seed, landcover, bands, transform)
    west, north = transform.c, transform.f
    record["bounds"] = [west, north - shape[0] * SCENE_RESOLUTION_M, west + shape[1] * SCENE_RESOLUTION_M, north]
    return record


def _write_after(root: Path, index: int, sid: str, before, shape: tuple[int, int], seed: int, nodata_fraction: float,
                 table: ClassTable, transform, tags: dict[str, str], date) -> dict:
    """The scene's second date: its changed land cover rendered anew (its own stream: `[seed, index, 1]`, so the
    first date's pixels are those of a set written without --change), its land cover and the change labels."""
    rng = np.random.default_rng([seed, index, 1])
    after, change = change_landcover(before, rng)
    bands = render_scene(after, rng, nodata_fraction=nodata_fraction)
    record = {"image": f"scenes/{sid}_after.tif", "date": date.isoformat(),
              "labels": f"labels/{sid}_after_landcover.tif", "change": f"labels/{sid}_change.tif",
              "change_hectares": change_areas(change, SCENE_RESOLUTION_M**2)}
    write_multiband(root / record["image"], bands, shape, transform, {**tags, "scene_id": f"{sid}_after"})
    source = {"scene_id": sid, "source": "eoscale synth --change"}
    write_labels(root / record["labels"], after.classes, transform, table, source)
    write_labels(root / record["change"], change, transform, CHANGE_TABLE, source, description="change class")
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


def _check_sensors(sensors: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The sensors written besides the optical scenes, in a fixed order; the optical scenes must be among `sensors`."""
    given = [str(s).strip().lower() for s in sensors]
    unknown = [s for s in given if s not in SENSORS_WRITTEN]
    if unknown or "s2" not in given:
        raise InputError(f"sensors={','.join(given)!r}: give s2 (the optical scenes, always written) and any of "
                         f"s1 (Sentinel-1 backscatter), dem (a Copernicus DEM), e.g. --sensors s2,s1,dem")
    return tuple(s for s in SENSORS_WRITTEN[1:] if s in given)


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
