"""Which dated scenes are one place: the one grouping rule of ingest (`ingest --time-series`) and predict (a model of
several dates).

`group_by` says how scenes are put together: `footprint` (the default) puts scenes whose footprints overlap by more than
`MIN_OVERLAP` of the smaller one together (a Landsat series whose grids are shifted from scene to scene is one place),
`grid` only scenes on the identical grid (CRS, transform, size), `all` every scene into one place; a place a scene is
given by name (ingest's dates CSV) overrides. In a season of several sensors the reference sensor's scenes are grouped so,
and a scene of another sensor is a place's where it covers more than `MIN_SHARE` of the place's grid (`grid_share`). A
place's scenes are in date order, and its reference grid is its
earliest scene's: the other scenes are read onto it through GDAL's warper (`eoscale.raster.reader` warps a scene whose
files are not on its grid), each with its own masks, so a pixel without data on a date is nodata on that date.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from rasterio.warp import transform_bounds

from eoscale.errors import InputError
from eoscale.raster.scene import Scene

GROUP_BY = ("footprint", "grid", "all")
MIN_OVERLAP = 0.5  # --group-by footprint: the share of the smaller footprint two scenes of one place share
MIN_SHARE = 0.5  # a scene of another sensor is a place's when it covers more than this share of the place's grid


@dataclass(frozen=True)
class SceneGroup:
    """The scenes of one place: their positions in the scenes grouped, earliest first (the first is the place's
    reference grid), and the name of the place where one was given (`names`)."""

    members: tuple[int, ...]
    name: str | None = None
    explicit: bool = False  # put together by a given name or `group_by="all"`, not by their footprints or grids


def footprint_overlap(a: Scene, b: Scene) -> float:
    """The share of the smaller footprint that `a` and `b` have in common (in `a`'s CRS)."""
    left, bottom, right, top = a.bounds
    try:
        b_left, b_bottom, b_right, b_top = transform_bounds(b.crs, a.crs, *b.bounds, densify_pts=21)
    except Exception:  # noqa: BLE001 - a footprint that does not project into the other CRS shares nothing
        return 0.0
    width, height = min(right, b_right) - max(left, b_left), min(top, b_top) - max(bottom, b_bottom)
    if width <= 0 or height <= 0:
        return 0.0
    smaller = min((right - left) * (top - bottom), (b_right - b_left) * (b_top - b_bottom))
    return width * height / smaller if smaller > 0 else 0.0


def grid_share(grid: Scene, other: Scene) -> float:
    """The share of `grid`'s footprint (its bounds) that `other`'s bounds cover, in `grid`'s CRS."""
    left, bottom, right, top = grid.bounds
    o_left, o_bottom, o_right, o_top = transform_bounds(other.crs, grid.crs, *other.bounds, densify_pts=21)
    width = max(0.0, min(right, o_right) - max(left, o_left))
    height = max(0.0, min(top, o_top) - max(bottom, o_bottom))
    return float(width * height / max((right - left) * (top - bottom), 1e-12))


def same_grid(a: Scene, b: Scene) -> bool:
    return a.crs == b.crs and a.transform.almost_equals(b.transform) and (a.width, a.height) == (b.width, b.height)


def group_scenes(scenes: list[Scene], *, group_by: str = "footprint",
                 names: list[str | None] | None = None) -> list[SceneGroup]:
    """The places of dated `scenes` (module docstring), in the order their first scene is given; `names[i]`, where
    not None, puts scene `i` into the place of that name. Scenes put together by name that do not overlap the
    place's reference scene at all are refused in one line."""
    if group_by not in GROUP_BY:
        raise InputError(f"--group-by {group_by!r}: choose one of {', '.join(GROUP_BY)}")
    names = names or [None] * len(scenes)
    groups: dict[tuple, list[int]] = {}
    explicit = set()
    for i, scene in enumerate(scenes):
        if names[i] is not None:
            key: tuple = ("place", names[i])
            explicit.add(key)
        elif group_by == "all":
            key = ("all",)
            explicit.add(key)
        elif group_by == "grid":
            key = next((k for k, members in groups.items() if k[0] == "grid" and same_grid(scenes[members[0]], scene)),
                       ("grid", i))
        else:
            key = next((k for k, members in groups.items() if k[0] == "footprint" and
                        any(footprint_overlap(scenes[m], scene) > MIN_OVERLAP for m in members)), ("footprint", i))
        groups.setdefault(key, []).append(i)
    out = []
    for key, members in groups.items():
        members = sorted(members, key=lambda m: (scenes[m].date or dt.date.min, m))
        reference = scenes[members[0]]
        for m in members[1:]:
            if key in explicit and footprint_overlap(reference, scenes[m]) <= 0:
                raise InputError(
                    f"scene {scenes[m].id!r} ({_crs_name(scenes[m])}) does not overlap scene {reference.id!r} "
                    f"({_crs_name(reference)}) of the same time series: give each place's scenes its own place in "
                    f"--dates-csv, or leave out the scene that lies elsewhere")
        out.append(SceneGroup(tuple(members), name=str(key[1]) if key[0] == "place" else None, explicit=key in explicit))
    return out


def on_grid(scene: Scene, grid: Scene) -> Scene:
    """`scene` described on `grid`'s grid: its reader warps its files (and masks) onto that grid."""
    return replace(scene, crs=grid.crs, transform=grid.transform, width=grid.width, height=grid.height)


def _crs_name(scene: Scene) -> str:
    epsg = scene.crs.to_epsg()
    return f"EPSG:{epsg}" if epsg else scene.crs.to_string()[:40]


__all__ = ["GROUP_BY", "MIN_OVERLAP", "MIN_SHARE", "SceneGroup", "footprint_overlap", "grid_share", "group_scenes",
           "on_grid", "same_grid"]
