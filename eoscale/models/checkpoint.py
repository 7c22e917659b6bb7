"""Checkpoints as networks: start a model from an eoscale checkpoint, rebuild the network it holds, or find the
checkpoint a run's folder should be mapped with (`run_checkpoint`).

They read the model contract (`eoscale.contract`) and the file names `eoscale fit` writes; none knows the training
loop, so inference and the adapter commands rebuild a trained network without importing `eoscale.train`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from eoscale.contract import CONTRACT_KEY, BandContract, checkpoint_lineage, load_checkpoint, model_spec
from eoscale.errors import InputError, InputNotFoundError


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


# `eoscale fit` names its best checkpoint by the metric it was chosen by (`BaseTask.CHECKPOINT_MONITOR`, the
# pretrain command's): `epoch003-step000900-miou0.4123.ckpt`; the higher mIoU, the lower RMSE or loss is the better
BEST_CHECKPOINT = re.compile(r"-(miou|rmse|loss)(-?\d+(?:\.\d+)?(?:e-?\d+)?)(?:-v\d+)?\.ckpt$")
BETTER = {"miou": max, "rmse": min, "loss": min}
METRIC = {"miou": "val_miou", "rmse": "val_rmse", "loss": "val_loss"}


def run_checkpoint(path: str | Path) -> tuple[Path, str | None]:
    """The checkpoint `path` names, and how it was chosen (None: as given).

    A checkpoint file, or a sharded checkpoint's folder (`*.ckpt/`), is taken as given. A run's folder
    (`<root>/<experiment>/<run>`, or a fit's root holding one run) or its `checkpoints/` folder gives its best
    checkpoint by the metric the fit monitored (the `…-miou0.4123.ckpt` that `fit` keeps beside `last.ckpt`: the
    best val mIoU, or the lowest val RMSE or loss), else its `last.ckpt`. A folder without checkpoints is refused.
    """
    path = Path(path)
    if not path.is_dir() or path.suffix == ".ckpt" or (path / ".metadata").is_file():
        return path, None
    folder = _checkpoint_folder(path)
    found = sorted(folder.glob("*.ckpt"))
    best = [(m.group(1), float(m.group(2)), p) for p in found if (m := BEST_CHECKPOINT.search(p.name))]
    if best:
        metric = max(best, key=lambda b: b[2].stat().st_mtime)[0]  # one metric a run; mixed: the newest file's
        ranked = [b for b in best if b[0] == metric]
        score = BETTER[metric](b[1] for b in ranked)
        chosen = max((b[2] for b in ranked if b[1] == score), key=lambda p: p.stat().st_mtime)
        return chosen, f"the best {METRIC[metric]} ({score:g}) of {len(found)} checkpoints in {folder}"
    last = folder / "last.ckpt"
    if last.exists():
        return last, f"last.ckpt: {folder} holds no best checkpoint (…-miou….ckpt) to prefer"
    raise InputNotFoundError(f"no checkpoint in {str(path)!r}: give a checkpoint file, or a run's folder "
                             "(<root>/<experiment>/<run>) or its checkpoints/ folder once 'eoscale fit' has written one")


def _checkpoint_folder(path: Path) -> Path:
    """Where a run's checkpoints are: `path/checkpoints`, `path` itself, or the one run's under a fit's root."""
    if (path / "checkpoints").is_dir():
        return path / "checkpoints"
    if any(path.glob("*.ckpt")):
        return path
    runs = sorted({p.parent for p in path.glob("*/*/checkpoints/*.ckpt")}, key=lambda p: p.stat().st_mtime)
    if len(runs) > 1:
        raise InputError(f"{str(path)!r} holds {len(runs)} runs: give one run's folder, e.g. "
                         f"{str(runs[-1].parent)!r} (the newest)")
    return runs[0] if runs else path


ADAPTER_SEARCH_DEPTH = 3  # <root>/<experiment>/<run>/checkpoints/last.ckpt: adapters are in <root>/adapters


@dataclass
class TrainedNetwork:
    """A checkpoint's network in eval mode (LoRA folded in), and what it was trained on."""

    network: nn.Module
    contract: BandContract
    spec: dict  # the model contract: {"args": build_model's keywords, "finetune", "lora"}
    checkpoint: Path
    adapter: str | None = None
    lineage: dict | None = None  # where the checkpoint comes from (`eoscale.contract.checkpoint_lineage`)


def load_network(checkpoint: str | Path, *, adapter: str | None = None) -> TrainedNetwork:
    """The network of an eoscale checkpoint file in eval mode, with adapter `adapter` merged in if given.

    Built by `build_model(**args)` and `apply_finetune` from the model contract the checkpoint carries, so
    this is exactly the network training trained; LoRA layers (of a `finetune: lora` checkpoint, or of an
    adapter) are folded into the weights, so inference runs the plain network.
    """
    from eoscale.models.factory import build_model
    from eoscale.models.lora import apply_finetune, load_adapter, merge_adapter

    path = Path(checkpoint)
    if path.is_dir():
        raise InputError(f"{str(path)!r} is a sharded checkpoint: run 'eoscale consolidate {path} OUT.ckpt' first")
    saved = load_checkpoint(path)
    if CONTRACT_KEY not in saved:
        raise InputError(f"checkpoint {str(path)!r} has no band contract: it was not written by 'eoscale fit'")
    contract = BandContract.from_dict(saved[CONTRACT_KEY])
    if "state_dict" not in saved:
        raise InputError(f"checkpoint {str(path)!r} holds no segmentation model (no backbone or weights)")
    spec = model_spec(saved, path)
    meta, root = (None, None) if adapter is None else adapter_meta(path, adapter)
    if meta is not None and meta.get("model", {}).get("num_classes"):
        spec["args"]["num_classes"] = meta["model"]["num_classes"]  # the adapter's head decides the classes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the weights are the checkpoint's; a fixed seed keeps the build reproducible
        network = build_model(**spec["args"])
    if spec["finetune"] != "full" or spec["lora"]:  # "full" only marks every weight trainable: nothing to rebuild
        network = apply_finetune(network, spec["finetune"], spec["lora"])  # a LoRA fit's weights live in LoRA layers
    _load_weights(network, saved["state_dict"], path, spec["args"]["backbone"], head=meta is None)
    if meta is not None:
        load_adapter(network, root, adapter)
        if meta.get("contract"):
            contract = BandContract.from_dict(meta["contract"])
    if meta is not None or spec["finetune"] == "lora":
        merge_adapter(network)  # folded into the weights: inference runs the plain network
    network.eval().requires_grad_(False)
    return TrainedNetwork(network, contract, spec, path, adapter, checkpoint_lineage(saved))


def _load_weights(network: nn.Module, state: dict, path: Path, backbone: str, *, head: bool) -> None:
    """The checkpoint's weights, all of them (or, under an adapter that brings its own head, the backbone's)."""
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    if not head:
        weights = {k: v for k, v in weights.items() if k.startswith("backbone.")}
    try:
        network.load_state_dict(weights, strict=head)
    except RuntimeError as err:
        detail = " ".join(str(err).split())[:200]
        raise InputError(f"checkpoint {str(path)!r} does not fit backbone {backbone!r}: {detail}") from None
    if not head:
        own = {k for k in network.state_dict() if k.startswith("backbone.") and "lora_" not in k}
        missing = sorted(own - set(weights))
        if missing:
            raise InputError(f"checkpoint {str(path)!r} does not fit backbone {backbone!r}: it lacks {missing[0]!r}")


def adapter_meta(checkpoint: Path, name: str) -> tuple[dict, Path]:
    """Adapter `name`'s description and the folder that holds its `adapters/` folder: the checkpoint's folder
    or one of the `ADAPTER_SEARCH_DEPTH` folders above it (a fit writes adapters into its root folder)."""
    from eoscale.models.lora import ADAPTERS_DIR, list_adapters, read_adapter_meta

    roots = [checkpoint.resolve().parent, *list(checkpoint.resolve().parents)[1 : ADAPTER_SEARCH_DEPTH + 1]]
    for root in roots:
        if name in list_adapters(root):
            return read_adapter_meta(root, name), root
    found = sorted({a for root in roots for a in list_adapters(root)})
    raise InputNotFoundError(
        f"no adapter {name!r} in {str(roots[0] / ADAPTERS_DIR)!r} or the {ADAPTER_SEARCH_DEPTH} folders above it "
        f"(found: {', '.join(found) or 'none'})"
    )
