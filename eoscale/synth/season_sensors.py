"""A season's other sensors (`eoscale synth --dates N --sensors s2,s1,dem`): Sentinel-1 passes of each place on their
own dates, and a DEM under each place.

Sentinel-1 does not see a place on Sentinel-2's days: here every other optical date is followed, `RADAR_LAG_DAYS`
later, by an ascending pass (`radar_days`), so a season of both sensors has dates of one sensor alone (the optical
dates between the passes, every pass) and intervals of a composite calendar with one sensor only. Each pass is the
place's land cover (the WorldCover map the season's classes were refined from: `eoscale.synth.season.season_landcover`
draws it first from the place's stream) seen as `eoscale.synth.sar.backscatter` sees a single-date scene, with its own
speckle (stream (seed, place, 3, pass)), written as an RTC-like COG folder with its STAC Item
(`eoscale.synth.sar.write_product`). Radar sees through clouds: no pass loses pixels to them. The DEM is the single-date
set's (`eoscale.synth.dem.write_dem`) of the place's land cover.

    sar/S1A_IW_GRDH_1SDV_<start>_…/vv.tif, vh.tif, …_rtc.json    a pass of a place
    dem/place_000/Copernicus_DSM_COG_10_…_DEM.tif, .json          the place's DEM

The manifest lists the passes under `sentinel1` (id, place, date, folder, item, bands) and the DEMs under `dems`
(place, file, item); the optical scenes are those of a season without other sensors, byte for byte.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from eoscale.synth.dem import write_dem
from eoscale.synth.landcover import generate_landcover
from eoscale.synth.phenology import season_days
from eoscale.synth.sar import backscatter, write_product
from eoscale.synth.scene import scene_transform

RADAR_LAG_DAYS = 3  # a pass this many days after every other optical date
PASS_TIME = dt.time(17, 15, 24)  # an evening (ascending) pass over the Rhineland
YEAR = 2024


def radar_days(dates: int) -> list[int]:
    """The days of year of a place's passes in a season of `dates` optical dates (module docstring)."""
    return [int(day) + RADAR_LAG_DAYS for day in season_days(dates)[::2]]


def pass_name(place: int, when: dt.datetime) -> str:
    """An ESA product name for place `place`'s pass at `when` (its date is what eoscale reads from the name)."""
    stop = when + dt.timedelta(seconds=25)
    absolute = 50_000 + 15 * when.timetuple().tm_yday
    datatake = (0x070000 + 0x1B1 * place + when.timetuple().tm_yday) & 0xFFFFFF
    return (f"S1A_IW_GRDH_1SDV_{when:%Y%m%dT%H%M%S}_{stop:%Y%m%dT%H%M%S}_{absolute:06d}_{datatake:06X}_"
            f"{(0x2C00 + 31 * place) & 0xFFFF:04X}")


def write_season_sensors(root: Path, *, places: int, dates: int, shape: tuple[int, int], seed: int,
                         extra: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """Write the `extra` sensors ("s1", "dem") of `places` places of a season of `dates` optical dates under `root`;
    returns the manifest's pass records and DEM records (module docstring)."""
    passes: list[dict] = []
    dems: list[dict] = []
    for p in range(places):
        pid = f"place_{p:03d}"
        transform = scene_transform(p, shape)
        cover = generate_landcover(shape, np.random.default_rng([seed, p, 0]))  # the season's map, before its refining
        if "s1" in extra:
            for k, day in enumerate(radar_days(dates)):
                start = dt.datetime.combine(dt.date(YEAR, 1, 1), PASS_TIME, tzinfo=dt.UTC) + dt.timedelta(days=day - 1)
                when = {"start": start, "stop": start + dt.timedelta(seconds=25), "orbit_state": "ascending",
                        "relative_orbit": 88, "absolute_orbit": 50_000 + 15 * day}
                vv, vh = backscatter(cover, np.random.default_rng([seed, p, 3, k]))
                written = write_product(root / "sar", pass_name(p, start), when, vv, vh, transform)
                passes.append({"id": written["folder"], "place": pid, "date": start.date().isoformat(),
                               "folder": f"sar/{written['folder']}", "item": f"sar/{written['item']}",
                               "bands": {band: f"sar/{path}" for band, path in written["bands"].items()}})
        if "dem" in extra:
            written = write_dem(root / "dem", p, cover, transform, seed=seed, scene=pid)
            dems.append({"place": pid, "file": f"dem/{written['dem']}", "item": f"dem/{written['item']}"})
    return passes, dems
