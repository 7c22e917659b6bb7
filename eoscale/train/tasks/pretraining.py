"""`PretrainTask`: what the self-supervised tasks (MAE, DINO) share on top of `BaseTask`.

A plain timm ViT encoder built at the store's band count and tile size, on a store read without labels; AdamW
with MAE's betas and no weight decay on biases, tokens and position embeddings; no metrics; and, at the end of
fit, the encoder written as `backbone.safetensors` beside the checkpoints, carrying its band contract in the
safetensors metadata (`eoscale.models.foundation`), so `weights: …/backbone.safetensors` fine-tunes it on any
store with some of its bands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eoscale.errors import InputError
from eoscale.models.backbone import VitBackbone, create_backbone
from eoscale.models.foundation import save_backbone
from eoscale.train.tasks.base import BaseTask

EXPORT_NAME = "backbone.safetensors"


class PretrainTask(BaseTask):
    """A self-supervised task on a ViT encoder; subclasses build the network around `vit_backbone()`.

    The model they build keeps the student's encoder as `model.backbone` (a `VitBackbone`): the export reads it.
    """

    METHOD = "self-supervised"  # the method's name in messages (MAE, DINO)
    NO_DECAY_SUFFIXES = ("bias", "token", "pos_embed")
    BETAS = (0.9, 0.95)
    # a fixed schedule, as MAE's and DINO's recipes: the reconstruction or distillation loss keeps falling slowly
    # long after the features stop changing much, and it is not what the encoder is for
    EARLY_STOPPING = False

    def read_datamodule(self, datamodule: Any) -> None:
        if getattr(datamodule, "labels", False):
            raise InputError(f"{self.METHOD} pretraining reads images only: set data.init_args.labels: false")
        steps = int(getattr(datamodule, "time_steps", 1) or 1)
        if steps > 1:  # a stack (B, T, C, H, W) is no image for a 2-D patch embedding
            raise InputError(f"tile store {str(datamodule.store)!r} holds {steps} dates a tile: {self.METHOD} pretraining "
                             "takes one date; use configs/temporal_mae_pretrain.yaml, or pick a date with "
                             "data.init_args.date_step")
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.img_size = int(datamodule.tile_size)

    def vit_backbone(self) -> VitBackbone:
        """The encoder, from the hyperparameters (`backbone`, `backbone_kwargs`, `in_chans`, `img_size`, ...)."""
        h = self.hparams
        for name in ("in_chans", "img_size"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        backbone = create_backbone(h.backbone, in_chans=h.in_chans, img_size=h.img_size,
                                   drop_path_rate=h.drop_path_rate, **(h.get("backbone_kwargs") or {}))
        if not isinstance(backbone, VitBackbone):
            raise InputError(f"{self.METHOD} pretraining needs a plain ViT backbone, not {h.backbone!r} "
                             "(e.g. vit_small_patch16_224)")
        return backbone

    def on_fit_end(self) -> None:
        if self.hparams.get("export", True):
            export_backbone(self, self.export_path())

    def export_path(self) -> Path:
        """`backbone.safetensors` in the checkpoint folder (the run folder without a checkpoint callback)."""
        callback = self.trainer.checkpoint_callback
        folder = getattr(callback, "dirpath", None) or self.trainer.default_root_dir
        return Path(folder) / EXPORT_NAME


def export_backbone(task: PretrainTask, path: str | Path) -> Path:
    """Write the task's encoder as a timm-keyed safetensors file with its band contract in the metadata.

    Every rank calls this (gathering FSDP2 shards or pipeline stages is a collective); rank 0 writes.
    """
    state = task.parallelism.full_state(task.model.backbone.net)
    if not task.trainer.is_global_zero:
        return Path(path)
    h = task.hparams
    metadata = {
        "model": h.backbone,
        "model_kwargs": dict(h.get("backbone_kwargs") or {}),
        "patch_size": int(task.model.backbone.net.patch_embed.patch_size[0]),  # MAE's and DINO's models alike
        **export_fields(task),
        # an encoder of several sensors (one patch embedding a sensor: `eoscale.models.fusion`), and its sensors
        **({"fusion": h.fusion, "sensors": list(h.sensors)} if h.get("fusion") else {}),
    }
    return save_backbone(state, path, metadata=metadata)


def export_fields(task: PretrainTask) -> dict[str, Any]:
    """The metadata every exported backbone carries after its model's own: input size and bands, the band
    contract's normalisation, and the steps it was pretrained for (what `weights:` checks and maps by name)."""
    h, contract = task.hparams, task.contract
    return {
        "img_size": int(h.img_size),
        "in_chans": int(h.in_chans),
        "bands": list(contract.bands) if contract else [],
        "mean": list(contract.mean) if contract else [],
        "std": list(contract.std) if contract else [],
        "steps": int(task.trainer.global_step),
    }
