"""Consolidating sharded checkpoints: `eoscale consolidate CKPT_DIR OUT.ckpt`.

Under FSDP (`ModelParallelStrategy`) Lightning writes a *sharded* checkpoint: a folder of `.distcp`
files, one per rank, plus `meta.pt` (loops, callbacks, hyperparameters, the band contract). It resumes on
any world size (torch.distributed.checkpoint reshards on load). `consolidate()` turns it into one ordinary
Lightning file that single-device training, `load_from_checkpoint` and prediction read;
ModelParallelStrategy resumes from that file too.

Under DeepSpeed ZeRO (`eoscale.train.strategies.zero`) the folder is DeepSpeed's: `latest` names a tag folder holding
each rank's `*_optim_states.pt` (its partition of the fp32 weights and of the AdamW moments) and the
`*model_states.pt` (Lightning's loops, hyperparameters and the band contract beside DeepSpeed's bookkeeping).
It resumes at the same world size only. `consolidate()` gathers the fp32 weights with DeepSpeed's own
`zero_to_fp32` into a weights-only Lightning file (as `ModelCheckpoint(save_weights_only=True)` writes: no
optimizer state), which prediction, the adapter commands and fine-tuning read.

Both formats' tensor files are read by their library's own loader, which unpickles (torch's for `.distcp`,
DeepSpeed's `torch.load(weights_only=False)` for its optimizer states): consolidate only folders you trust.
The metadata is read as plain data first, so a crafted one is refused before either loader runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
from pathlib import Path

import torch

from eoscale._compat.deepspeed import import_deepspeed
from eoscale.contract import DEEPSPEED_TAG_FILE, METADATA_FILE, deepspeed_model_states, load_checkpoint
from eoscale.errors import InputError, InputNotFoundError, OutputExistsError
from eoscale.paths import Paths


def consolidate(checkpoint_dir: str | Path, output: str | Path, *, overwrite: bool = False) -> Path:
    """Write the sharded checkpoint `checkpoint_dir` as one Lightning checkpoint file at `output`.

    Model weights become full tensors under `state_dict`. From an FSDP folder the AdamW state is re-keyed from
    parameter names to parameter positions as `torch.optim` saves it, so a single-device run resumes from the
    file; from a DeepSpeed folder the file holds the weights only.
    """
    checkpoint_dir, output = Path(checkpoint_dir), Path(output)
    deepspeed = deepspeed_model_states(checkpoint_dir) is not None
    if not deepspeed and (not (checkpoint_dir / METADATA_FILE).is_file() or not any(checkpoint_dir.glob("*.distcp"))):
        raise InputNotFoundError(f"no sharded checkpoint at {str(checkpoint_dir)!r} (expected FSDP's *.distcp and "
                                 f"{METADATA_FILE}, or DeepSpeed's '{DEEPSPEED_TAG_FILE}' file and its folder)")
    if output.exists() and not overwrite:
        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    checkpoint = load_checkpoint(checkpoint_dir)  # plain data: a crafted metadata file stops here
    if deepspeed:
        checkpoint["state_dict"] = _deepspeed_weights(checkpoint_dir)
        # a weights-only file: the moments stay in DeepSpeed's partitions (resume from the folder itself)
        for key in ("optimizer_states", "lr_schedulers", "callbacks"):
            checkpoint.pop(key, None)
    else:
        checkpoint.update(_dcp_tensors(checkpoint_dir, output))
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


def _dcp_tensors(checkpoint_dir: Path, output: Path) -> dict:
    """`state_dict` and `optimizer_states` of a DCP folder, as a single-device Lightning checkpoint holds them."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory(dir=output.parent if output.parent.exists() else None) as tmp:
        dcp_to_torch_save(checkpoint_dir, Path(tmp) / "full.pt")
        tensors = torch.load(Path(tmp) / "full.pt", map_location="cpu", weights_only=True)
    optimizers = sorted((k for k in tensors if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    return {"state_dict": tensors.pop("state_dict"), "optimizer_states": [_by_position(tensors[k]) for k in optimizers]}


def _deepspeed_weights(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """The full fp32 weights (and buffers) of a DeepSpeed ZeRO-1/2/3 checkpoint folder, keyed as the
    LightningModule's `state_dict`, gathered from every rank's partition by DeepSpeed's `zero_to_fp32`."""
    # zero_to_fp32 prints its progress (a line per step, a tqdm bar) and DeepSpeed's import its accelerator:
    # not for an eoscale user
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        import_deepspeed()  # the extra eoscale[deepspeed], or one line saying to install it
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir))
    except (ValueError, FileNotFoundError) as err:  # e.g. a rank's optimizer-state file missing
        raise InputError(f"cannot consolidate DeepSpeed checkpoint {str(checkpoint_dir)!r}: "
                         f"{str(err).splitlines()[0]}") from err
    # Lightning before 2.1 wrapped the module as `_forward_module` (as Lightning's own converter strips it)
    return {k.removeprefix("_forward_module."): v for k, v in state.items()}


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
    parser.add_argument("checkpoint", action=Paths, metavar="CHECKPOINT", help="a sharded (FSDP or DeepSpeed ZeRO) checkpoint folder written by 'eoscale fit'")
    parser.add_argument("output", help="the single checkpoint file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")


def run(args: argparse.Namespace) -> int:
    out = consolidate(args.checkpoint, args.output, overwrite=args.overwrite)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
