"""`TemporalSegmentationTask`: land-cover segmentation from a season, stacks of dates (B, T, C, H, W) in a batch.

    eoscale fit --config configs/temporal_utae.yaml --data.init_args.store runs/season/tiles.zarr

Everything of `SegmentationTask` (loss, metrics per split, optimizer and schedule, checkpoints with their band
contract and model arguments, every strategy of `fit`), with a temporal network of `eoscale.models.temporal`
("utae": a per-date timm backbone and L-TAE attention over the dates; "temporal_vit": Prithvi-EO-2.0's encoder)
that takes each batch's dates and the mask of valid ones (`TileDataModule`'s "dates" and "date_valid": dates
without observations, or dropped by `date_dropout`, take no part). The band contract records the store's dates a
tile (`BandContract.time_steps`): a single-date checkpoint refuses a stack and the reverse, and a temporal one
refuses more dates than it was trained on (`BandContract.check_dates`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.models.temporal import ARCHITECTURES
from eoscale.sensors.groups import as_record
from eoscale.train.tasks.segmentation import SegmentationTask


class TemporalSegmentationTask(SegmentationTask):
    """Segmentation of stacks of dates; the options of `SegmentationTask`, and:

    Args:
        architecture: "utae" (the per-date encoder is `backbone`, a timm name) or "temporal_vit"; their options
            (`n_head`, `d_model`, `d_k` of L-TAE; `embed_dim`, `depth`, `num_heads`, `patch_size`, `tubelet`,
            `coords_encoding`, `out_indices` of the ViT) in `backbone_kwargs`; U-TAE's `date_encoding` there is
            "day_of_year" (L-TAE's positions: each date's day of the year, whatever else the tile holds); its
            `presence_channels` (off unless asked) adds one input channel a sensor of the store, where it has data.
        weights: for "temporal_vit", a local Prithvi-EO-2.0 state dict, loaded with its temporal weights as they
            are (`eoscale.models.temporal_vit.load_prithvi_state`); the store's bands must be the file's, in order.
        time_steps: the dates a tile, taken from the datamodule when left out.
    """

    def __init__(self, architecture: str = "utae", *, backbone: str = "resnet18", time_steps: int | None = None,
                 **options: Any) -> None:
        if architecture not in ARCHITECTURES:
            raise InputError(f"architecture={architecture!r} is not a temporal model: choose one of {', '.join(ARCHITECTURES)}")
        if options.get("finetune", "full") == "lora":
            raise InputError("finetune='lora' is not offered for temporal models yet: use 'full' or 'linear'")
        if architecture == "utae":  # recorded in the checkpoint's model args: older ones are read as "first_valid"
            # and without the pixel mask (`eoscale.models.temporal.UTAE`), as they were fitted
            options["backbone_kwargs"] = {"date_encoding": "day_of_year", "pixel_mask": True,
                                          **(options.get("backbone_kwargs") or {})}
        super().__init__(backbone, **options)
        self.save_hyperparameters()

    def read_datamodule(self, datamodule: Any) -> None:
        super().read_datamodule(datamodule)
        self.hparams.time_steps = int(getattr(datamodule, "time_steps", 1) or 1)
        if (self.hparams.get("backbone_kwargs") or {}).get("presence_channels"):
            # U-TAE's presence channels (one a sensor) need the input's groups, kept in the checkpoint's model args
            self.hparams.sensors = as_record(datamodule.sensor_groups)

    def configure_models(self) -> nn.Module:
        h = self.hparams
        for name in ("in_chans", "num_classes"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        self.class_names = [c["name"] for c in self.contract.classes] if self.contract is not None else \
            [str(i) for i in range(h.num_classes)]
        return build_model(h.backbone, architecture=h.architecture, in_chans=h.in_chans, num_classes=h.num_classes,
                           img_size=h.img_size, decoder_channels=h.decoder_channels, weights=h.weights,
                           drop_path_rate=h.drop_path_rate, dropout=h.dropout, fusion=h.get("fusion"),
                           sensors=h.get("sensors"), fusion_width=h.get("fusion_width") or 32,
                           **(h.get("backbone_kwargs") or {}))

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch["image"], dates=batch.get("dates"), date_valid=batch.get("date_valid"))
