"""A network of several dates fed from the window loop: the windows of a `SceneStack` hold every date's bands on
the channel axis (`(B, T * C, H, W)`, as `eoscale.raster.stack` reads them), which a change model takes as they are.
A temporal model (`eoscale.models.temporal`: its `forward` takes `dates` and `date_valid`) is given the stack as
`(B, T, C, H, W)` with the scene's dates (days since 1970, as the loader gives them) and each window's valid dates: a
date is valid in a window unless every one of its pixels was set to the band mean (0) for holding no data.
"""

from __future__ import annotations

import datetime as dt
import inspect

import torch
from torch import Tensor, nn

from eoscale.inputs.prepare import dates_held
from eoscale.models.temporal import NO_DATE  # the loader's marker of an unknown date

EPOCH = dt.date(1970, 1, 1)


def takes_dates(network: nn.Module) -> bool:
    """Whether `network` is a temporal model that takes the dates of its stack (`dates`, `date_valid`)."""
    try:
        return "date_valid" in inspect.signature(network.forward).parameters
    except (TypeError, ValueError):
        return False


class DatedStack(nn.Module):
    """`network` (a temporal model) on windows of a stack of `len(dates)` dates stacked on the channel axis."""

    def __init__(self, network: nn.Module, dates: list[dt.date | None], no_date: int) -> None:
        super().__init__()
        self.network = network
        self.steps = len(dates)
        self.register_buffer("dates", torch.tensor([(d - EPOCH).days if d else no_date for d in dates]),
                             persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        b, channels, h, w = x.shape
        stack = x.reshape(b, self.steps, channels // self.steps, h, w)
        date_valid = dates_held(stack).to(x.dtype)  # a date with no data reads 0 everywhere (the preparation)
        dates = self.dates.to(x.device).expand(b, -1)
        return self.network(stack, dates=dates, date_valid=date_valid)


def for_stack(network: nn.Module, dates: list[dt.date | None]) -> nn.Module:
    """The network to run on a stack's windows: a temporal model wrapped in `DatedStack`, any other as it is."""
    if not takes_dates(network):
        return network
    return DatedStack(network, dates, NO_DATE).to(next(network.parameters()).device)


def trained_composite(contract) -> int | str | None:
    """The composite interval (days, or "monthly") the checkpoint's steps were made of, from its input spec
    (`BandContract.spec()`: a sensor's calendar timeline); None: the scenes' own dates, or a contract written before
    input specs (its store's `--composite` is not in the checkpoint)."""
    composite = contract.spec().composite
    return None if composite is None else composite.interval


def trained_calendar(contract) -> tuple[int | str, dt.date | None] | None:
    """The composite calendar the checkpoint's steps were made on: (the interval, days or "monthly"; its first day,
    as ingest recorded it in the input spec, or None in a spec written before: predict then starts each place's
    calendar at its own first date); None: the scenes' own dates (`trained_composite`)."""
    composite = contract.spec().composite
    if composite is None:
        return None
    return composite.interval, dt.date.fromisoformat(composite.start) if composite.start else None
