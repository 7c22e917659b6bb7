"""Several sensors in one input: which of a store's (or a checkpoint's) bands belong to which sensor.

A store of several sensors (`eoscale ingest` given scenes of Sentinel-2 and Sentinel-1, with `--static` a DEM) keeps
every sensor's bands on the reference sensor's grid, side by side in its one `images` array: each sensor is one group of
consecutive bands, with its own per-band statistics (the store's, band by band), its own nodata (a group's bands all at
the store's nodata where that sensor saw nothing: clouds for the optical one, border noise for radar) and its own scene
and acquisition date per reference scene. The store records the groups in its `sensors` attribute and a checkpoint in
its band contract's `sensors` (`eoscale.contract.BandContract`), as a list of `{"name": sensor, "bands": [...]}` in
channel order: `SensorGroup`s here.

A store or checkpoint without the record holds one sensor (its `sensor` attribute): `groups_of` gives it one group.
Normalised inputs read 0 where a group has no data (`eoscale.data.datamodule`, the window reader), so a network can tell
from its input which sensors it has at each pixel (`present`): missing, masked and dropped sensors look alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from eoscale.errors import InputError


@dataclass(frozen=True)
class SensorGroup:
    """One sensor's bands in an input of several: `name` (a registered sensor, `eoscale.sensors`), its `bands` in
    order, and `start`, the channel of its first band."""

    name: str
    bands: tuple[str, ...]
    start: int

    @property
    def stop(self) -> int:
        return self.start + len(self.bands)

    @property
    def channels(self) -> slice:
        return slice(self.start, self.stop)

    def to_dict(self) -> dict:
        return {"name": self.name, "bands": list(self.bands)}


def parse_groups(record: Sequence[Mapping] | None, bands: Sequence[str]) -> tuple[SensorGroup, ...] | None:
    """The groups of a `sensors` record (a store attribute, a contract field), checked against `bands` (which they
    must cover in order, each band once); None for no record. A record that does not cover `bands` is an InputError."""
    if record is None:
        return None
    groups, start = [], 0
    for entry in record:
        names = tuple(str(b) for b in entry["bands"])
        if not names:
            raise InputError(f"sensor {entry.get('name')!r} has no bands in the sensors record: rewrite the store")
        groups.append(SensorGroup(str(entry["name"]), names, start))
        start += len(names)
    listed = tuple(b for g in groups for b in g.bands)
    if listed != tuple(bands):
        raise InputError(f"the sensors record lists bands {list(listed)}, the bands are {list(bands)}: "
                         "re-ingest the store")
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise InputError(f"the sensors record names a sensor twice ({names}): re-ingest the store")
    return tuple(groups)


def groups_of(record: Sequence[Mapping] | None, bands: Sequence[str], sensor: str | None) -> tuple[SensorGroup, ...]:
    """`parse_groups`, or one group of every band (named `sensor`) where there is no record."""
    parsed = parse_groups(record, bands)
    return parsed if parsed is not None else (SensorGroup(str(sensor or "unknown"), tuple(bands), 0),)


def as_record(groups: Iterable[SensorGroup]) -> list[dict]:
    """Plain data for a store attribute or a checkpoint (`torch.load(weights_only=True)` reads it)."""
    return [g.to_dict() for g in groups]


def select_groups(groups: Sequence[SensorGroup], bands: Sequence[str]) -> tuple[SensorGroup, ...]:
    """The groups of a band selection (`bands`, a subset of the groups' bands in their order), renumbered; a group
    none of whose bands is chosen is left out."""
    chosen = set(bands)
    out, start = [], 0
    for g in groups:
        kept = tuple(b for b in g.bands if b in chosen)
        if kept:
            out.append(SensorGroup(g.name, kept, start))
            start += len(kept)
    return tuple(out)


__all__ = ["SensorGroup", "as_record", "groups_of", "parse_groups", "select_groups"]
