"""A checkpoint as a model ready to predict: weights, band contract, class table, optional LoRA adapter.

The checkpoint alone rebuilds the network (`eoscale.models.checkpoint.load_network`): it carries the
network's constructor arguments and fine-tuning mode (the model contract, `eoscale.contract`) and the band
contract of the store it was trained on. LoRA layers (of a checkpoint trained with `finetune: lora`, or of
an `--adapter`) are merged into the weights, so inference runs the plain network.

`--adapter NAME` loads `adapters/NAME/` (written by a LoRA fit, `eoscale.models.lora.save_adapter`) from
the checkpoint's folder or the nearest folder above it that has one (a fit writes adapters into its root
folder, three levels above `<experiment>/<run>/checkpoints/`). The adapter brings its head and the band
contract of the store it was trained on, which then rules prediction (bands, normalisation, classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from eoscale.bands import normalise_band_name
from eoscale.classes import ClassTable
from eoscale.contract import BandContract
from eoscale.errors import BandMismatchError
from eoscale.models.checkpoint import load_network
from eoscale.raster.sources import Scene, map_scene_bands, select_scene_bands
from eoscale.sensors import get_sensor


@dataclass
class PredictionModel:
    """An eval-mode network on its device, and what it expects of its input."""

    network: nn.Module
    contract: BandContract
    classes: ClassTable | None  # None: a model of another target kind without classes
    checkpoint: Path
    backbone: str
    adapter: str | None = None
    spec: dict | None = None  # the model contract the network was built from (`eoscale.contract.model_spec`)
    lineage: dict | None = None  # the checkpoint's training run and tile store (`eoscale.contract.checkpoint_lineage`)
    server: dict | None = None  # a served model's origin (`eoscale.infer.remote`): its network runs elsewhere

    @property
    def device(self) -> torch.device:
        if self.server is not None:
            return torch.device("cpu")  # this process only reads and blends
        return next(self.network.parameters()).device

    def scene_bands(self, scene: Scene, band_map: dict[str, str] | None = None) -> Scene:
        """`scene` with the contract's bands in the contract's order, its bands renamed by `band_map` first (`--band-map`);
        another sensor's bands or a missing band is a BandMismatchError."""
        scene = map_scene_bands(scene, band_map or {})
        where = scene.paths[0] if len(scene.paths) == 1 else str(Path(scene.paths[0]).parent)
        if scene.sensor != self.contract.sensor:
            raise BandMismatchError(
                f"scene {scene.id!r} ({where}) holds {get_sensor(scene.sensor).title} bands "
                f"({', '.join(scene.band_names)}) but the model was trained on {get_sensor(self.contract.sensor).title} "
                f"bands ({', '.join(self.contract.bands)}): to apply it anyway, map the bands explicitly with --band-map "
                f"(e.g. SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A)"
            )
        have = set(scene.band_names)
        missing = [b for b in self.contract.bands if normalise_band_name(b) not in have]
        if missing:
            raise BandMismatchError(
                f"scene {scene.id!r} ({where}) has no band {', '.join(missing)}: the model needs "
                f"{', '.join(self.contract.bands)} and the scene has {', '.join(scene.band_names)}"
            )
        return select_scene_bands(scene, list(self.contract.bands))


def load_model(
    checkpoint: str | Path, *, adapter: str | None = None, device: torch.device | str = "cpu"
) -> PredictionModel:
    """The network of an eoscale checkpoint file, in eval mode on `device`, with adapter `adapter` if given."""
    trained = load_network(checkpoint, adapter=adapter)
    # a model of values has no class table (`eoscale.contract.TARGET_KINDS`)
    classes = ClassTable.from_records(list(trained.contract.classes)) if trained.contract.classes else None
    return PredictionModel(trained.network.to(device), trained.contract, classes, trained.checkpoint,
                           trained.spec["args"]["backbone"], adapter, trained.spec, trained.lineage)
