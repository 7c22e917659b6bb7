"""Time series: dated scenes of the same places grouped into places whose tiles hold T time steps.

`eoscale ingest --time-series` (or any of `--dates-csv`, `--max-dates`, `--composite`) reads many dated scenes: each
scene's date comes from its product's metadata (SAFE `PRODUCT_START_TIME`, Landsat `DATE_ACQUIRED`, STAC `datetime`, a
GeoTIFF's `ACQUISITIONDATETIME` tag) or from a CSV of `path,date[,place]` rows (`--dates-csv`, for plain GeoTIFFs);
never from a file's modification time.

Scenes are grouped into *places* (`--group-by`): `footprint` (default) puts scenes whose footprints overlap by more than
half of the smaller one together, `grid` only scenes on the identical grid (CRS, transform, size), `all` every scene
into one place; a CSV's `place` column overrides. A place's reference grid is its earliest scene's: the other scenes
are read onto it through GDAL's warper (`eoscale.raster.reader`), each with its own mask (SCL, QA_PIXEL, nodata), so a
pixel without data on a date is nodata on that date, never a zero counted as data.

A place's time steps (`Step`) are either its dates as they are, sorted (`--max-dates N` keeps the N clearest, as the
scan measured them), or regular composites (`--composite monthly|16d|Nd`: the per-pixel median of the clear
observations in each interval, as sits' regularisation; intervals start at the earliest date of all places, so every
place shares one timeline, and that first day is recorded in the store's input spec (`Timeline.start`) for predict to
lay a new place's intervals on the same calendar). A step without a clear pixel over a tile is a masked step: nodata pixels, `date_valid` 0.
Places with fewer steps than the longest are padded with masked steps without a date (NaT).
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from eoscale.errors import InputError, InputNotFoundError

# the composite calendar and the grouping rule moved to the raster layer, shared with predict; still importable here
from eoscale.raster.composite import calendar_start, composite_starts
from eoscale.raster.places import GROUP_BY, MIN_OVERLAP, footprint_overlap, group_scenes, on_grid, same_grid  # noqa: F401
from eoscale.raster.scene import Scene, parse_date


@dataclass(frozen=True)
class Step:
    """One time step of a place: its date (the acquisition's, or a composite interval's first day) and the positions
    (in `Place.scenes`) of the scenes it is made of: one as they are, any number (none: a masked step) composited."""

    date: dt.date | None
    scenes: tuple[int, ...]


@dataclass(frozen=True)
class Place:
    """The dated scenes of one place, sorted by date, each described on the place's reference grid (`grid`)."""

    id: str
    grid: Scene
    scenes: tuple[Scene, ...]
    dates: tuple[dt.date, ...]
    steps: tuple[Step, ...] = ()


def parse_composite(text: str | None) -> int | str | None:
    """'monthly' -> 'monthly'; '16d' -> 16 (days); None -> None."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*d\s*", text.lower())
    if text.strip().lower() == "monthly":
        return "monthly"
    if match and int(match.group(1)) >= 1:
        return int(match.group(1))
    raise InputError(f"--composite {text!r}: give monthly, or an interval in days such as 16d or 10d")


def read_dates_csv(path: str) -> list[tuple[str, dt.date, str | None]]:
    """The rows of a dates CSV (`path,date[,place]`, paths relative to the CSV's folder) as (path, date, place)."""
    if not os.path.isfile(path):
        raise InputNotFoundError(f"dates CSV {path!r} does not exist")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"path", "date"} <= set(rows[0]):
        raise InputError(f"dates CSV {path!r} needs a header with columns path,date (and optionally place)")
    out = []
    for line, row in enumerate(rows, start=2):
        date = parse_date(row["date"])
        if date is None:
            raise InputError(f"dates CSV {path!r} line {line}: {row['date']!r} is not a date: write it as YYYY-MM-DD")
        where = row["path"] if os.path.isabs(row["path"]) else os.path.join(os.path.dirname(path), row["path"])
        out.append((where, date, (row.get("place") or "").strip() or None))
    return out


def _matches(scene: Scene, path: str) -> bool:
    """Whether the CSV's `path` names `scene`: one of its files, the folder (a SAFE product) its files lie in, or the
    STAC Item file of its id."""
    target = os.path.abspath(path)
    for p in scene.paths:
        p = os.path.abspath(p)
        if p == target or p.startswith(target.rstrip(os.sep) + os.sep):
            return True
    return Path(path).suffix.lower() == ".json" and Path(path).stem == scene.id


def date_scenes(scenes: list[Scene], rows: list[tuple[str, dt.date, str | None]]) -> tuple[list[Scene], list[str | None]]:
    """The scenes with their dates (the CSV's where it lists them) and the place the CSV gives each (or None);
    refuses scenes without a date, dated beside undated ones, and a CSV date that contradicts the product's."""
    dated, places = [], []
    for scene in scenes:
        row = next((r for r in rows if _matches(scene, r[0])), None)
        date = scene.date
        if row is not None:
            if date is not None and date != row[1]:
                raise InputError(f"scene {scene.id!r} is dated {date} by its metadata but {row[1]} by the dates CSV: "
                                 f"correct the CSV")
            date = row[1]
        dated.append(replace(scene, date=date))
        places.append(row[2] if row else None)
    undated = [s.id for s in dated if s.date is None]
    if undated and len(undated) < len(dated):
        raise InputError(f"{len(dated) - len(undated)} scene(s) are dated but {len(undated)} are not "
                         f"({', '.join(undated[:3])}{', …' if len(undated) > 3 else ''}): a time series needs every "
                         f"scene's date; list the undated ones with their dates in --dates-csv (path,date)")
    if undated:
        first = next(s for s in dated if s.date is None)
        raise InputError(f"no date can be read from scene {first.id!r} ({first.paths[0] if first.paths else ''}): "
                         f"its format records none; list the scenes with their dates in --dates-csv (path,date)")
    return dated, places


def group_places(scenes: list[Scene], *, group_by: str = "footprint", dates_csv: str | None = None) -> list[Place]:
    """The places of a time series, each with its scenes on its reference grid, sorted by date (the one grouping
    rule of ingest and predict: `eoscale.raster.places`); without steps yet (`plan_steps`)."""
    if group_by not in GROUP_BY:
        raise InputError(f"--group-by {group_by!r}: choose one of {', '.join(GROUP_BY)}")
    rows = read_dates_csv(dates_csv) if dates_csv else []
    scenes, named = date_scenes(scenes, rows)
    places = []
    for group in group_scenes(scenes, group_by=group_by, names=named):
        members = group.members
        seen: dict[dt.date, str] = {}
        for m in members:
            if scenes[m].date in seen:
                raise InputError(f"scenes {seen[scenes[m].date]!r} and {scenes[m].id!r} are of the same place and date "
                                 f"({scenes[m].date}): leave one of them out")
            seen[scenes[m].date] = scenes[m].id
        name = group.name or scenes[members[0]].id
        grid = replace(scenes[members[0]], id=str(name))
        described = tuple(on_grid(scenes[m], grid) for m in members)
        places.append(Place(id=str(name), grid=grid, scenes=described, dates=tuple(scenes[m].date for m in members)))
    return places


def plan_steps(places: list[Place], clear: list[np.ndarray], *, max_dates: int | None = None,
               composite: int | str | None = None) -> list[Place]:
    """The places with their time steps: each date (the `max_dates` with the largest clear shares `clear[p]`: a date's
    is its clearest scene's; one scene a date, or one of each sensor of a place of several), or the composite intervals
    of one timeline shared by every place."""
    if max_dates is not None and composite is not None:
        raise InputError("give --max-dates (dates as they are) or --composite (regular intervals), not both")
    if max_dates is not None and max_dates < 1:
        raise InputError(f"--max-dates must be at least 1, got {max_dates}")
    out = []
    if composite is None:  # a step a date; the scenes of several sensors on one date make one step
        for place, shares in zip(places, clear, strict=True):
            dates = sorted(set(place.dates))
            members = [tuple(j for j, d in enumerate(place.dates) if d == date) for date in dates]
            date_shares = np.array([max(float(shares[j]) for j in m) for m in members])
            keep = np.arange(len(dates))
            if max_dates is not None and len(keep) > max_dates:
                keep = np.sort(np.argsort(-date_shares, kind="stable")[:max_dates])
            out.append(replace(place, steps=tuple(Step(dates[j], members[j]) for j in keep)))
        return out
    starts = composite_starts(min(d for p in places for d in p.dates), max(d for p in places for d in p.dates), composite,
                              start=series_calendar(places, composite))
    for place in places:
        steps = []
        for k, start in enumerate(starts):
            stop = starts[k + 1] if k + 1 < len(starts) else dt.date.max
            steps.append(Step(start, tuple(j for j, d in enumerate(place.dates) if start <= d < stop)))
        out.append(replace(place, steps=tuple(steps)))
    return out


def series_calendar(places: list[Place], composite: int | str) -> dt.date:
    """The first day of the composite calendar every place shares (`eoscale.raster.composite.calendar_start` of all
    their dates): what the store's input spec records as its timeline's `start`."""
    return calendar_start([d for p in places for d in p.dates], composite)


def series_windows(places: list[Place], window_valid: list[np.ndarray], *, max_dates: int | None = None,
                   composite: int | str | None = None) -> tuple[list[Place], list[np.ndarray]]:
    """The places with their time steps, and each place's window valid fractions for the plan: a window is kept
    when, on its clearest step's scene, enough of it holds data (`window_valid` is per scene, places' scenes in
    order)."""
    per_place, start = [], 0
    for place in places:
        per_place.append(window_valid[start : start + len(place.scenes)])
        start += len(place.scenes)
    clear = [np.array([float(f.mean()) for f in fractions]) for fractions in per_place]
    places = plan_steps(places, clear, max_dates=max_dates, composite=composite)
    combined = []
    for place, fractions in zip(places, per_place, strict=True):
        used = sorted({j for step in place.steps for j in step.scenes})
        if not used or not any(fractions[j].max() > 0 for j in used):
            raise InputError(f"place {place.id!r} holds only nodata (clouds or masks) on every date: leave it out")
        combined.append(np.max([fractions[j] for j in used], axis=0))
    return places, combined


def time_steps(places: list[Place]) -> int:
    """T: the most steps of any place."""
    return max(len(p.steps) for p in places)


def step_dates(places: list[Place], plan_place: np.ndarray, steps: int) -> np.ndarray:
    """(tile, time) datetime64[ns]: each tile's place's step dates, NaT on padding steps."""
    per_place = np.full((len(places), steps), np.datetime64("NaT", "ns"), dtype="datetime64[ns]")
    for p, place in enumerate(places):
        for k, step in enumerate(place.steps):
            if step.date is not None:
                per_place[p, k] = np.datetime64(step.date, "ns")
    return per_place[np.asarray(plan_place, dtype=np.int64)]


def series_attrs(place: Place) -> dict:
    """What the store's scene record of a place adds (`schema.ATTR_SCENES`): its dated scenes and its steps."""
    return {"place": place.id,
            "series": [{"id": s.id, "date": s.date.isoformat(), "paths": list(s.paths)} for s in place.scenes],
            "steps": [{"date": step.date.isoformat() if step.date else None,
                       "scenes": [place.scenes[j].id for j in step.scenes]} for step in place.steps]}
