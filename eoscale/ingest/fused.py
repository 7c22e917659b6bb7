"""`ingest` of scenes of several sensors: the other sensors' bands beside the reference sensor's (`eoscale.raster.fused`).

The reference sensor's scenes are the store's grids (`--reference-sensor`, default the first given sensor in the
registry's order: the optical one). Radar beside optical scenes is fused as given; scenes of two optical sensors
(Sentinel-2 and Landsat) are fused only when `--reference-sensor` asks for it, since they are as often one sensor's
bands under other names (`--band-map`). Before anything is written each reference scene is paired with a scene of every
other sensor (one that covers none of it is refused in one line); the pairs enter the ingest's fingerprint as the
paired scenes' files (added to the reference scene's paths) and as parameters (the sensors, the pairs). The warped
files are written into the ingest's work folder (`<output>.partial/progress/fused/`), so they are removed with it and a
resumed ingest reuses them. A store of several sensors records them in its `sensors` attribute (`schema.ATTR_SENSORS`:
each sensor a group of consecutive bands, the reference first, the DEM's static layers last); each band's statistics
are taken over the pixels where its own sensor has data (`eoscale.ingest.writer`), and a pixel holds data (for the
labels and `--min-valid`) where any sensor does.
"""

from __future__ import annotations

from pathlib import Path

from eoscale.raster.fused import (
    pair_scenes,
    reference_sensor,
    split_by_sensor,
    with_other_sensors,
)
from eoscale.raster.scene import Scene
from eoscale.raster.sources import check_one_sensor
from eoscale.sensors.sentinel1 import SENTINEL1

FOLDER = "fused"  # under the ingest's progress folder


def several_sensors(scenes: list[Scene]) -> bool:
    return len({s.sensor for s in scenes}) > 1


def plan_sensors(scenes: list[Scene], reference: str | None) -> tuple[list[Scene], list[dict], dict]:
    """The reference scenes, each one's pick of every other sensor's scenes, and what the fingerprint and the store
    record of them; every refusal here, before anything is written. (A time series of several sensors takes
    `eoscale.ingest.fused_series`.)"""
    if reference is None and not any(s.sensor == SENTINEL1 for s in scenes):
        # several optical sensors may be one sensor's bands under another name (--band-map) or a fusion: asked for
        check_one_sensor(scenes)
    name = reference_sensor(scenes, reference)
    refs, others = split_by_sensor(scenes, name)
    pairs = pair_scenes(refs, others)
    parameters = {"reference": name, "others": list(others),
                  "pairs": [[ref.id, {sensor: pick[0].id for sensor, pick in chosen.items()}]
                            for ref, chosen in zip(refs, pairs, strict=True)]}
    return refs, pairs, parameters


def with_paths(refs: list[Scene], pairs: list[dict]) -> list[Scene]:
    """The reference scenes with their paired scenes' files among their paths (the fingerprint, the lineage), before
    the warped files exist."""
    from dataclasses import replace

    out = []
    for ref, chosen in zip(refs, pairs, strict=True):
        paths = list(ref.paths)
        for pick in chosen.values():
            paths += [p for p in pick[0].paths if p not in paths]
        out.append(replace(ref, paths=tuple(paths)))
    return out


def add_other_sensors(refs: list[Scene], pairs: list[dict], progress_dir: Path) -> list[Scene]:
    """The reference scenes with the other sensors' bands after their own, the files in the ingest's progress folder."""
    return with_other_sensors(refs, pairs, Path(progress_dir) / FOLDER)


__all__ = ["FOLDER", "add_other_sensors", "plan_sensors", "several_sensors", "with_paths"]
