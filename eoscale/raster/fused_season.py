"""A place's raw scenes of several sensors and dates as the time steps of one season, for `predict` of a checkpoint of
several sensors and dates.

The reference sensor's scenes (the checkpoint's first group: the optical one) are grouped into places by the one rule
of ingest and predict (`eoscale.raster.places`: overlapping footprints), and each other sensor's scene joins every
place whose grid it overlaps, as a single date is fused (`eoscale.raster.fused`); the scenes no reference scene
overlaps (a cloudy season seen by radar only, `--missing-sensor dropout`) are places of their own, by the same rule.
A place's grid is its earliest scene of the reference sensor, else its earliest scene. Its time steps are the dates of all its scenes, one step a date (ingest's timeline of a
season of several sensors without `--composite`): each step holds every sensor's bands (`eoscale.raster.fused`), a
sensor's own scene of that date read onto the place's grid with its own masks, a sensor without a scene that day as a
file of nodata, so its group is absent on that step (`MaskedWindow.groups`: predict zeroes it, as training's presence
rule does). A sensor with no scene of the place at all is refused in one line, or absent on every step with
`--missing-sensor dropout`. The steps are then stacked (`eoscale.raster.stack.stack_scenes`) into one `SceneStack` a
place, whose dates follow the checkpoint's timeline (at most `time_steps` of them).

Composites: a checkpoint trained on `--composite` steps takes medians of the clear observations of each interval; its
contract says so only where it records its input spec (`timeline.kind == "calendar"`), and `predict` refuses it then
in one line (`eoscale.infer.stacked.check_timeline`) rather than hand it raw dates.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from eoscale.errors import InputError
from eoscale.raster.fused import (
    blank_scene,
    check_trained,
    missing_message,
    overlap,
    unseen,
    with_other_sensors,
    work_folder,
)
from eoscale.raster.places import group_scenes, on_grid
from eoscale.raster.scene import Scene
from eoscale.raster.stack import check_dated


def season_steps(scenes: list[Scene], groups, steps: int, *, missing: str = "refuse",
                 folder: Path | None = None) -> list[Scene]:
    """The time steps of every place of `scenes` (module docstring), each a scene of the reference sensor's bands
    followed by the other sensors' on the place's grid, dated; `groups` are the checkpoint's `SensorGroup`s (the
    reference sensor first, a DEM's last), `steps` its dates (for the refusal of an undated scene)."""
    reference = groups[0].name
    trained = check_trained(scenes, groups)
    check_dated(scenes, steps)
    folder = folder or work_folder()
    bands = {g.name: list(g.bands) for g in groups}
    out = []
    for members in places(scenes, reference):
        grid = next((s for s in members if s.sensor == reference), members[0])
        absent = [name for name in trained if not any(s.sensor == name for s in members)]
        if absent and missing != "dropout":
            given = any(s.sensor == absent[0] for s in scenes)
            raise InputError(missing_message(grid, absent[0], given=given, dropout=True))
        for date in sorted({s.date for s in members}):
            out.append(_step(grid, [s for s in members if s.date == date], date, trained, bands,
                             folder / grid.id / date.isoformat()))
    return out


def places(scenes: list[Scene], reference: str) -> list[list[Scene]]:
    """The places of `scenes`, each its scenes earliest first: the reference sensor's scenes grouped by the one rule
    (`eoscale.raster.places`), each with every other sensor's scene that overlaps its grid (as a single date is fused:
    `eoscale.raster.fused.choose`; a radar swath over two tiles is in both), then the places of the other scenes that
    overlap none, grouped by the same rule."""
    refs = [s for s in scenes if s.sensor == reference]
    out = [[refs[m] for m in group.members] for group in group_scenes(refs, group_by="footprint")]
    rest = [s for s in scenes if s.sensor != reference]
    for members in out:
        members += [s for s in rest if overlap(members[0], s) > 0]
    lonely = unseen(refs, rest)
    out += [[lonely[m] for m in group.members] for group in group_scenes(lonely, group_by="footprint")]
    return [sorted(members, key=lambda s: s.date) for members in out]


def _step(grid: Scene, seen: list[Scene], date: dt.date, trained: list[str], bands: dict[str, list[str]],
          folder: Path) -> Scene:
    """One step of a place: the scenes `seen` on `date`, at most one a sensor, as one scene on `grid`'s grid."""
    by_sensor: dict[str, Scene] = {}
    for scene in seen:
        if scene.sensor in by_sensor:
            raise InputError(f"scenes {by_sensor[scene.sensor].id!r} and {scene.id!r} of {scene.sensor} are of one "
                             f"place and date ({date}): give one scene of each date")
        by_sensor[scene.sensor] = scene
    reference = trained[0]
    if reference in by_sensor:
        ref = on_grid(by_sensor[reference], grid)
    else:  # the reference sensor did not see the place that day: its channels are absent on this step
        blank_grid = Scene(id=grid.id, bands=(), crs=grid.crs, transform=grid.transform, width=grid.width,
                           height=grid.height, nodata=grid.nodata, date=date)
        ref = blank_scene(blank_grid, reference, bands[reference], folder)
    pairs = {name: (by_sensor[name], overlap(ref, by_sensor[name])) if name in by_sensor else None
             for name in trained[1:]}
    (step,) = with_other_sensors([ref], [pairs], folder, bands={name: bands[name] for name in trained[1:]})
    return step


__all__ = ["season_steps"]
