"""The input spec: one description of what a model takes, from which every stage prepares its windows.

    spec = InputSpec.from_store_attrs(store.attrs)        # ingest recorded it (older stores: inferred)
    spec = InputSpec.from_contract(contract)              # fit recorded it in the checkpoint (older ones: inferred)

It names each sensor (its bands in channel order, its mask rule and its timeline: the scenes' own dates, or a calendar
of composite intervals, their length and first day, with a reducer), the static layers (a DEM's elevation, slope, aspect sine and cosine: the
`copdem` group, last), the grid (tile size; the reference CRS and resolution where known), the per-band statistics,
the nodata value and the presence rule (a group of bands is absent at a pixel where all its bands are at nodata), and
the date encoding (the dates a temporal model is handed: days since 1970-01-01, from which the model takes the day of
the year; never days since a tile's first valid date).

Ingest records it in the store's `input_spec` attribute without the statistics (the store's `statistics` attribute is
their one place; `from_store_attrs` joins them); `fit` records it whole in the checkpoint's band contract
(`BandContract.input_spec`). A store or checkpoint written before gets the spec its attributes imply
(`from_store_attrs`, `from_contract`): the channel groups are exactly the ones the loader and predict used then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eoscale.errors import InputError
from eoscale.sensors.copdem import COPDEM
from eoscale.sensors.groups import SensorGroup, groups_of
from eoscale.store import schema

SPEC_KEY = "input_spec"  # the store attribute and the band contract's field
TIMELINES = ("dates", "calendar")  # a sensor's time steps: its scenes' own dates, or composite intervals
REDUCERS = ("median",)  # how a calendar interval's observations become one (the median of the clear ones)
MASK_RULES = ("product", "nodata")  # the product's own masks (SCL, QA_PIXEL, mask bands, nodata), or nodata alone
PRESENCE_RULES = ("group_nodata",)  # a group is absent where all its bands are at the nodata value
DATE_ENCODINGS = ("days_since_1970",)  # what a temporal model is handed (it derives the day of the year)


@dataclass(frozen=True)
class Timeline:
    """A sensor's time steps: `steps` of them, each a scene's own date (`kind="dates"`), or a composite interval
    (`kind="calendar"`: `interval` days or "monthly", on the calendar that begins at `start` (ISO: the store's
    first day, which ingest records; None in a spec written before: each place's own first date, as predict then
    read it), its observations reduced by `reducer`)."""

    kind: str = "dates"
    steps: int = 1
    interval: int | str | None = None
    reducer: str | None = None
    start: str | None = None

    def __post_init__(self) -> None:
        _one_of("timeline", self.kind, TIMELINES)
        if self.kind == "calendar":
            _one_of("reducer", self.reducer, REDUCERS)
        if int(self.steps) < 1:
            raise InputError(f"a timeline of {self.steps} steps: give at least 1")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "steps": int(self.steps)}
        if self.kind == "calendar":
            out.update(interval=self.interval, reducer=self.reducer, start=self.start)
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> Timeline:
        return cls(kind=str(data.get("kind", "dates")), steps=int(data.get("steps", 1)), interval=data.get("interval"),
                   reducer=data.get("reducer"), start=data.get("start"))


@dataclass(frozen=True)
class SensorInput:
    """One sensor's bands in channel order, its mask rule and its timeline."""

    name: str
    bands: tuple[str, ...]
    timeline: Timeline = field(default_factory=Timeline)
    mask: str = "product"

    def __post_init__(self) -> None:
        _one_of("mask rule", self.mask, MASK_RULES)

    def to_dict(self) -> dict:
        return {"name": self.name, "bands": list(self.bands), "timeline": self.timeline.to_dict(), "mask": self.mask}

    @classmethod
    def from_dict(cls, data: Mapping) -> SensorInput:
        return cls(str(data["name"]), tuple(str(b) for b in data["bands"]), Timeline.from_dict(data.get("timeline") or {}),
                   str(data.get("mask", "product")))


@dataclass(frozen=True)
class InputSpec:
    """What a model takes (see the module docstring). Channels: every sensor's bands in order, then `static`."""

    sensors: tuple[SensorInput, ...]
    static: tuple[str, ...] = ()
    tile_size: int = 0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    nodata: float = 0.0
    crs: str | None = None
    resolution: float | None = None
    presence: str = "group_nodata"
    date_encoding: str = "days_since_1970"

    def __post_init__(self) -> None:
        if not self.sensors:
            raise InputError("an input spec without a sensor: re-ingest the store")
        _one_of("presence rule", self.presence, PRESENCE_RULES)
        _one_of("date encoding", self.date_encoding, DATE_ENCODINGS)
        for name, values in (("mean", self.mean), ("std", self.std)):
            if values and len(values) != len(self.bands):
                raise InputError(f"the input spec gives {len(values)} {name} values for {len(self.bands)} bands: "
                                 "re-ingest the store")

    # --- what it says --------------------------------------------------------------------------------------
    @property
    def bands(self) -> tuple[str, ...]:
        return tuple(b for s in self.sensors for b in s.bands) + self.static

    @property
    def time_steps(self) -> int:
        """The time steps a window holds (every sensor's timeline has them: one stack a place)."""
        return max(s.timeline.steps for s in self.sensors)

    @property
    def composite(self) -> Timeline | None:
        """The calendar timeline of a sensor composited at ingest (None: every sensor's scenes as they are)."""
        return next((s.timeline for s in self.sensors if s.timeline.kind == "calendar"), None)

    def record(self) -> list[dict] | None:
        """The groups as a store's `sensors` attribute holds them (None for one sensor without static layers, as
        such a store records none)."""
        record = [{"name": s.name, "bands": list(s.bands)} for s in self.sensors]
        record += [{"name": COPDEM, "bands": list(self.static)}] if self.static else []
        return record if len(record) > 1 else None

    def groups(self) -> tuple[SensorGroup, ...]:
        """Each group of consecutive channels that is present or absent as one (a sensor's, the static layers')."""
        return groups_of(self.record(), self.bands, self.sensors[0].name)

    def select(self, bands) -> InputSpec:
        """The spec of a band selection (`bands`, a subset of this spec's in their order: a loader's `bands=`); a
        sensor none of whose bands is chosen is left out."""
        chosen = set(bands)
        index = {b: i for i, b in enumerate(self.bands)}
        sensors = tuple(replace(s, bands=tuple(b for b in s.bands if b in chosen)) for s in self.sensors)
        kept = tuple(b for b in self.bands if b in chosen)
        pick = [index[b] for b in kept]
        return replace(self, sensors=tuple(s for s in sensors if s.bands),
                       static=tuple(b for b in self.static if b in chosen),
                       mean=tuple(self.mean[i] for i in pick) if self.mean else (),
                       std=tuple(self.std[i] for i in pick) if self.std else ())

    def with_calendar_start(self, start: str | None) -> InputSpec:
        """The spec with `start` (ISO date) as the first day of every calendar timeline: the store's composite
        calendar, which ingest records so that predict composites a place on training's intervals."""
        return replace(self, sensors=tuple(replace(s, timeline=replace(s.timeline, start=start))
                                           if s.timeline.kind == "calendar" else s for s in self.sensors))

    def with_statistics(self, mean, std) -> InputSpec:
        return replace(self, mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std))

    # --- plain data ------------------------------------------------------------------------------------------
    def to_dict(self, *, statistics: bool = True) -> dict:
        """JSON-able (and `torch.load(weights_only=True)`-able); without the statistics for a store's attribute."""
        out: dict[str, Any] = {"sensors": [s.to_dict() for s in self.sensors], "static": list(self.static),
                               "tile_size": int(self.tile_size), "nodata": float(self.nodata), "crs": self.crs,
                               "resolution": self.resolution, "presence": self.presence,
                               "date_encoding": self.date_encoding}
        if statistics:
            out.update(mean=list(self.mean), std=list(self.std))
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> InputSpec:
        return cls(sensors=tuple(SensorInput.from_dict(s) for s in data["sensors"]),
                   static=tuple(str(b) for b in data.get("static") or ()), tile_size=int(data.get("tile_size") or 0),
                   mean=tuple(float(v) for v in data.get("mean") or ()),
                   std=tuple(float(v) for v in data.get("std") or ()), nodata=float(data.get("nodata") or 0.0),
                   crs=data.get("crs"), resolution=data.get("resolution"),
                   presence=str(data.get("presence", "group_nodata")),
                   date_encoding=str(data.get("date_encoding", "days_since_1970")))

    # --- where it comes from ----------------------------------------------------------------------------------
    @classmethod
    def from_store_attrs(cls, attrs: Mapping) -> InputSpec:
        """A store's spec: the one ingest recorded, else the one its attributes imply (sensor, sensors, time steps,
        the ingest's composite parameters); with the store's statistics either way."""
        stats = attrs.get(schema.ATTR_STATISTICS) or {}
        if attrs.get(SPEC_KEY):
            spec = cls.from_dict(attrs[SPEC_KEY])
            recorded = [(g["name"], list(g["bands"])) for g in attrs.get(schema.ATTR_SENSORS) or ()]
            if recorded and recorded != [(g["name"], list(g["bands"])) for g in spec.record() or ()]:
                raise InputError(f"the store's input spec ({SPEC_KEY}) and its sensors attribute name other band "
                                 f"groups ({spec.record()} and {list(attrs[schema.ATTR_SENSORS])}): the store was "
                                 f"edited after ingest; ingest it again")
            if attrs.get(schema.ATTR_NODATA) is not None:  # the store's own attribute, as its statistics are
                spec = replace(spec, nodata=float(attrs[schema.ATTR_NODATA]))
        else:
            series = (attrs.get(schema.ATTR_INGEST) or {}).get("time_series") or {}
            spec = infer(bands=attrs[schema.ATTR_BANDS], sensor=attrs.get(schema.ATTR_SENSOR),
                         record=attrs.get(schema.ATTR_SENSORS), steps=int(attrs.get(schema.ATTR_TIME_STEPS) or 1),
                         tile_size=int(attrs.get(schema.ATTR_TILE_SIZE) or 0),
                         nodata=float(attrs.get(schema.ATTR_NODATA) or 0), composite=series.get("composite"))
        return spec.with_statistics(stats["mean"], stats["std"]) if "mean" in stats else spec

    @classmethod
    def from_contract(cls, contract: Any) -> InputSpec:
        """A checkpoint's spec (`contract`: its `eoscale.contract.BandContract`): the one `fit` recorded, else the
        one its band contract implies (nodata 0: what serving assumed for those)."""
        recorded = getattr(contract, "input_spec", None)
        if recorded:
            spec = cls.from_dict(recorded)
        else:
            spec = infer(bands=contract.bands, sensor=contract.sensor, record=contract.sensors,
                         steps=contract.time_steps, tile_size=contract.tile_size, nodata=0.0)
        return spec.with_statistics(contract.mean, contract.std)


def infer(*, bands, sensor: str | None, record, steps: int, tile_size: int, nodata: float,
          composite: int | str | None = None) -> InputSpec:
    """The spec of a store or checkpoint written before specs were recorded: its channel groups exactly as the
    `sensors` record (or one sensor of every band) makes them; a trailing `copdem` group as the static layers."""
    timeline = (Timeline("calendar", steps, composite, "median") if composite is not None else Timeline("dates", steps))
    groups = groups_of(record, tuple(bands), sensor)
    static: tuple[str, ...] = ()
    if len(groups) > 1 and groups[-1].name == COPDEM:
        static, groups = groups[-1].bands, groups[:-1]
    sensors = tuple(SensorInput(g.name, g.bands, timeline, "product" if i == 0 else "nodata")
                    for i, g in enumerate(groups))
    return InputSpec(sensors=sensors, static=static, tile_size=tile_size, nodata=nodata)


def _one_of(what: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(f"{what} {value!r} is not one eoscale knows: use one of {', '.join(allowed)}")


__all__ = ["DATE_ENCODINGS", "MASK_RULES", "PRESENCE_RULES", "REDUCERS", "SPEC_KEY", "TIMELINES", "InputSpec",
           "SensorInput", "Timeline", "infer"]
