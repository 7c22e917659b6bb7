"""`ingest --time-series` of scenes of several sensors (and a DEM's `--static` layers): one store whose images are
`(tile, T, C, y, x)`, C the sensors' bands side by side (each sensor a group of bands, the store's `sensors` attribute
as a single-date fused store records it, `eoscale.ingest.fused`; the DEM's layers last), T the steps of ONE calendar
that every sensor shares.

Places: the reference sensor's scenes (`--reference-sensor`, default the optical one, `eoscale.raster.fused`) are
grouped into places as a time series of one sensor groups them (`eoscale.ingest.series.group_places`); each place's
reference grid is its earliest reference scene's. Every scene of another sensor that covers more than
`MIN_SHARE` of a place's grid is that place's too (a place that no scene of a sensor covers is refused in one line:
leave the sensor out, or give its scenes); one that covers no place is left out (a held-out place's passes given with
the rest), as a single-date fused ingest leaves out the scenes it pairs with no reference scene. Each scene of another
sensor is warped onto its place's grid once, as a single-date fused ingest warps it (`eoscale.raster.fused.write_fused`: its own masks and border noise, radar resampled in linear power
and stored in dB on the store's scale), into `<output>.partial/progress/fused/`, so it is removed with the work folder
and a resumed ingest reuses it.

Steps (`eoscale.ingest.series.plan_steps`, one rule for every sensor):
- without `--composite`, each step is one date of the union of the place's sensors' dates; a sensor is present on its
  own dates only (all its bands nodata on the others: absent by the presence rule), so a step of an S1 pass between
  two S2 dates holds VV, VH and nodata in the S2 bands. `--max-dates N` keeps the N dates with the largest clear share
  (the share of windows' pixels where any sensor has data).
- with `--composite monthly|16d|Nd`, every sensor is composited onto the same intervals (they start at the earliest
  date of any place and any sensor): per sensor, the per-pixel median of its clear observations in the interval
  (Sentinel-2: pixels its SCL leaves clear; Sentinel-1: the median in linear power, taken back to dB on the store's
  scale: `eoscale.ingest.series_writer`). A sensor without an observation in an interval is absent there while the
  others are present.
A step is valid (`date_valid`) where any sensor has data; the DEM's layers hold the same values at every step, at the
pixels where some sensor has data on that step (as a single-date store's static layers hold no data where no sensor
does: `eoscale.raster.reader.MaskedWindow.groups`), so a step no sensor observed is nodata in every band. Each place's
record in the store (`schema.ATTR_SCENES`) lists per step the scenes it is made of and the sensors they are of
(`steps[k].sensors`). Each band's statistics are taken over the pixels where its own sensor has data on a step.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from eoscale.errors import InputError
from eoscale.ingest.series import Place, date_scenes, group_places, read_dates_csv
from eoscale.raster.fused import reference_sensor, sensors_in_order, split_by_sensor, write_fused
from eoscale.raster.places import MIN_SHARE, grid_share
from eoscale.raster.scene import BandFile, Scene
from eoscale.raster.sources import check_one_sensor
from eoscale.sensors import get_sensor
from eoscale.sensors.sentinel1 import SENTINEL1

FOLDER = "fused"  # under the ingest's progress folder, as a single-date fused ingest's


def plan_fused_places(scenes: list[Scene], reference: str | None, *, group_by: str, dates_csv: str | None
                      ) -> tuple[list[Place], dict]:
    """The places of a time series of several sensors (module docstring), their other sensors' scenes not yet warped
    (`warp_other_sensors`), and what the fingerprint and the store record of them; every refusal here, before
    anything is written."""
    if reference is None and not any(s.sensor == SENTINEL1 for s in scenes):
        # several optical sensors may be one sensor's bands under another name (--band-map): a fusion is asked for,
        # as for one date (eoscale.ingest.fused)
        check_one_sensor(scenes)
    name = reference_sensor(scenes, reference)
    refs, others = split_by_sensor(scenes, name)
    places = group_places(refs, group_by=group_by, dates_csv=dates_csv)
    rows = read_dates_csv(dates_csv) if dates_csv else []
    dated = {sensor: date_scenes(candidates, rows)[0] for sensor, candidates in others.items()}
    order = sensors_in_order(scenes)
    out, record = [], []
    for place in places:
        members = list(zip(place.scenes, place.dates, strict=True))
        chosen: dict[str, list[str]] = {}
        for sensor, candidates in dated.items():
            mine = [s for s in candidates if grid_share(place.grid, s) > MIN_SHARE]
            if not mine:
                title = get_sensor(sensor).title
                raise InputError(f"place {place.id!r} has no {sensor} data: none of the {title} scenes given covers "
                                 f"half of it; give a {title} scene that covers it, or leave out its other scenes")
            seen: dict = {}
            for s in mine:
                if s.date in seen:
                    raise InputError(f"scenes {seen[s.date]!r} and {s.id!r} are {sensor} scenes of place {place.id!r} "
                                     f"on the same date ({s.date}): leave one of them out")
                seen[s.date] = s.id
            members += [(s, s.date) for s in mine]
            chosen[sensor] = [s.id for s in mine]
        members.sort(key=lambda m: (m[1], order.index(m[0].sensor), m[0].id))
        out.append(replace(place, scenes=tuple(s for s, _ in members), dates=tuple(d for _, d in members)))
        record.append([place.id, chosen])
    return out, {"reference": name, "others": list(others), "places": record}


def warp_other_sensors(places: list[Place], progress_dir: Path) -> list[Place]:
    """`places` with each scene of another sensor than the reference's replaced by its bands warped onto the place's
    grid (a file in the progress folder, kept from an earlier run), and each place's grid with every sensor's bands
    after its own (tagged with their sensor, `BandFile.sensor`): the store's band groups."""
    folder = Path(progress_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for place in places:
        grid = place.grid
        scenes, extra, records = [], [], {}
        for scene in place.scenes:
            if scene.sensor == grid.sensor:
                scenes.append(scene)
                continue
            path = folder / f"{place.id}.{scene.id}.tif"
            if not path.exists():
                write_fused(grid, scene, path)
            scenes.append(on_place_grid(scene, grid, path))
            if scene.sensor not in records:  # the grid's bands of this sensor: its first scene's file
                clash = [n for n in scene.band_names if n in grid.band_names or any(b.name == n for b in extra)]
                if clash:
                    raise InputError(f"band {clash[0]!r} is both {scene.sensor}'s and another sensor's in place "
                                     f"{place.id!r}: rename one with --band-map")
                extra += [BandFile(n, str(path), i + 1, sensor=scene.sensor) for i, n in enumerate(scene.band_names)]
                records[scene.sensor] = {"sensor": scene.sensor, "platform": scene.platform,
                                         "scenes": [s.id for s in place.scenes if s.sensor == scene.sensor]}
        grid = replace(grid, bands=grid.bands + tuple(extra), fused=tuple(records.values()))
        out.append(replace(place, grid=grid, scenes=tuple(scenes)))
    return out


def on_place_grid(scene: Scene, grid: Scene, path: Path) -> Scene:
    """`scene` as read from its bands warped onto `grid` at `path` (uint16 on the store's scale, the grid's nodata
    where it has no data): its own id, date, sensor and source files (the fingerprint, the lineage)."""
    return Scene(id=scene.id, bands=tuple(BandFile(n, str(path), i + 1) for i, n in enumerate(scene.band_names)),
                 crs=grid.crs, transform=grid.transform, width=grid.width, height=grid.height, nodata=grid.nodata,
                 paths=scene.paths, sensor=scene.sensor, platform=scene.platform, radiometry=scene.radiometry,
                 date=scene.date, acquisition=scene.acquisition)


def place_bands(places: list[Place]) -> list[str]:
    """The store's bands of a time series of several sensors before the warped files exist: the reference sensor's,
    then each other sensor's (its first scene's), in the order the places' grids will hold them."""
    bands = list(places[0].grid.band_names)
    for scene in places[0].scenes:
        if scene.sensor != places[0].grid.sensor:
            bands += [b for b in scene.band_names if b not in bands]
    return bands


def step_sensors(place: Place) -> list[list[str]]:
    """Per step of `place`, the sensors whose scenes it is made of (in the store's group order)."""
    order = [place.grid.sensor] + [f["sensor"] for f in place.grid.fused]
    return [sorted({place.scenes[j].sensor for j in step.scenes}, key=lambda s: order.index(s) if s in order else 99)
            for step in place.steps]


__all__ = ["FOLDER", "MIN_SHARE", "on_place_grid", "place_bands", "plan_fused_places", "step_sensors",
           "warp_other_sensors"]
