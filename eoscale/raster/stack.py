"""Several dated scenes of one place read as one: the input of a model of two or more dates (change, a season).

`stack_scenes` groups scenes into places by ingest's rule (`eoscale.raster.places`: footprints that overlap, so a
Landsat series whose grids shift from scene to scene is one place) and orders each place's scenes by their
acquisition date (from the product's metadata: `Scene.date`); a `SceneStack` is then one scene whose bands are every
date's bands, date after date, on the earliest date's grid (the place's reference grid, onto which GDAL's warper reads
the other dates, as ingest does), so everything that maps a scene (windows, blending, the output writers, lineage)
maps a stack unchanged. `StackReader` reads each date with its own
`SceneReader` (its own files, masks and nodata: a SAFE product's SCL is its own date's) and says where each date
holds data: `predict` sets a date's pixels where it holds none to the band mean, as training does, and the map's
pixels are valid where every date is (`require="all"`: a change needs both dates) or where any is
(`require="any"`: a season with a cloudy date still maps). A date of several sensors (`eoscale.raster.fused_season`)
says where each of its sensors holds data (`MaskedWindow.groups`, date by date): a sensor without a scene on a date is
absent there, the others present.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np

from eoscale.errors import InputError
from eoscale.raster.places import group_scenes, on_grid
from eoscale.raster.reader import MaskedWindow, SceneReader
from eoscale.raster.scene import Scene

REQUIRE = ("all", "any")


@dataclass(frozen=True)
class SceneStack(Scene):
    """A `Scene` made of `steps`, the dated scenes of one place in date order; its bands are theirs, date-major."""

    steps: tuple[Scene, ...] = field(default=(), repr=False)
    require: str = "all"  # which dates a map pixel needs: "all" of them or "any"

    @property
    def dates(self) -> list[dt.date | None]:
        return [s.date for s in self.steps]

    @property
    def bands_per_date(self) -> int:
        return len(self.steps[0].bands)

    def to_attrs(self) -> dict:
        return {**super().to_attrs(), "dates": [d.isoformat() if d else None for d in self.dates],
                "steps": [s.id for s in self.steps]}


@dataclass(frozen=True)
class StackWindow(MaskedWindow):
    """A `MaskedWindow` of a stack, with where each date holds data."""

    date_valid: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0), bool))  # (date, y, x)


def stack_scenes(scenes: list[Scene], steps: int, *, require: str = "all") -> list[SceneStack]:
    """`scenes` grouped by place into stacks of `steps` dates each (`require="any"`: up to `steps`), in date order
    (InputError in one line for a place with another number of dates, a scene without a date, or two scenes of one
    place and date)."""
    if require not in REQUIRE:
        raise InputError(f"require={require!r}: expected one of {', '.join(REQUIRE)}")
    check_dated(scenes, steps)
    stacks = []
    for place in group_scenes(scenes, group_by="footprint"):  # ingest's rule: shifted grids of one place are one
        group = [scenes[m] for m in place.members]
        ids = ", ".join(f"{s.id} ({s.date})" for s in group)
        dates = [s.date for s in group]
        if len(set(dates)) != len(dates):
            raise InputError(f"two scenes of one place share a date ({ids}): give one scene of each date")
        # a change needs exactly its dates; a season model takes up to the dates it was trained on (a missing
        # date is a masked step, as in training)
        if len(group) != steps if require == "all" else len(group) > steps:
            raise InputError(
                f"the scenes of one place ({ids}) are {len(group)} date(s), and the model maps "
                f"{steps if require == 'all' else f'at most {steps}'} dates at a time: give "
                f"{steps if require == 'all' else f'up to {steps}'} scenes of each place"
            )
        if len({s.sensor for s in group}) != 1:
            raise InputError(f"the scenes of one place ({ids}) come from different sensors: give one sensor's scenes")
        stacks.append(_stack(group, require))
    return stacks


def check_dated(scenes: list[Scene], steps: int) -> None:
    """Refuse, in one line, a scene without an acquisition date for a model of `steps` dates."""
    for scene in scenes:
        if scene.date is None:
            raise InputError(
                f"scene {scene.id!r} ({scene.paths[0] if scene.paths else '?'}) states no acquisition date in its "
                f"metadata, and a model of {steps} dates needs each scene's: give products with dates (SAFE, Landsat "
                f"MTL, STAC Items) or GeoTIFFs with an ACQUISITIONDATETIME tag (a TIFFTAG_DATETIME is when the file "
                f"was written, not taken for one)"
            )


def _stack(group: list[Scene], require: str) -> SceneStack:
    first = group[0]  # the earliest date: the place's reference grid, onto which every date is read
    group = [group[0], *(on_grid(s, first) for s in group[1:])]
    fields = {name: getattr(first, name) for name in Scene.__dataclass_fields__}
    fields.update(bands=tuple(b for s in group for b in s.bands), paths=tuple(p for s in group for p in s.paths),
                  class_mask=None, skipped=tuple(p for s in group for p in s.skipped))
    return SceneStack(**fields, steps=tuple(group), require=require)


class StackReader:
    """Reads windows of a `SceneStack`: every date's bands (date-major) and where each date holds data."""

    def __init__(self, stack: SceneStack) -> None:
        self.scene = stack
        self._readers: list[SceneReader] = []
        try:
            for step in stack.steps:
                # each date on the stack's grid (its files warped onto it), with its own files, masks and nodata
                self._readers.append(SceneReader(on_grid(step, stack)))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> StackReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def cache_bytes(self) -> int:
        return sum(r.cache_bytes() for r in self._readers)

    def read(self, row_off: int, col_off: int, height: int, width: int) -> np.ndarray:
        return np.concatenate([r.read(row_off, col_off, height, width) for r in self._readers])

    def read_masked(self, row_off: int, col_off: int, height: int, width: int) -> StackWindow:
        blocks = [r.read_masked(row_off, col_off, height, width) for r in self._readers]
        date_valid = np.stack([b.valid for b in blocks])
        valid = date_valid.all(0) if self.scene.require == "all" else date_valid.any(0)
        pixels = np.concatenate([b.pixels for b in blocks])
        if not any(b.others for b in blocks):
            return StackWindow(pixels, ~valid, np.zeros_like(valid), date_valid=date_valid)
        # dates of several sensors: every date's groups, each where it holds no data, on the stack's channels (the
        # stack's own group is empty: `MaskedWindow.groups`)
        per_date = self.scene.bands_per_date
        groups = tuple((tuple(range(k * per_date, (k + 1) * per_date)) if bands is None else
                        tuple(k * per_date + b for b in bands), missing)
                       for k, block in enumerate(blocks) for bands, missing in block.groups())
        return StackWindow(pixels, ~valid, np.zeros_like(valid), others=groups, date_valid=date_valid)


def open_reader(scene: Scene) -> SceneReader | StackReader:
    """The reader of a scene or of a stack of dated scenes."""
    return StackReader(scene) if isinstance(scene, SceneStack) else SceneReader(scene)
