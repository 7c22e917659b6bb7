"""Checkpoints: the band contract they carry, fine-tuning from them, and consolidating FSDP ones.

Every eoscale checkpoint holds, under ``checkpoint["eoscale"]``, the band contract of the store it was
trained on: band names in order, the normalisation mean/std per band, the tile size and the class table.
Resuming, fine-tuning and prediction compare it with their store and refuse a mismatch in one line.

Under FSDP (`ModelParallelStrategy`) Lightning writes a *sharded* checkpoint: a folder of `.distcp`
files, one per rank, plus `meta.pt` (loops, callbacks, hyperparameters, this contract). It resumes on any
world size (torch.distributed.checkpoint reshards on load). `consolidate()` (`eoscale consolidate DIR OUT`)
turns it into one ordinary Lightning file that single-device training, `load_from_checkpoint` and
prediction read; ModelParallelStrategy resumes from that file too.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from eoscale.errors import BandMismatchError, InputError, InputNotFoundError

CONTRACT_KEY = "eoscale"
METADATA_FILE = "meta.pt"  # Lightning's name for the non-tensor part of a sharded checkpoint


@dataclass(frozen=True)
class BandContract:
    """What a model expects of its input tiles."""

    bands: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    tile_size: int
    classes: tuple[dict, ...]  # {index, code, name, color}

    @classmethod
    def from_datamodule(cls, datamodule: Any) -> BandContract:
        stats = datamodule.statistics
        table = datamodule.class_table
        records = table.to_records() if hasattr(table, "to_records") else list(table)
        return cls(
            bands=tuple(str(b) for b in datamodule.band_names),
            mean=tuple(float(v) for v in _stat(stats, "mean")),
            std=tuple(float(v) for v in _stat(stats, "std")),
            tile_size=int(datamodule.tile_size),
            classes=tuple({k: r[k] for k in ("index", "code", "name", "color") if k in r} for r in records),
        )

    def to_dict(self) -> dict:
        """Plain lists and numbers only, so `torch.load(weights_only=True)` reads it."""
        return {
            "bands": list(self.bands),
            "mean": list(self.mean),
            "std": list(self.std),
            "tile_size": self.tile_size,
            "classes": [dict(c) for c in self.classes],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> BandContract:
        return cls(
            bands=tuple(data["bands"]),
            mean=tuple(data["mean"]),
            std=tuple(data["std"]),
            tile_size=int(data["tile_size"]),
            classes=tuple(dict(c) for c in data["classes"]),
        )

    def check(self, store: BandContract, *, what: str = "checkpoint") -> None:
        """Raise `BandMismatchError` naming the first difference between this contract and the store's."""
        problem = None
        if self.bands != store.bands:
            problem = f"bands {list(self.bands)}, the store has {list(store.bands)}"
        elif self.tile_size != store.tile_size:
            problem = f"tile size {self.tile_size}, the store has {store.tile_size}"
        elif [(c["code"], c["name"]) for c in self.classes] != [(c["code"], c["name"]) for c in store.classes]:
            problem = (
                f"classes {[c['code'] for c in self.classes]}, the store has {[c['code'] for c in store.classes]}"
            )
        elif not (np.allclose(self.mean, store.mean, rtol=1e-4) and np.allclose(self.std, store.std, rtol=1e-4)):
            problem = "other normalisation statistics (mean/std per band) than the store"
        if problem:
            raise BandMismatchError(f"{what} was trained on {problem}: use a store ingested with the same bands")


def _stat(stats: Any, name: str) -> list[float]:
    value = stats[name] if isinstance(stats, Mapping) else getattr(stats, name)
    return np.asarray(value, dtype=float).ravel().tolist()


def load_checkpoint(path: str | Path) -> dict:
    """Read a single-file checkpoint, or the metadata of a sharded one, as plain data (`weights_only`)."""
    path = Path(path)
    if path.is_dir():
        if not (path / METADATA_FILE).is_file():
            raise InputError(f"{str(path)!r} is a folder but not a sharded checkpoint (no {METADATA_FILE})")
        return torch.load(path / METADATA_FILE, map_location="cpu", weights_only=True)
    if not path.is_file():
        raise InputNotFoundError(f"no checkpoint at {str(path)!r}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # not a torch file, truncated, or pickled objects
        raise InputError(f"cannot read checkpoint {str(path)!r}: {str(err).splitlines()[0]}") from err


def read_contract(path: str | Path) -> BandContract:
    checkpoint = load_checkpoint(path)
    if CONTRACT_KEY not in checkpoint:
        raise InputError(f"checkpoint {str(path)!r} has no band contract: it was not written by eoscale")
    return BandContract.from_dict(checkpoint[CONTRACT_KEY])


def load_finetune_weights(model: nn.Module, path: str | Path, store: BandContract | None) -> None:
    """Start `model` from the weights of an eoscale checkpoint, after checking its band contract."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{str(path)!r} is a sharded checkpoint: run 'eoscale consolidate {path} OUT.ckpt' first")
    checkpoint = load_checkpoint(path)
    if store is not None and CONTRACT_KEY in checkpoint:
        BandContract.from_dict(checkpoint[CONTRACT_KEY]).check(store, what=f"checkpoint {str(path)!r}")
    state = {k.removeprefix("model."): v for k, v in checkpoint.get("state_dict", {}).items()}
    own = model.state_dict()
    misfit = [k for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    if misfit:
        raise InputError(f"checkpoint {str(path)!r} does not fit this model ({misfit[0]!r} differs in shape)")
    model.load_state_dict(state, strict=False)


def consolidate(checkpoint_dir: str | Path, output: str | Path, *, overwrite: bool = False) -> Path:
    """Write the sharded checkpoint `checkpoint_dir` as one Lightning checkpoint file at `output`.

    Model weights become full tensors under `state_dict`; the AdamW state is re-keyed from parameter
    names to parameter positions as `torch.optim` saves it, so a single-device run resumes from the file.
    """
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    checkpoint_dir, output = Path(checkpoint_dir), Path(output)
    if not (checkpoint_dir / METADATA_FILE).is_file() or not any(checkpoint_dir.glob("*.distcp")):
        raise InputNotFoundError(f"no sharded checkpoint at {str(checkpoint_dir)!r} (expected *.distcp and {METADATA_FILE})")
    if output.exists() and not overwrite:
        from eoscale.errors import OutputExistsError

        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    checkpoint = load_checkpoint(checkpoint_dir)
    with tempfile.TemporaryDirectory(dir=output.parent if output.parent.exists() else None) as tmp:
        dcp_to_torch_save(checkpoint_dir, Path(tmp) / "full.pt")
        tensors = torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = tensors.pop("state_dict")
    optimizers = sorted((k for k in tensors if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    checkpoint["optimizer_states"] = [_by_position(tensors[k]) for k in optimizers]
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, output)
    return output


def _by_position(state: dict) -> dict:
    """An optimizer state keyed by parameter name (distributed checkpoint) keyed by position instead."""
    position: dict[str, int] = {}
    groups = []
    for group in state["param_groups"]:
        ids = []
        for name in group["params"]:
            position.setdefault(name, len(position))
            ids.append(position[name])
        groups.append({**group, "params": ids})
    return {"state": {position[k]: v for k, v in state.get("state", {}).items()}, "param_groups": groups}


# -- `eoscale consolidate CKPT_DIR OUT.ckpt` ---------------------------------------------------------------
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a sharded (FSDP) checkpoint folder written by 'eoscale fit'")
    parser.add_argument("output", help="the single checkpoint file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")


def run(args: argparse.Namespace) -> int:
    out = consolidate(args.checkpoint, args.output, overwrite=args.overwrite)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
