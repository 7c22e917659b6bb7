"""The one rule that groups dated scenes into places (`eoscale.raster.places`), shared by ingest and predict, and how a
season of several sensors forms its places (`eoscale.raster.fused_season.places`). Scenes are described, not read."""

from __future__ import annotations

import datetime as dt

import pytest
from affine import Affine
from rasterio.crs import CRS

from eoscale.errors import InputError
from eoscale.raster.fused_season import places
from eoscale.raster.places import group_scenes
from eoscale.raster.scene import Scene

UTM = CRS.from_epsg(32632)


def _scene(name: str, column: float, row: float, *, day: int, sensor: str = "sentinel-2", size: int = 100) -> Scene:
    """A `size` px scene of 10 m pixels whose corner lies `column`, `row` pixels from a fixed origin."""
    return Scene(id=name, bands=(), crs=UTM, transform=Affine(10, 0, 300_000 + 10 * column, 0, -10, 5_660_000 - 10 * row),
                 width=size, height=size, nodata=0, sensor=sensor, date=dt.date(2024, 1, day))


def test_shifted_grids_are_one_place_by_footprint_and_several_by_grid():
    # guards: predict grouped by identical grids while ingest grouped by footprint
    series = [_scene("c", -4, 5, day=3), _scene("a", 0, 0, day=1), _scene("b", 3, -2, day=2), _scene("far", 500, 0, day=1)]
    (place, far) = group_scenes(series)
    assert [series[m].id for m in place.members] == ["a", "b", "c"]  # earliest first: the reference grid is a's
    assert [series[m].id for m in far.members] == ["far"]
    assert len(group_scenes(series, group_by="grid")) == 4
    assert len(group_scenes(series[:3], group_by="all")) == 1
    with pytest.raises(InputError, match="'far' .* does not overlap scene 'a'"):  # put together by name, yet apart
        group_scenes(series, group_by="all")


def test_a_radar_swath_over_two_tiles_joins_both_and_radar_alone_is_a_place_of_its_own():
    # guards: grouping every sensor's scenes together, one radar swath over two optical tiles merged them into one
    # place (the second tile read onto the first one's grid)
    west, east = _scene("west", 0, 0, day=5), _scene("east", 100, 0, day=6)
    swath = _scene("swath", -20, -20, day=4, sensor="sentinel-1", size=300)
    alone = [_scene("s1-far", 2000, 0, day=2, sensor="sentinel-1"), _scene("s1-far-2", 2002, 1, day=8,
                                                                           sensor="sentinel-1")]
    found, left_out = places([west, swath, east, *alone], "sentinel-2", alone=True)  # --missing-sensor dropout
    assert [[s.id for s in members] for members in found] == [["swath", "west"], ["swath", "east"], ["s1-far", "s1-far-2"]]
    assert left_out == []


def test_radar_passes_over_other_places_are_left_out_beside_optical_scenes():
    # guards: predict given one place's optical scenes and the folder of every radar pass of the region (synth's sar/,
    # a user's download) made places of the passes over the other places and refused them for lacking optical data
    here = [_scene("here-1", 0, 0, day=1), _scene("here-2", 0, 0, day=9)]
    over_here = _scene("s1-here", -10, -10, day=4, sensor="sentinel-1", size=120)
    elsewhere = [_scene("s1-far", 2000, 0, day=4, sensor="sentinel-1"), _scene("s1-far-2", 2400, 0, day=4,
                                                                               sensor="sentinel-1")]
    found, left_out = places([*elsewhere, *here, over_here], "sentinel-2")
    assert [[s.id for s in members] for members in found] == [["here-1", "s1-here", "here-2"]]
    assert [s.id for s in left_out] == ["s1-far", "s1-far-2"]
    # no optical scene given at all: the radar scenes are the places (predict refuses them without dropout)
    found, left_out = places(elsewhere, "sentinel-2")
    assert [[s.id for s in members] for members in found] == [["s1-far"], ["s1-far-2"]] and left_out == []
