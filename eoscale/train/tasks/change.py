"""`ChangeTask`: change classes between two dates of one place, from a store of two dates a tile.

The store holds each tile's two dates (`images(tile, time=2, band, y, x)`, the dates from the products' metadata)
and change labels as its classes (e.g. `eoscale synth --change`'s change_classes.csv: no change, forest loss, new
built-up, cropland expansion, water gain and loss). The network is `eoscale.models.change.ChangeModel`: one encoder
shared by both dates and a fusion that keeps the direction of a change; everything else (loss, class weights,
metrics per split, fine-tuning, LoRA) is `SegmentationTask`'s. The checkpoint's contract says target kind "change" and
two dates, so `predict` stacks each place's two dated scenes and writes a change map (`eoscale.infer.outputs.change`).

    eoscale fit --config configs/change_resnet18.yaml --data.init_args.store pairs.zarr
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import Tensor

from eoscale.errors import InputError
from eoscale.models.change import ChangeModel
from eoscale.train.tasks.segmentation import SegmentationTask

DATES = ChangeModel.dates


class ChangeTask(SegmentationTask):
    """Change classes between two dates (the arguments are `SegmentationTask`'s; the backbone is shared by the dates)."""

    def read_datamodule(self, datamodule: Any) -> None:
        steps = int(getattr(datamodule, "time_steps", 1) or 1)
        if steps != DATES:
            raise InputError(
                f"ChangeTask maps the change between {DATES} dates, and tile store {datamodule.store!r} holds {steps} "
                f"date(s) a tile: ingest each place's two dated scenes into one store (eoscale ingest with both dates)"
            )
        super().read_datamodule(datamodule)
        self.hparams.task = "change"  # the network's constructor argument, in the checkpoint's model contract
        if self.contract is not None:
            self.contract = replace(self.contract, target="change", time_steps=DATES)

    def configure_models(self):
        self.hparams.task = "change"
        return super().configure_models()

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        image = batch["image"]  # (B, 2, C, H, W): both dates stacked on the channel axis, as predict reads them
        return self(image.reshape(image.shape[0], -1, *image.shape[-2:]) if image.dim() == 5 else image)
