"""A checkpoint as a model ready to predict: weights, band contract, class table, optional LoRA adapter.

The checkpoint alone rebuilds the network: `eoscale fit` keeps the model's shape (backbone, band and
class counts, tile size, fine-tuning mode) in Lightning's `hyper_parameters` and the band contract under
`checkpoint["eoscale"]` (`eoscale.train.checkpoint`). The network is built by the training task's own
`configure_models` and `configure_finetune`, so predict builds exactly what training trained; LoRA layers
(of a checkpoint trained with `finetune: lora`, or of an `--adapter`) are merged into the weights, so
inference runs the plain network.

`--adapter NAME` loads `adapters/NAME/` (written by a LoRA fit, `eoscale.models.lora.save_adapter`) from
the checkpoint's folder or the nearest folder above it that has one (a fit writes adapters into its root
folder, three levels above `<experiment>/<run>/checkpoints/`). The adapter brings its head and the band
contract of the store it was trained on, which then rules prediction (bands, normalisation, classes).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from eoscale.bands import normalise_band_name
from eoscale.classes import ClassTable
from eoscale.errors import BandMismatchError, InputError, InputNotFoundError
from eoscale.ingest.sources import Scene, select_scene_bands
from eoscale.train.checkpoint import CONTRACT_KEY, BandContract, load_checkpoint

ADAPTER_SEARCH_DEPTH = 3  # <root>/<experiment>/<run>/checkpoints/last.ckpt: adapters are in <root>/adapters


@dataclass
class PredictionModel:
    """An eval-mode network on its device, and what it expects of its input."""

    network: nn.Module
    contract: BandContract
    classes: ClassTable
    checkpoint: Path
    backbone: str
    adapter: str | None = None
    task: object | None = None  # the training task the network was built by (its metrics, for evaluation)

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def scene_bands(self, scene: Scene) -> Scene:
        """`scene` with the contract's bands in the contract's order; a missing band is a BandMismatchError."""
        have = set(scene.band_names)
        missing = [b for b in self.contract.bands if normalise_band_name(b) not in have]
        if missing:
            where = scene.paths[0] if len(scene.paths) == 1 else str(Path(scene.paths[0]).parent)
            raise BandMismatchError(
                f"scene {scene.id!r} ({where}) has no band {', '.join(missing)}: the model needs "
                f"{', '.join(self.contract.bands)} and the scene has {', '.join(scene.band_names)}"
            )
        return select_scene_bands(scene, list(self.contract.bands))


def load_model(
    checkpoint: str | Path, *, adapter: str | None = None, device: torch.device | str = "cpu"
) -> PredictionModel:
    """The network of an eoscale checkpoint file, in eval mode on `device`, with adapter `adapter` if given."""
    path = Path(checkpoint)
    if path.is_dir():
        raise InputError(f"{str(path)!r} is a sharded checkpoint: run 'eoscale consolidate {path} OUT.ckpt' first")
    saved = load_checkpoint(path)
    if CONTRACT_KEY not in saved:
        raise InputError(f"checkpoint {str(path)!r} has no band contract: it was not written by 'eoscale fit'")
    contract = BandContract.from_dict(saved[CONTRACT_KEY])
    hparams = dict(saved.get("hyper_parameters") or {})
    if "backbone" not in hparams or "state_dict" not in saved:
        raise InputError(f"checkpoint {str(path)!r} holds no segmentation model (no backbone or weights)")
    meta, root = (None, None) if adapter is None else _adapter_meta(path, adapter)
    if meta is not None and meta.get("model", {}).get("num_classes"):
        hparams["num_classes"] = meta["model"]["num_classes"]  # the adapter's head decides the classes
    task = _task(hparams, path)
    network = task.configure_models()
    if hasattr(task, "configure_finetune"):  # a LoRA fit's weights live in injected LoRA layers
        network = task.configure_finetune(network)
    _load_weights(network, saved["state_dict"], path, hparams["backbone"], head=meta is None)
    if meta is not None:
        from eoscale.models.lora import load_adapter

        load_adapter(network, root, adapter)
        if meta.get("contract"):
            contract = BandContract.from_dict(meta["contract"])
    if meta is not None or hparams.get("finetune") == "lora":
        from eoscale.models.lora import merge_adapter

        merge_adapter(network)  # folded into the weights: inference runs the plain network
    network.eval().requires_grad_(False)
    classes = ClassTable.from_records(list(contract.classes))
    return PredictionModel(network.to(device), contract, classes, path, hparams["backbone"], adapter, task)


def _task(hparams: dict, path: Path):
    from eoscale.train.task import SegmentationTask

    accepted = set(inspect.signature(SegmentationTask.__init__).parameters) - {"self"}
    # the weights are the checkpoint's: no backbone file or fine-tuning source to read (they may be gone)
    options = {k: v for k, v in hparams.items() if k in accepted} | {"weights": None, "finetune_from": None}
    for name in ("in_chans", "num_classes"):
        if options.get(name) is None:
            raise InputError(f"checkpoint {str(path)!r} does not say its model's {name}: it was not written by 'eoscale fit'")
    return SegmentationTask(**options)


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


def _adapter_meta(checkpoint: Path, name: str) -> tuple[dict, Path]:
    """The adapter's description and the folder that holds its `adapters/` folder."""
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

