"""One land-cover model as Triton sees it: its tensors, its band contract, and the callable that answers a batch.

Inputs (per request; Triton's dynamic batcher gathers requests into one call):

- `windows` uint16 `[B, C, T, T]`: raw pixel values (digital numbers as the scene files hold them) in the
  checkpoint's band order, at its tile size;
- `valid` uint8 `[B, T, T]`, optional: 0 where a pixel is nodata (it then goes to the network as the band mean,
  as in training and in `eoscale predict`); without it every pixel counts as valid. A window of several dates
  reads each date's gaps from its bands at the contract's nodata instead (as `eoscale predict --server` sends them).

Outputs (a client asks for the ones it wants; Triton sends all when it names none):

- `probabilities` float16 `[B, K, T, T]`: the class probabilities (softmax), compact for web maps;
- `probabilities_fp32` float32 `[B, K, T, T]`: the same at full precision (float16's step is 2.4e-4 near 1, too
  coarse for maps that must equal local prediction to 1e-4: `eoscale predict --server` asks for these);
- `class` uint16 `[B, T, T]`: the most probable class's code (the class table's, e.g. WorldCover's 10..100);
- `confidence` float16 `[B, T, T]`: that class's probability.

A change model (target kind "change", two dates) takes `windows` `[B, 2 * C, T, T]`: the first date's bands, then the
second's (as `eoscale predict --server` reads a pair of scenes), and answers its change classes as the outputs above.
A temporal model of N dates (a season) takes `windows` `[B, N * C, T, T]`, date after date, and `dates` int32 `[B, N]`:
each date in days since 1970-01-01 (its input spec's date encoding; the model takes the day of the year from it),
required when the model reads dates. A date's bands at the contract's nodata where it has no data (clouds), as
`eoscale predict --server` sends them, read as absent there; a date absent from the whole window is left out.

A model of several sensors (its contract's `sensors`) takes `missing_sensor` uint8 `[1]`, optional, too. A request
in which one of its sensors holds no data at all (that sensor's bands at the contract's nodata in every pixel of every
window, and every date) lacks that sensor: it is refused in one line naming the sensor and the fixes, unless the server
was started with `--missing-sensor dropout` or the request's `missing_sensor` is 1 (then the sensor's channels read 0,
as a dropped sensor in training): the rule of `eoscale predict --missing-sensor` (`eoscale.inputs.missing`), a request
standing for predict's place. `eoscale predict --server` sends 1: it has applied its own `--missing-sensor` to whole
scenes, so a window of a checked scene outside a sensor's swath is a gap, not a missing sensor.

Every window is prepared as the loader and `eoscale predict` prepare it, by the checkpoint's input spec
(`eoscale.inputs.prepare`): `(x - mean) / std`, each group of bands (a sensor's, the static layers') 0 where it is
absent, i.e. outside `valid` or where all its bands are at the spec's nodata (a model of several sensors, as fused).

A model of per-pixel values (a regression checkpoint, target kind "values") has one output instead:

- `values` float32 `[B, 1, T, T]`: the values in the target's units (`BandContract.activate`: the normalisation
  undone), nodata pixels included (the client masks them as `eoscale predict` does); asking it for class
  outputs is refused by Triton, naming the outputs it has.

The model's config carries the band contract (`eoscale_contract`: bands in order, mean/std, tile size, class
table), where the model comes from (`eoscale_model`: checkpoint, adapter, backbone, lineage) and the server's
models (`eoscale_served`) as parameters,
so a client reads them with `get_model_config` and checks its scene against them before sending a window.
Triton itself refuses a request of another band count, tile size or dtype, naming what it expected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from eoscale.contract import BandContract
from eoscale.errors import InputError
from eoscale.inputs.missing import MISSING_SENSOR, absent_sensors, check_missing, dropout_fix, refused_sensor
from eoscale.inputs.prepare import dates_held, prepare, presence_from_nodata
from eoscale.sensors.copdem import COPDEM

CONTRACT_PARAMETER = "eoscale_contract"
MODEL_PARAMETER = "eoscale_model"
SERVED_PARAMETER = "eoscale_served"
OUTPUTS = ("probabilities", "probabilities_fp32", "class", "confidence")
VALUE_OUTPUTS = ("values",)
SERVED_TARGETS = ("classes", "values", "change")  # the target kinds (`eoscale.contract.TARGET_KINDS`) served


@dataclass
class ServedModel:
    """A network (eval mode, LoRA folded in) behind a Triton model name, and the callable Triton's requests reach."""

    name: str
    network: nn.Module
    contract: BandContract
    about: dict  # checkpoint, adapter, backbone, lineage: the `eoscale_model` parameter
    missing: str = "refuse"  # a request without data of one of the model's sensors: `eoscale.inputs.missing`

    def __post_init__(self) -> None:
        if self.contract.target not in SERVED_TARGETS:
            raise InputError(f"model {self.name!r} maps {self.contract.target!r}: eoscale serve answers "
                             f"{', '.join(SERVED_TARGETS)} models only")
        self.spec = self.contract.spec()  # the preparation of its windows: the loader's and predict's
        check_missing(self.missing)
        self.several = len([g for g in self.spec.groups() if g.name != COPDEM]) > 1  # sensors that may be missing
        self.steps = self.contract.time_steps  # a change or temporal model's windows: every date's bands
        self.takes_dates = takes_dates(self.network)
        self.values = self.contract.target == "values"
        self.output_names = VALUE_OUTPUTS if self.values else OUTPUTS
        self.codes = np.array([int(c["code"]) for c in self.contract.classes], dtype=np.uint16)
        self.device = next(self.network.parameters()).device

    def tensors(self) -> tuple[list, list]:
        """PyTriton's input and output specs (shapes without the batch dimension)."""
        from pytriton.model_config import Tensor

        bands = len(self.contract.bands) * self.contract.time_steps  # a change model: both dates' bands
        tile, classes = self.contract.tile_size, len(self.contract.classes)
        inputs = [Tensor(name="windows", dtype=np.uint16, shape=(bands, tile, tile)),
                  Tensor(name="valid", dtype=np.uint8, shape=(tile, tile), optional=True)]
        if self.takes_dates:  # a temporal model: each date's day (days since 1970-01-01)
            inputs.append(Tensor(name="dates", dtype=np.int32, shape=(self.steps,), optional=True))
        if self.several:  # a model of several sensors: 1 maps a request lacking one as dropout (module docstring)
            inputs.append(Tensor(name="missing_sensor", dtype=np.uint8, shape=(1,), optional=True))
        if self.values:
            return inputs, [Tensor(name="values", dtype=np.float32, shape=(1, tile, tile))]
        outputs = [Tensor(name="probabilities", dtype=np.float16, shape=(classes, tile, tile)),
                   Tensor(name="probabilities_fp32", dtype=np.float32, shape=(classes, tile, tile)),
                   Tensor(name="class", dtype=np.uint16, shape=(tile, tile)),
                   Tensor(name="confidence", dtype=np.float16, shape=(tile, tile))]
        return inputs, outputs

    def parameters(self, served: list[str]) -> dict[str, str]:
        """The model config's parameters: the band contract and the model's origin, as JSON, and the names of all
        models of the server (`served`: a client that asks for an unknown one is told them)."""
        return {CONTRACT_PARAMETER: json.dumps(self.contract.to_dict(), separators=(",", ":")),
                MODEL_PARAMETER: json.dumps(self.about, separators=(",", ":")), SERVED_PARAMETER: ",".join(served)}

    def normalise(self, windows: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        """The windows (B, dates * C, T, T) as the network takes them (`prepare`'s), float32."""
        return self.prepare(windows, valid)[0]

    def prepare(self, windows: np.ndarray, valid: np.ndarray | None,
                dates: np.ndarray | None = None) -> tuple[np.ndarray, torch.Tensor | None, torch.Tensor | None]:
        """(the prepared windows (B, dates * C, T, T) float32, the dates int64 (B, N), which dates each window holds
        float32 (B, N)) of raw windows, `valid` (B, T, T) and `dates` (B, N); the last two None for one date."""
        x = torch.from_numpy(np.ascontiguousarray(windows))
        if self.steps > 1:
            x = x.unflatten(1, (self.steps, -1))  # (B, N, C, T, T)
        presence = presence_from_nodata(self.spec, x)
        # a window of several dates: each date's presence is its own (its gaps come at nodata, as `predict --server`
        # sends them), as the loader and predict read it; `valid` (where the map has a pixel) does not blank them
        if valid is not None and not valid.all() and self.steps == 1:
            inside = torch.from_numpy(np.ascontiguousarray(valid, dtype=bool))
            presence = presence & (inside[:, None, None] if self.steps > 1 else inside[:, None])
        prepared = prepare(self.spec, x, presence=presence)
        if self.steps == 1:
            return prepared.numpy(), None, None
        held = dates_held(prepared)
        days = None if dates is None else torch.from_numpy(np.asarray(dates, dtype=np.int64)).expand(len(x), -1)
        return prepared.flatten(1, 2).numpy(), days, held

    def probabilities(self, x: np.ndarray, dates: torch.Tensor | None = None,
                      date_valid: torch.Tensor | None = None) -> torch.Tensor:
        """The network's output on prepared windows as its target kind makes maps of it (`BandContract.activate`:
        the softmax for classes), float32 on the CPU; a temporal model is given its stack with `dates`."""
        batch = torch.from_numpy(x)
        if len(batch) == 1:  # as `eoscale predict` does: a batch of one takes other CPU kernels
            batch = torch.cat([batch, batch])
            dates = None if dates is None else torch.cat([dates, dates])
            date_valid = None if date_valid is None else torch.cat([date_valid, date_valid])
        batch = batch.to(self.device)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                    else torch.autocast("cpu", enabled=False))
        with torch.inference_mode(), autocast:
            if self.takes_dates:
                logits = self.network(batch.unflatten(1, (self.steps, -1)), dates=dates.to(self.device),
                                      date_valid=date_valid.to(self.device))
            else:
                logits = self.network(batch)
        with torch.inference_mode():
            return self.contract.activate(logits)[: len(x)].cpu()

    def __call__(self, requests: list[Any]) -> list[dict[str, np.ndarray]]:
        """Answer the requests Triton batched: one forward pass over all their windows, then each its outputs."""
        windows = [np.asarray(r.data["windows"]) for r in requests]
        valid = [np.asarray(r.data["valid"]).astype(bool) if "valid" in r.data else
                 np.ones((len(w), *w.shape[2:]), dtype=bool) for r, w in zip(requests, windows, strict=True)]
        for w, v in zip(windows, valid, strict=True):
            if v.shape != (w.shape[0], *w.shape[2:]):
                from pytriton.exceptions import PyTritonBadParameterError

                raise PyTritonBadParameterError(
                    f"input 'valid' has shape {list(v.shape)}: expected [{w.shape[0]}, {w.shape[2]}, {w.shape[3]}], "
                    "one mask per window of 'windows'")
        dates = None
        if self.takes_dates:
            given = [np.asarray(r.data["dates"]) if "dates" in r.data else None for r in requests]
            if any(d is None for d in given):
                from pytriton.exceptions import PyTritonBadParameterError

                raise PyTritonBadParameterError(
                    f"model {self.name!r} is a temporal model of {self.steps} dates: give input 'dates' "
                    f"[{self.steps}] int32, each date in days since 1970-01-01")
            dates = np.concatenate([np.broadcast_to(d, (len(w), self.steps)) for d, w in zip(given, windows, strict=True)])
        if self.several:
            for request, w in zip(requests, windows, strict=True):
                self.check_sensors(w, request.data.get("missing_sensor"))
        x, days, held = self.prepare(np.concatenate(windows), np.concatenate(valid), dates)
        probs = self.probabilities(x, days, held)
        answers, start = [], 0
        for request, w in zip(requests, windows, strict=True):
            p = probs[start : start + len(w)]
            start += len(w)
            answers.append(self.outputs(p, request.requested_output_names or self.output_names))
        return answers

    def check_sensors(self, windows: np.ndarray, missing_sensor: np.ndarray | None = None) -> None:
        """Refuse, in one line, the raw `windows` of one request (B, dates * C, T, T) that hold no data of one of the
        model's sensors, unless the server maps such requests as dropout (`missing`) or the request asks it
        (`missing_sensor` 1): the rule of `eoscale predict --missing-sensor` (`eoscale.inputs.missing`)."""
        missing = self.missing if missing_sensor is None else MISSING_SENSOR[int(np.asarray(missing_sensor).any())]
        x = torch.from_numpy(np.ascontiguousarray(windows))
        refused = refused_sensor(absent_sensors(self.spec, x.unflatten(1, (self.steps, -1))), missing)
        if refused is None:
            return
        from pytriton.exceptions import PyTritonBadParameterError

        bands = next(s.bands for s in self.spec.sensors if s.name == refused)
        raise PyTritonBadParameterError(
            f"the request to model {self.name!r} has no {refused} data: its bands ({', '.join(bands)}) are at nodata "
            f"({self.spec.nodata:g}) in every window; send windows with them, or {dropout_fix('eoscale serve')} or "
            f"with the request's input 'missing_sensor' 1")

    def outputs(self, probs: torch.Tensor, names: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self.values:
            return {"values": probs.float().numpy()} if "values" in names else {}
        if "probabilities" in names:
            out["probabilities"] = probs.half().numpy()
        if "probabilities_fp32" in names:
            out["probabilities_fp32"] = probs.numpy()
        if "class" in names or "confidence" in names:
            confidence, index = probs.max(dim=1)
            out["class"] = self.codes[index.numpy()]
            out["confidence"] = confidence.half().numpy()
        return {k: v for k, v in out.items() if k in names}


def takes_dates(network: nn.Module) -> bool:
    """Whether `network` is a temporal model that takes its stack's dates (`eoscale.models.temporal`: `dates`,
    `date_valid`); the one test of `eoscale.infer.stacked`, which serve does not import."""
    import inspect

    try:
        return "date_valid" in inspect.signature(network.forward).parameters
    except (TypeError, ValueError):
        return False
