"""Consolidating sharded checkpoints: `eoscale consolidate CKPT_DIR OUT.ckpt`.

Under FSDP (`ModelParallelStrategy`) Lightning writes a *sharded* checkpoint: a folder of `.distcp`
files, one per rank, plus `meta.pt` (loops, callbacks, hyperparameters, the band contract). It resumes on
any world size (torch.distributed.checkpoint reshards on load). `consolidate()` turns it into one ordinary
Lightning file that single-device training, `load_from_checkpoint` and prediction read;
ModelParallelStrategy resumes from that file too. The `.distcp` files are read by torch's own loader, which
unpickles: consolidate only folders you trust.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

from eoscale.contract import METADATA_FILE, load_checkpoint
from eoscale.errors import InputNotFoundError, OutputExistsError


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
        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    checkpoint = load_checkpoint(checkpoint_dir)
    with tempfile.TemporaryDirectory(dir=output.parent if output.parent.exists() else None) as tmp:
        dcp_to_torch_save(checkpoint_dir, Path(tmp) / "full.pt")
        tensors = torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = tensors.pop("state_dict")
    optimizers = sorted((k for k in tensors if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    checkpoint["optimizer_states"] = [_by_position(tensors[k]) for k in optimizers]
    output.parent.mkdir(parents=True, exist_ok=True)
    # written under a temporary name and renamed: a killed consolidate leaves no half-written checkpoint
    partial = output.with_name(f".{output.name}.partial")
    try:
        torch.save(checkpoint, partial)
        os.replace(partial, output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
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
