"""Scenes of several sensors as one: each reference scene with the other sensors' bands warped onto its grid.

A store (or a prediction) of several sensors keeps every sensor's bands on the grid of the *reference sensor*'s scenes
(by default the first of the given sensors in the registry's order, `eoscale.sensors`: the optical one), each sensor a
group of consecutive bands (`eoscale.sensors.groups`). For each reference scene, the scene of each other sensor that
covers it is chosen: the largest share of the reference scene's footprint covered (to a percent), then the nearest
acquisition date, then the scene id. Its bands are warped onto the reference grid once, as its own reader reads them
(`eoscale.raster.reader`: its masks, its border noise, a radar band resampled in linear power and then taken to dB on
the store's scale; bilinear, or the average where the other sensor's pixels are finer by half or more), into one
uint16 GeoTIFF a (reference scene, sensor) in the command's work folder, written under a temporary name and moved, so
a resumed ingest reuses it. Where that sensor has no data (outside its swath, its border noise, its own masks), every
one of its bands holds the reference scene's nodata, and only its bands: the reference sensor's clouds stay nodata in
the reference bands only (`eoscale.raster.reader.MaskedWindow.groups`).

The files are appended to the reference scene as `BandFile`s tagged with their sensor (`BandFile.sensor`), as the DEM's
static layers are (`eoscale.raster.static`); the source files join the scene's `paths` (an ingest's fingerprint and
lineage), and `Scene.fused` records per sensor which scene was used, its date, the days from the reference date, its
orbit direction and the share it covers. `predict --missing-sensor dropout` stands a sensor without a scene by a file
of nodata (`missing_file`), which reads as that sensor's channels at 0: the sensor-dropout path of training.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.warp import transform_bounds
from rasterio.windows import Window

from eoscale.errors import InputError
from eoscale.inputs.missing import MISSING_SENSOR, check_missing, dropout_fix, refused_sensor
from eoscale.raster.places import grid_share
from eoscale.raster.reader import SceneReader, gdal_cache
from eoscale.raster.scene import BandFile, Scene
from eoscale.sensors import SENSORS, get_sensor
from eoscale.sensors.copdem import COPDEM

STRIP_PIXELS = 4_000_000  # pixels of one sensor's bands warped at a time


def sensors_in_order(scenes: list[Scene]) -> list[str]:
    """The sensors of `scenes`, in the registry's order (`eoscale.sensors`: Sentinel-2 first)."""
    present = {s.sensor for s in scenes}
    order = list(SENSORS)
    return sorted(present, key=lambda name: order.index(name) if name in order else len(order))


def reference_sensor(scenes: list[Scene], reference: str | None = None) -> str:
    """`reference` (checked to be among the scenes' sensors), else the first of their sensors in the registry's order."""
    present = sensors_in_order(scenes)
    if reference is None:
        return present[0]
    name = SENSORS[reference.strip().lower()].name if reference.strip().lower() in SENSORS else None
    if name not in present:
        raise InputError(f"--reference-sensor {reference!r}: no scene of it was given (the scenes are of "
                         f"{', '.join(present)}): name one of those, or give its scenes")
    return name


def split_by_sensor(scenes: list[Scene], reference: str) -> tuple[list[Scene], dict[str, list[Scene]]]:
    """The reference sensor's scenes, and the others' by sensor (registry order). A DEM given as scenes is refused:
    it goes beside the scenes with --static, which also derives its slope."""
    if COPDEM in {s.sensor for s in scenes}:
        dem = next(s for s in scenes if s.sensor == COPDEM)
        raise InputError(f"scene {dem.id!r} is a DEM ({get_sensor(COPDEM).title}): give it with --static DEM.tif (it "
                         f"becomes elevation and slope bands on every scene's grid), not as a scene")
    refs = [s for s in scenes if s.sensor == reference]
    others = {name: [s for s in scenes if s.sensor == name] for name in sensors_in_order(scenes) if name != reference}
    return refs, others


def _days(reference: Scene, other: Scene) -> int | None:
    if reference.date is None or other.date is None:
        return None
    return (other.date - reference.date).days


def choose(reference: Scene, candidates: list[Scene]) -> tuple[Scene, float] | None:
    """The scene of `candidates` (one sensor's) to warp onto `reference` and the share of it that it covers: the
    largest share to a percent, then the nearest date (an undated scene after dated ones), then the id; None where
    none overlaps it."""
    scored = [(c, grid_share(reference, c)) for c in candidates]
    scored = [(c, share) for c, share in scored if share > 0]
    if not scored:
        return None

    def key(item: tuple[Scene, float]) -> tuple:
        scene, share = item
        days = _days(reference, scene)
        return (-round(share, 2), abs(days) if days is not None else float("inf"), scene.id)

    return min(scored, key=key)


def pair_scenes(refs: list[Scene], others: dict[str, list[Scene]], *, missing: str = "refuse",
                dropout_hint: bool = False) -> list[dict[str, tuple[Scene, float] | None]]:
    """For each reference scene, the chosen scene of each other sensor (`choose`); one that none covers is refused
    in one line (`missing="refuse"`; `dropout_hint`: the line names `--missing-sensor dropout` too), or left None
    (`"dropout"`: read as nodata)."""
    check_missing(missing)
    pairs = []
    for ref in refs:
        chosen = {name: choose(ref, scenes) for name, scenes in others.items()}
        refused = refused_sensor([name for name, pick in chosen.items() if pick is None], missing)
        if refused is not None:  # the one rule of predict and serve (eoscale.inputs.missing)
            raise InputError(missing_message(ref, refused, given=bool(others[refused]), dropout=dropout_hint))
        pairs.append(chosen)
    return pairs


def missing_message(ref: Scene, sensor: str, *, given: bool, dropout: bool = False) -> str:
    title = get_sensor(sensor).title
    where = f"none of the {title} scenes given overlaps it" if given else f"no {title} scene was given"
    fixes = f"give a {title} scene that covers it (--scenes or --stac)"
    if dropout:
        fixes += f", or {dropout_fix()}"
    else:
        fixes += " or leave the scene out"
    return f"scene {ref.id!r} has no {sensor} data: {where}; {fixes}"


def _pixel_size(scene: Scene, crs) -> float:
    """`scene`'s pixel width in the units of `crs`."""
    left, _, right, _ = transform_bounds(scene.crs, crs, *scene.bounds, densify_pts=21)
    return (right - left) / scene.width


def on_grid(reference: Scene, other: Scene) -> tuple[Scene, Resampling]:
    """`other` with `reference`'s grid as its own (its reader then warps its files onto it), its border-noise margin in
    the new pixels, and the resampling its finer or coarser pixels call for."""
    ratio = _pixel_size(other, reference.crs) / max(abs(reference.transform.a), 1e-12)
    noise = other.border_noise
    if noise is not None:
        noise = replace(noise, margin_px=max(1, int(round(noise.margin_px * ratio))))
    regridded = replace(other, crs=reference.crs, transform=reference.transform, width=reference.width,
                        height=reference.height, nodata=reference.nodata, border_noise=noise)
    return regridded, Resampling.average if ratio <= 0.5 else Resampling.bilinear


def fused_file(folder: Path, reference: Scene, sensor: str) -> Path:
    return folder / f"{reference.id}.{sensor}.tif"


def _profile(reference: Scene, count: int) -> dict:
    profile = {"driver": "GTiff", "width": reference.width, "height": reference.height, "count": count,
               "dtype": "uint16", "crs": reference.crs, "transform": reference.transform, "nodata": reference.nodata,
               "compress": "deflate", "predictor": 2}
    if reference.width >= 256 and reference.height >= 256:
        profile.update(tiled=True, blockxsize=256, blockysize=256)
    return profile


def write_fused(reference: Scene, other: Scene, path: Path) -> None:
    """`other`'s bands on `reference`'s grid as a uint16 GeoTIFF at `path` (module docstring), in strips of rows,
    written to a temporary name and moved."""
    regridded, resampling = on_grid(reference, other)
    nodata = np.uint16(reference.nodata)
    rows = max(1, STRIP_PIXELS // max(reference.width * len(other.bands), 1))
    tmp = path.with_name(path.name + ".tmp")
    try:
        with SceneReader(regridded, resampling=resampling) as reader, gdal_cache(reader.cache_bytes()), \
                rasterio.open(tmp, "w", **_profile(reference, len(other.bands))) as dst:
            for top in range(0, reference.height, rows):
                height = min(rows, reference.height - top)
                block = reader.read_masked(top, 0, height, reference.width)
                pixels = block.pixels
                pixels[:, ~block.valid] = nodata
                dst.write(pixels, window=Window(0, top, reference.width, height))
            dst.descriptions = tuple(other.band_names)
            dst.update_tags(sensor=other.sensor, scene=other.id, reference=reference.id,
                            resampling=resampling.name)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def missing_file(reference: Scene, sensor: str, bands: list[str], path: Path) -> None:
    """A file of `bands` at nodata all over `reference`'s grid (sparse: no block is written), for a sensor that has no
    scene there (`predict --missing-sensor dropout`)."""
    tmp = path.with_name(path.name + ".tmp")
    profile = {**_profile(reference, len(bands)), "sparse_ok": True}
    with rasterio.open(tmp, "w", **profile) as dst:
        dst.descriptions = tuple(bands)
        dst.update_tags(sensor=sensor, scene="", reference=reference.id, missing="dropout")
    os.replace(tmp, path)


def record(reference: Scene, other: Scene | None, share: float, sensor: str) -> dict:
    """What the store (and a map's lineage) keeps of the scene of `sensor` used for `reference`."""
    if other is None:
        return {"sensor": sensor, "scene": None, "missing": True}
    acquisition = other.acquisition or {}
    return {"sensor": sensor, "scene": other.id, "paths": list(other.paths),
            "date": other.date.isoformat() if other.date else None, "days": _days(reference, other),
            "orbit_state": acquisition.get("orbit_state"), "platform": other.platform, "overlap": round(share, 4)}


def with_other_sensors(refs: list[Scene], pairs: list[dict[str, tuple[Scene, float] | None]], folder: Path, *,
                       bands: dict[str, list[str]] | None = None) -> list[Scene]:
    """`refs`, each with its paired scenes' bands appended (sensor after sensor, in the pairs' order) from files in
    `folder` (those already there, a resumed run's, kept); `bands` names each sensor's bands where a pair is None
    (dropout), else a missing pair is an error."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for ref, chosen in zip(refs, pairs, strict=True):
        extra, records, paths = [], [], list(ref.paths)
        for sensor, pick in chosen.items():
            path = fused_file(folder, ref, sensor)
            if pick is None:
                if bands is None or sensor not in bands:
                    raise InputError(missing_message(ref, sensor, given=False))
                names = list(bands[sensor])
                if not path.exists():
                    missing_file(ref, sensor, names, path)
                records.append(record(ref, None, 0.0, sensor))
            else:
                other, share = pick
                names = other.band_names
                if not path.exists():
                    write_fused(ref, other, path)
                records.append(record(ref, other, share, sensor))
                paths += [p for p in other.paths if p not in paths]
            clash = [n for n in names if n in ref.band_names or any(b.name == n for b in extra)]
            if clash:
                raise InputError(f"band {clash[0]!r} is both {sensor}'s and another sensor's in scene {ref.id!r}: "
                                 f"rename one with --band-map")
            extra += [BandFile(name, str(path), i + 1, sensor=sensor) for i, name in enumerate(names)]
        out.append(replace(ref, bands=ref.bands + tuple(extra), paths=tuple(paths), fused=tuple(records)))
    return out


def blank_scene(grid: Scene, sensor: str, bands: list[str], folder: Path) -> Scene:
    """A scene of `sensor` with no data anywhere on `grid`'s grid (its `bands` a file of nodata, `missing_file`): the
    reference of a place that no scene of the reference sensor sees, mapped from the other sensors alone (`predict
    --missing-sensor dropout`: the reference sensor's channels read 0, as a dropped sensor). It keeps `grid`'s id and
    date, so the map is named after the scene it is the grid of."""
    folder.mkdir(parents=True, exist_ok=True)
    path = fused_file(folder, grid, sensor)
    if not path.exists():
        missing_file(grid, sensor, bands, path)
    return Scene(id=grid.id, bands=tuple(BandFile(name, str(path), i + 1) for i, name in enumerate(bands)),
                 crs=grid.crs, transform=grid.transform, width=grid.width, height=grid.height, nodata=grid.nodata,
                 sensor=sensor, date=grid.date)


def check_trained(scenes: list[Scene], groups) -> list[str]:
    """The sensors the checkpoint (`groups`: its contract's `SensorGroup`s) was trained on, a DEM's aside; a scene of
    another sensor, or a DEM given as a scene, is refused in one line."""
    trained = [g.name for g in groups if g.name != COPDEM]
    foreign = [name for name in sensors_in_order(scenes) if name not in trained]
    if foreign:
        raise InputError(f"the checkpoint was trained on {', '.join(trained)} and was given {foreign[0]} scenes: "
                         f"leave them out, or use a checkpoint trained with {foreign[0]}")
    split_by_sensor(scenes, groups[0].name)  # a DEM among the scenes: one line
    return trained


def unseen(refs: list[Scene], scenes: list[Scene]) -> list[Scene]:
    """The `scenes` (another sensor's) that no reference scene overlaps at all: places only they see."""
    return [s for s in scenes if not any(grid_share(ref, s) > 0 for ref in refs)]


def work_folder() -> Path:
    """A temporary folder for the warped files of one `predict`, removed when the process exits."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="eoscale-fused-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def predict_other_sensors(scenes: list[Scene], groups, *, missing: str = "refuse",
                          say: Callable[[str], None] | None = None) -> list[Scene]:
    """`predict` of a checkpoint of several sensors (`groups`: its contract's `SensorGroup`s, the reference sensor
    first, a DEM's last): the reference sensor's `scenes`, each with the other sensors' bands warped onto its grid as
    an ingest warps them, in a temporary folder removed when the process exits. A sensor the checkpoint was not
    trained with is one line; a sensor missing over a scene is refused in one line, or (`missing="dropout"`) read as
    nodata. A scene of the next sensor that no reference scene overlaps (a place seen by radar only: a cloudy season)
    is mapped on its own grid, the reference sensor's channels read as nodata (`missing="dropout"`); without that
    option it is left out where reference scenes were given (`say` names it: a user gives a place's optical scenes and
    the folder of every radar pass of the region, as a season's predict takes them), else refused in one line naming
    the option."""
    reference = groups[0].name
    trained = check_trained(scenes, groups)
    refs, others = split_by_sensor(scenes, reference)
    if not refs and not any(others.values()):
        raise InputError(f"no {reference} scene given: the checkpoint maps onto its reference sensor's scenes "
                         f"({reference}); give them with --scenes or --stac")
    folder = work_folder()
    # the next sensor's scenes that no reference scene overlaps: each mapped on its own grid (a place seen by radar only)
    lonely = unseen(refs, others.get(trained[1], []) if len(trained) > 1 else [])
    if lonely and missing != "dropout":
        if not refs:
            raise InputError(missing_message(lonely[0], reference, given=False, dropout=True))
        (say or (lambda line: None))(f"left out {len(lonely)} scene(s) that overlap none of the {reference} scenes "
                                     f"given: {', '.join(s.id for s in lonely)}")
        others[trained[1]] = [s for s in others[trained[1]] if s not in lonely]
        lonely = []
    refs += [blank_scene(s, reference, list(groups[0].bands), folder / "blank") for s in lonely]
    others = {name: others.get(name, []) for name in trained[1:]}
    pairs = pair_scenes(refs, others, missing=missing, dropout_hint=True)
    return with_other_sensors(refs, pairs, folder, bands={g.name: list(g.bands) for g in groups[1:]})


def sensors_record(scene: Scene) -> list[dict]:
    """The groups of `scene`'s bands in order, as a store's `sensors` attribute holds them: its own sensor's, each
    other sensor's (`BandFile.sensor`), its static layers' (the Copernicus DEM's)."""
    groups: list[dict] = []
    for band in scene.bands:
        name = COPDEM if band.static else band.sensor or scene.sensor
        if groups and groups[-1]["name"] == name:
            groups[-1]["bands"].append(band.name)
        else:
            groups.append({"name": name, "bands": [band.name]})
    return groups


__all__ = ["MISSING_SENSOR", "blank_scene", "check_trained", "choose", "fused_file", "missing_file", "missing_message", "on_grid",
           "pair_scenes", "predict_other_sensors", "record", "reference_sensor", "sensors_in_order", "sensors_record", "split_by_sensor", "unseen",
           "with_other_sensors", "work_folder", "write_fused"]
