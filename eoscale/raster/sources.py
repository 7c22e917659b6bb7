"""Scene sources: the dispatcher that opens each scene through the product-format registry, and the checks made of a
set of scenes before any work starts.

A scene path is opened by the first product format that recognises it (`eoscale.raster.formats`: a Sentinel-2 L2A
SAFE product, a STAC Item file, a Landsat C2 L2 folder, a band folder of one file per band, a multi-band file); a folder
of products (SAFE products) stands for its products. Bands are resampled onto the scene's *reference grid*: the grid
of its finest band (the file's own grid for a multi-band file).

Every scene knows its sensor (`eoscale.sensors`): band names are only unique within one. Files in a band directory
that name no band (cloud masks, TCI previews, AOT/WVP layers, thumbnails) are skipped and listed in `Scene.skipped`,
for the caller to report once (`describe_skipped` says what a recognised one is: a cloud mask, a preview, …).

The scene types (`Scene`, `BandFile`, `ClassMask`) and the raster checks live in `eoscale.raster.scene`; they are
re-exported here, where they were first.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from eoscale.bands import normalise_band_name
from eoscale.errors import InputError
from eoscale.raster.formats import detect_format, products_in
from eoscale.raster.formats.stac import open_items
from eoscale.raster.scene import (  # noqa: F401  (the base types, at their old path)
    IMAGE_SUFFIXES,
    RASTER_SUFFIXES,
    SUPPORTED_DTYPES,
    BandFile,
    ClassMask,
    Scene,
    check_crs,
    check_dtype,
    expand_paths,
    nodata_of,
    open_raster,
    parse_date,
    tiff_date,
)
from eoscale.sensors import get_sensor, layer_in_file_name, sensor_of_bands


def scene_paths(patterns: list[str]) -> list[str]:
    """The scenes named by `patterns` (`expand_paths`), a folder of products (SAFE) standing for its products."""
    return [q for p in expand_paths(patterns, what="scene") for q in (products_in(p) or [p])]


def open_scene(path: str, *, band_names: list[str] | None = None, bands: list[str] | None = None,
               scl_classes: tuple[int, ...] | None = None) -> Scene:
    """Describe the scene at `path`, opened by the first product format that recognises it (`band_names`: a
    multi-band file's names; `bands`: a product's bands to take, default the sensor's usual set; `scl_classes`: the
    mask layer's classes that are masked)."""
    return detect_format(path).open(path, band_names=band_names, bands=bands, scl_classes=scl_classes)


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
        if scene.sensor != first.sensor and "sentinel-1" in (scene.sensor, first.sensor):
            radar, other = (scene, first) if scene.sensor == "sentinel-1" else (first, scene)
            raise InputError(
                f"scene {radar.id!r} holds Sentinel-1 radar bands ({', '.join(radar.band_names)}) but {other.id!r} "
                f"holds {get_sensor(other.sensor).title} bands and they could not be opened as two sensors: give them "
                f"without --bands (each sensor's usual bands), or ingest them separately; radar backscatter cannot be "
                f"mapped onto another sensor's bands"
            )
        if scene.sensor != first.sensor:
            raise InputError(
                f"scene {scene.id!r} holds {get_sensor(scene.sensor).title} bands ({', '.join(scene.band_names)}) "
                f"but {first.id!r} holds {get_sensor(first.sensor).title} bands: ingest them into separate stores, "
                f"or map one's bands onto the other's with --band-map (e.g. SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A), "
                f"or keep each its own bands on one grid with --reference-sensor {first.sensor}"
            )


def open_scenes(patterns: list[str], *, bands: list[str] | None = None, band_names: list[str] | None = None,
                band_map: dict[str, str] | None = None, scl_classes: tuple[int, ...] | None = None,
                stac: list[str] | None = None, several_sensors: bool = False) -> list[Scene]:
    """All scenes named by `patterns` and by the STAC Items `stac` (`eoscale.raster.stac`), renamed by `band_map`,
    checked to hold one sensor's bands and to share one band set (the `bands` subset when given). With
    `several_sensors`, scenes of several sensors may be given (`eoscale.raster.fused` pairs them): each sensor's
    scenes share one band set (its bands of `bands`, or its products' usual set where `bands` names none of them)."""
    if several_sensors:
        try:
            opened = _open(patterns, None, band_names=band_names, scl_classes=scl_classes, stac=stac)
        except InputError:
            opened = []  # one sensor's products that need their --bands to open: as without several sensors
        scenes = [map_scene_bands(scene, band_map or {}) for scene in opened]
        if len({s.sensor for s in scenes}) > 1:
            return _several_sensors(scenes, bands)
        if opened and (band_map or not bands):  # opened as one sensor's scenes would be: not again
            return _one_sensor(patterns, bands=bands, band_names=band_names, band_map=band_map,
                               scl_classes=scl_classes, stac=stac, opened=opened)
    return _one_sensor(patterns, bands=bands, band_names=band_names, band_map=band_map, scl_classes=scl_classes,
                       stac=stac)


def _open(patterns: list[str], wanted: list[str] | None, *, band_names: list[str] | None,
          scl_classes: tuple[int, ...] | None, stac: list[str] | None) -> list[Scene]:
    opened = [open_scene(p, band_names=band_names, bands=wanted, scl_classes=scl_classes) for p in scene_paths(patterns)]
    opened += open_items(stac, bands=wanted, scl_classes=scl_classes) if stac else []
    if not opened:
        raise InputError("no scenes given: name them with --scenes, or their STAC items with --stac")
    return opened


def _several_sensors(scenes: list[Scene], bands: list[str] | None) -> list[Scene]:
    """Scenes of several sensors, each sensor's checked as one sensor's are (`_same_bands`)."""
    by_sensor: dict[str, list[Scene]] = {}
    for scene in scenes:
        by_sensor.setdefault(scene.sensor, []).append(scene)
    chosen: dict[str, Scene] = {}
    for group in by_sensor.values():
        names = {normalise_band_name(b) for b in bands or []}
        mine = [b for b in group[0].band_names if b in names] if bands else []
        if bands:  # in the order --bands gives them
            order = [normalise_band_name(b) for b in bands]
            mine = sorted(mine, key=order.index)
        for scene in _same_bands(group, mine or None):
            chosen[scene.id] = scene
    _unique_ids(scenes)
    return [chosen[s.id] for s in scenes]


def _one_sensor(patterns: list[str], *, bands: list[str] | None, band_names: list[str] | None,
                band_map: dict[str, str] | None, scl_classes: tuple[int, ...] | None,
                stac: list[str] | None, opened: list[Scene] | None = None) -> list[Scene]:
    wanted = None if band_map else bands  # a product's bands to take; under a band map, --bands are the new names
    if opened is None:
        opened = _open(patterns, wanted, band_names=band_names, scl_classes=scl_classes, stac=stac)
    scenes = [map_scene_bands(scene, band_map or {}) for scene in opened]
    if stac and bands and not band_map:
        bands = [b.name for b in scenes[-1].bands]  # an Item's bands may be named by asset key or common name
    check_one_sensor(scenes)
    return _same_bands(scenes, bands)


def _unique_ids(scenes: list[Scene]) -> None:
    ids = [s.id for s in scenes]
    if len(set(ids)) != len(ids):
        raise InputError(f"two scenes share an id (file or directory name): {sorted(ids)}")


def _same_bands(scenes: list[Scene], bands: list[str] | None) -> list[Scene]:
    """One sensor's scenes, each with the `bands` (all of the first's), checked to share one band set."""
    scenes = [select_scene_bands(s, bands) for s in scenes]
    _unique_ids(scenes)
    reference = scenes[0]
    for scene in scenes[1:]:
        if sorted(scene.band_names) != sorted(reference.band_names):
            raise InputError(
                f"scene {scene.id!r} has bands {', '.join(scene.band_names)} but {reference.id!r} has "
                f"{', '.join(reference.band_names)}: pick common ones with --bands"
            )
    order = reference.band_names
    return [select_scene_bands(s, order) for s in scenes]
