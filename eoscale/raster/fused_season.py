"""A place's raw scenes of several sensors and dates as the time steps of one season, for `predict` of a checkpoint of
several dates (of several sensors, or of composites).

Places: the reference sensor's scenes (the checkpoint's first group: the optical one) are grouped by the one rule of
ingest and predict (`eoscale.raster.places`: overlapping footprints), and each other sensor's scene joins every place
whose grid it covers by more than half (`MIN_SHARE`, as ingest joins them). The scenes no reference scene overlaps are
places of their own, by the same rule, with `--missing-sensor dropout` (a cloudy season seen by radar only) or where no
scene of the reference sensor was given at all (then refused without that option); beside reference scenes and without
dropout they are left out, named in predict's log: a user gives one place's optical scenes and the folder of every
radar pass of the region, and the passes over the other places are not that place's. A place's grid is its earliest
scene of the reference sensor, else its earliest scene.

Steps, as ingest makes them: one a date of any of the place's sensors; or, for a checkpoint fitted on composites (its
input spec's calendar: `eoscale.infer.stacked.trained_calendar`), the intervals of the store's calendar (its first
day, which ingest recorded in the spec, plus whole intervals: `eoscale.raster.composite.composite_starts`, ingest's
rule) that cover the place's dates, so a place whose first scene falls on another day than the store's first is
composited on training's intervals, not on intervals of another phase (a spec written before records no first day:
the place's earliest date then starts it, as before), each sensor's scenes in an interval reduced to the median of their clear observations (`eoscale.raster.composite`, the
reducer ingest uses; a radar's in linear power), an interval without a scene a masked step. Each step holds every
sensor's bands on the place's grid (`eoscale.raster.fused`): a sensor's own scene (or composite) read onto the grid
with its own masks, a sensor without one on that step a file of nodata, so its group is absent there
(`MaskedWindow.groups`: predict zeroes it, as training's presence rule does). A sensor with no scene of the place at
all is refused in one line, or absent on every step with `--missing-sensor dropout`. The steps are then stacked
(`eoscale.raster.stack.stack_scenes`) into one `SceneStack` a place, at most the checkpoint's `time_steps` of them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rasterio.enums import Resampling

from eoscale.errors import InputError
from eoscale.inputs.missing import refused_sensor
from eoscale.raster.composite import composite_starts, write_composite
from eoscale.raster.fused import (
    blank_scene,
    check_trained,
    missing_message,
    unseen,
    with_other_sensors,
    work_folder,
)
from eoscale.raster.fused import on_grid as fused_on_grid
from eoscale.raster.places import MIN_SHARE, grid_share, group_scenes, on_grid
from eoscale.raster.scene import BandFile, Scene
from eoscale.raster.stack import check_dated
from eoscale.sensors.sentinel1 import SENTINEL1


def season_steps(scenes: list[Scene], groups, steps: int, *, missing: str = "refuse",
                 composite: int | str | None = None, start: dt.date | None = None, folder: Path | None = None,
                 say: Callable[[str], None] | None = None) -> list[Scene]:
    """The time steps of every place of `scenes` (module docstring), each a scene of the reference sensor's bands
    followed by the other sensors' on the place's grid, dated; `groups` are the checkpoint's `SensorGroup`s (the
    reference sensor first, a DEM's last; one group: a season of one sensor), `steps` its dates (for the refusal of
    an undated scene), `composite` the interval of its steps (days, or "monthly") where it was fitted on composites,
    `start` the first day of their calendar (its input spec's; None: each place's earliest date).
    `say` gets a line for each place naming the scenes of each sensor it is made of, and one for the scenes left out."""
    reference = groups[0].name
    trained = check_trained(scenes, groups)
    check_dated(scenes, steps)
    folder = folder or work_folder()
    bands = {g.name: list(g.bands) for g in groups}
    grouped, left_out = places(scenes, reference, alone=missing == "dropout")
    say = say or (lambda line: None)
    if left_out:
        say(f"left out {len(left_out)} scene(s) that overlap none of the {reference} scenes given: "
            f"{', '.join(s.id for s in left_out)}")
    out = []
    for members in grouped:
        grid = next((s for s in members if s.sensor == reference), members[0])
        refused = refused_sensor([name for name in trained if not any(s.sensor == name for s in members)], missing)
        if refused is not None:  # the one rule of predict and serve (eoscale.inputs.missing)
            given = any(s.sensor == refused for s in scenes)
            raise InputError(missing_message(grid, refused, given=given, dropout=True))
        used = {name: [s.id for s in members if s.sensor == name] for name in trained}
        say(f"place {grid.id}: " + "; ".join(f"{name} {len(ids)} ({', '.join(ids)})" for name, ids in used.items()))
        for date, seen in timeline(members, composite, start=start):
            out.append(_step(grid, seen, date, trained, bands, folder / grid.id / date.isoformat()))
    return out


def timeline(members: list[Scene], composite: int | str | None, *, start: dt.date | None = None
             ) -> list[tuple[dt.date, list[Scene]]]:
    """A place's steps: each date of its scenes (any sensor's) with the scenes of that date; or, with `composite`, the
    intervals of the calendar that begins at `start` (None: the place's earliest date) covering its earliest date
    through its last (`eoscale.raster.composite.composite_starts`, ingest's rule), each with the scenes it holds
    (none: a masked step, as ingest keeps it)."""
    dates = sorted({s.date for s in members})
    if composite is None:
        return [(date, [s for s in members if s.date == date]) for date in dates]
    starts = composite_starts(dates[0], dates[-1], composite, start=start)
    stops = [*starts[1:], dt.date.max]
    return [(first, [s for s in members if first <= s.date < stop]) for first, stop in zip(starts, stops, strict=True)]


def places(scenes: list[Scene], reference: str, *, alone: bool = False) -> tuple[list[list[Scene]], list[Scene]]:
    """The places of `scenes`, each its scenes earliest first, and the scenes left out: the reference sensor's scenes
    grouped by the one rule (`eoscale.raster.places`), each with every other sensor's scene that covers more than
    `MIN_SHARE` of its grid (as ingest's season of several sensors joins them; a radar swath over two tiles is in
    both); then the other scenes that overlap no reference scene at all: places of their own, grouped by the same
    rule, if `alone` (places seen without the reference sensor are wanted) or no reference scene was given, else left
    out."""
    refs = [s for s in scenes if s.sensor == reference]
    out = [[refs[m] for m in group.members] for group in group_scenes(refs, group_by="footprint")]
    rest = [s for s in scenes if s.sensor != reference]
    for members in out:  # the place's grid is its earliest reference scene's
        members += [s for s in rest if grid_share(members[0], s) > MIN_SHARE]
    lonely = unseen(refs, rest)
    if refs and not alone:
        return [sorted(members, key=lambda s: s.date) for members in out], lonely
    out += [[lonely[m] for m in group.members] for group in group_scenes(lonely, group_by="footprint")]
    return [sorted(members, key=lambda s: s.date) for members in out], []


def _step(grid: Scene, seen: list[Scene], date: dt.date, trained: list[str], bands: dict[str, list[str]],
          folder: Path) -> Scene:
    """One step of a place: the scenes `seen` on `date` (or in the interval from it: several of a sensor are its
    composite) as one scene on `grid`'s grid."""
    by_sensor: dict[str, list[Scene]] = {}
    for scene in seen:
        by_sensor.setdefault(scene.sensor, []).append(scene)
    for name, found in by_sensor.items():
        dates = [s.date for s in found]
        if len(set(dates)) != len(dates):
            twins = [s for s in found if dates.count(s.date) > 1]
            raise InputError(f"scenes {twins[0].id!r} and {twins[1].id!r} of {name} are of one place and date "
                             f"({twins[0].date}): give one scene of each date")
    folder.mkdir(parents=True, exist_ok=True)
    reference = trained[0]
    found = by_sensor.get(reference, [])
    if len(found) == 1:
        ref = on_grid(found[0], grid)
    elif found:  # the median of the interval's clear observations, on the place's grid (named after it: the map)
        ref = replace(_composite(grid, found, date, folder), id=grid.id)
    else:  # the reference sensor did not see the place that day: its channels are absent on this step
        blank_grid = Scene(id=grid.id, bands=(), crs=grid.crs, transform=grid.transform, width=grid.width,
                           height=grid.height, nodata=grid.nodata, date=date)
        ref = blank_scene(blank_grid, reference, bands[reference], folder)
    ref = replace(ref, date=date)  # a composite step's date is its interval's first day, as ingest's
    pairs = {}
    for name in trained[1:]:
        found = by_sensor.get(name, [])
        other = found[0] if len(found) == 1 else _composite(grid, found, date, folder) if found else None
        pairs[name] = (other, grid_share(ref, other)) if other is not None else None
    (step,) = with_other_sensors([ref], [pairs], folder, bands={name: bands[name] for name in trained[1:]})
    return step


def _composite(grid: Scene, scenes: list[Scene], date: dt.date, folder: Path) -> Scene:
    """`scenes` (one sensor's, of one interval) as one scene on `grid`: the median of their clear observations, a
    file in `folder` (`eoscale.raster.composite`); a radar's in linear power."""
    sensor = scenes[0].sensor
    path = folder / f"{grid.id}.{sensor}.composite.tif"
    if sensor == grid.sensor:
        described = [(on_grid(s, grid), Resampling.bilinear) for s in scenes]
    else:  # another sensor's pixels as a fused scene reads them (border noise in the grid's pixels, its resampling)
        described = [fused_on_grid(grid, s) for s in scenes]
    write_composite(grid, described, path, power=sensor == SENTINEL1)
    return Scene(id=f"{grid.id}.{sensor}.{date.isoformat()}", crs=grid.crs, transform=grid.transform,
                 width=grid.width, height=grid.height, nodata=grid.nodata, sensor=sensor, date=date,
                 bands=tuple(BandFile(name, str(path), i + 1) for i, name in enumerate(scenes[0].band_names)),
                 paths=tuple(p for s in scenes for p in s.paths))


__all__ = ["season_steps"]
