"""A sensor missing from an input: the one rule of `eoscale predict` and `eoscale serve` (`--missing-sensor`).

A model of several sensors takes each sensor's bands as a group that may be absent (`InputSpec.groups`: the presence
rule zeroes it). Where an input holds *no data at all* of one of its sensors, mapping it is a choice the user makes:
`refuse` (the default) turns it down in one line naming the sensor and the fixes; `dropout` maps it with that sensor's
channels at 0, as training's sensor dropout (`TileDataModule(sensor_dropout=…)`) taught the model to take them. What
"an input" is depends on the stage: predict's is a place (its scenes: `eoscale.raster.fused`,
`eoscale.raster.fused_season`), serve's a request (its windows: `eoscale.serve.landcover`); a sensor with data over
part of it is never missing, its gaps read as absent by the presence rule. Torch is imported only where a request's
windows are read (`absent_sensors`): ingest and predict's scene checks import this module without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from eoscale.errors import InputError
from eoscale.inputs.spec import InputSpec
from eoscale.sensors.copdem import COPDEM

MISSING_SENSOR = ("refuse", "dropout")  # the choices of --missing-sensor, refuse first (the default)
DROPOUT = "--missing-sensor dropout"

if TYPE_CHECKING:
    from torch import Tensor


def check_missing(missing: str) -> str:
    """`missing`, refused in one line unless it is one of `MISSING_SENSOR`."""
    if missing not in MISSING_SENSOR:
        raise InputError(f"--missing-sensor {missing!r}: choose one of {', '.join(MISSING_SENSOR)}")
    return missing


def refused_sensor(lacking: Sequence[str], missing: str) -> str | None:
    """The sensor an input is refused for: the first of `lacking` (the model's sensors the input holds no data of)
    unless `missing` is "dropout" (they read as absent); None: the input maps."""
    return lacking[0] if lacking and check_missing(missing) != "dropout" else None


def dropout_fix(command: str = "") -> str:
    """The fix the refusal names beside giving the sensor's data (`command`: the command the option belongs to)."""
    return f"map it without them with {f'{command} ' if command else ''}{DROPOUT} (its channels read 0, as a dropped sensor)"


def absent_sensors(spec: InputSpec, x: Tensor) -> list[str]:
    """The sensors of `spec` (static layers aside) whose bands are at the spec's nodata in every pixel of raw `x`
    (..., C, H, W: every window, and every date of a stack); none for a model of one sensor."""
    groups = [g for g in spec.groups() if g.name != COPDEM]
    if len(groups) < 2:
        return []
    from eoscale.inputs.prepare import presence_from_nodata

    presence = presence_from_nodata(spec, x)  # (..., G, H, W)
    held = presence.movedim(-3, 0).flatten(1).any(dim=1)
    return [g.name for g, h in zip(spec.groups(), held.tolist(), strict=True) if g.name != COPDEM and not h]


__all__ = ["DROPOUT", "MISSING_SENSOR", "absent_sensors", "check_missing", "dropout_fix", "refused_sensor"]
