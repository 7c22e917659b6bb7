"""One land-cover model as Triton sees it: its tensors, its band contract, and the callable that answers a batch.

Inputs (per request; Triton's dynamic batcher gathers requests into one call):

- `windows` uint16 `[B, C, T, T]`: raw pixel values (digital numbers as the scene files hold them) in the
  checkpoint's band order, at its tile size;
- `valid` uint8 `[B, T, T]`, optional: 0 where a pixel is nodata (it then goes to the network as the band mean,
  as in training and in `eoscale predict`); without it every pixel counts as valid.

Outputs (a client asks for the ones it wants; Triton sends all when it names none):

- `probabilities` float16 `[B, K, T, T]`: the class probabilities (softmax), compact for web maps;
- `probabilities_fp32` float32 `[B, K, T, T]`: the same at full precision (float16's step is 2.4e-4 near 1, too
  coarse for maps that must equal local prediction to 1e-4: `eoscale predict --server` asks for these);
- `class` uint16 `[B, T, T]`: the most probable class's code (the class table's, e.g. WorldCover's 10..100);
- `confidence` float16 `[B, T, T]`: that class's probability.

A change model (target kind "change", two dates) takes `windows` `[B, 2 * C, T, T]`: the first date's bands, then the
second's (as `eoscale predict --server` reads a pair of scenes), and answers its change classes as the outputs above.

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

    def __post_init__(self) -> None:
        if self.contract.target not in SERVED_TARGETS:
            raise InputError(f"model {self.name!r} maps {self.contract.target!r}: eoscale serve answers "
                             f"{', '.join(SERVED_TARGETS)} models only")
        steps = self.contract.time_steps
        if steps > 1 and self.contract.target != "change":
            raise InputError(f"model {self.name!r} is a temporal model of {steps} dates: eoscale serve answers "
                             "single-date and change models only; map seasons with 'eoscale predict --checkpoint'")
        self.mean, self.scale = self.contract.normalisation(steps)  # a change model's windows: both dates' bands
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
        """`(x - mean) * scale`, nodata as 0: the same float32 operations as `eoscale.infer.predict.read_windows`."""
        out = np.empty(windows.shape, dtype=np.float32)
        np.subtract(windows, self.mean, out=out)
        out *= self.scale
        if valid is not None and not valid.all():
            np.copyto(out, 0.0, where=~valid[:, None])
        if self.contract.sensors is not None:  # several sensors: each reads 0 where all its bands are at nodata (0)
            bands = len(self.contract.bands)
            for step in range(self.contract.time_steps):
                for group in self.contract.sensor_groups():
                    channels = slice(step * bands + group.start, step * bands + group.stop)
                    missing = np.all(windows[:, channels] == 0, axis=1)
                    if missing.any():
                        np.copyto(out[:, channels], 0.0, where=missing[:, None])
        return out

    def probabilities(self, x: np.ndarray) -> torch.Tensor:
        """The network's output on normalised windows as its target kind makes maps of it (`BandContract.activate`:
        the softmax for classes), float32 on the CPU."""
        batch = torch.from_numpy(x)
        if len(batch) == 1:
            batch = torch.cat([batch, batch])  # as `eoscale predict` does: a batch of one takes other CPU kernels
        batch = batch.to(self.device)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                    else torch.autocast("cpu", enabled=False))
        with torch.inference_mode(), autocast:
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
        x = self.normalise(np.concatenate(windows), np.concatenate(valid))
        probs = self.probabilities(x)
        answers, start = [], 0
        for request, w in zip(requests, windows, strict=True):
            p = probs[start : start + len(w)]
            start += len(w)
            answers.append(self.outputs(p, request.requested_output_names or self.output_names))
        return answers

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
