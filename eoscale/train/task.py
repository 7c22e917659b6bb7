"""The Lightning task that trains a segmentation model on a tile store.

`BaseTask` is small and made of hooks, like TorchGeo's: `configure_models` builds the network,
`configure_losses` the criterion, `configure_metrics` the torchmetrics collections (cloned per split with
`val_` / `test_` prefixes). `SegmentationTask` fills them in for per-pixel land-cover classes.

What comes from the data (band count, class count, tile size, and the band contract written into every
checkpoint) is read from the datamodule in `configure_model`, which runs on every rank after the
datamodule's `setup`; it is then kept in the hyperparameters so `load_from_checkpoint` rebuilds the model.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from lightning import LightningModule
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassConfusionMatrix

from eoscale import __version__
from eoscale.classes import IGNORE_INDEX
from eoscale.contract import CONTRACT_KEY, LINEAGE_KEY, MODEL_KEY, BandContract, model_args_from_hparams
from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.models.checkpoint import load_finetune_weights
from eoscale.models.foundation import FoundationWeights
from eoscale.models.lora import ADAPTERS_DIR, Finetune, LoraSettings, apply_finetune, save_adapter
from eoscale.models.metrics import segmentation_metrics
from eoscale.train.monitor import run_lineage, store_lineage

Loss = Literal["ce", "ce+dice"]
SPLITS = ("val", "test")


class BaseTask(LightningModule):
    """A LightningModule whose parts come from three hooks; subclasses fill them in."""

    def __init__(self) -> None:
        super().__init__()
        self.model: nn.Module | None = None
        self.contract: BandContract | None = None
        self._store_lineage: dict | None = None

    def configure_models(self) -> nn.Module:
        raise NotImplementedError

    def configure_losses(self) -> nn.Module:
        raise NotImplementedError

    def configure_metrics(self) -> MetricCollection:
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        """The network of this rank: band contract and datamodule facts read, built from the same seed on
        every rank, starting weights and fine-tune mode applied, and sharded under FSDP2."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None:
            self.contract = BandContract.from_datamodule(datamodule)
            self.read_datamodule(datamodule)
            self._store_lineage = store_lineage(datamodule)
        # same seed on every rank before building: FSDP2's fully_shard keeps each rank's own slice of its own
        # initial weights (it does not broadcast), so ranks seeded differently would train a chimera;
        # under srun/torchrun each process draws its own seed if seed_everything is left to chance.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.hparams.get("init_seed", 0))
            model = self.configure_models()
        if self.hparams.get("finetune_from"):
            load_finetune_weights(model, self.hparams.finetune_from, self.contract)
        model = self.configure_finetune(model)
        mesh = self._device_mesh
        if mesh is not None:  # ModelParallelStrategy: shard before the optimizer exists (it is made later)
            from eoscale.train.fsdp import shard_model

            model = shard_model(model, mesh, strategy=self.trainer.strategy, precision=self.trainer.precision)
        return model

    def configure_model(self) -> None:
        """Build the network once per rank (Lightning calls this again for `test` after `fit`)."""
        if self.model is not None:
            return
        self.model = self.build_model()
        self.criterion = self.configure_losses()
        metrics = self.configure_metrics()
        self.metrics = nn.ModuleDict({split: metrics.clone(prefix=f"{split}_") for split in SPLITS})
        self.confusion = nn.ModuleDict(
            {split: MulticlassConfusionMatrix(self.num_classes, ignore_index=IGNORE_INDEX) for split in SPLITS}
        )
        self.last_confusion: dict[str, Tensor] = {}
        mesh = self._device_mesh
        if mesh is not None and mesh.ndim > 1 and mesh["tensor_parallel"].size() > 1:
            # the ranks of a tensor-parallel group score the same batch: the metrics sum over the data-parallel
            # ranks only (over all of them, every count was the group's size times too many)
            group = mesh["data_parallel"].get_group()
            for metric in [m for c in self.metrics.values() for m in c.values()] + list(self.confusion.values()):
                metric.process_group = group

    def configure_finetune(self, model: nn.Module) -> nn.Module:
        """Choose what trains (and add adapters) once the starting weights are in; default: everything."""
        return model

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        # tensor parallelism leaves gradients on two device meshes, which torch's clip_grad_norm_ cannot mix
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and getattr(
                self._trainer and self._trainer.strategy, "tensor_parallel", False):
            from eoscale.train.tp import clip_grad_norm

            clip_grad_norm(self.parameters(), gradient_clip_val)
            return
        # pipeline stages each hold some of the parameters: the norm is of all stages' gradients together
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and getattr(
                self._trainer and self._trainer.strategy, "pipe", None) is not None:
            from eoscale.train.pipeline import clip_grad_norm as clip_stages

            clip_stages(self.parameters(), gradient_clip_val, device=self.device)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def read_datamodule(self, datamodule: Any) -> None:
        """Take what the model's shape depends on from the datamodule (subclasses extend)."""

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.contract is not None:
            checkpoint[CONTRACT_KEY] = self.contract.to_dict()
        # where this model comes from (the MLflow run, the tile store and its scenes), for `eoscale lineage`;
        # plain data, like the contract
        run = run_lineage(self._trainer) if self._trainer is not None else None
        checkpoint[LINEAGE_KEY] = {"run": run, "store": getattr(self, "_store_lineage", None),
                                   "eoscale_version": __version__}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # resuming: the store must be the one the checkpoint was trained on (same bands, statistics, tiles)
        saved = checkpoint.get(CONTRACT_KEY)
        if saved is not None and self.contract is not None:
            BandContract.from_dict(saved).check(self.contract, what="checkpoint")


class SegmentationTask(BaseTask):
    """Semantic segmentation of tiles into land-cover classes.

    Args:
        backbone: a timm model name (`resnet18`, `vit_small_patch16_224`, ...).
        backbone_kwargs: more options for `timm.create_model` (`patch_size`, `depth`, `out_indices`, ...).
        decoder_channels: width of the FPN decoder.
        loss: `ce` (cross-entropy, ignoring label 255) or `ce+dice` (plus a soft multiclass Dice term).
        class_weights: weight cross-entropy by the inverse class frequency of the store's training split.
        lr, weight_decay: AdamW's.
        warmup_steps: optimizer steps of linear warm-up from 0, followed by cosine decay to `min_lr_ratio * lr`
            at the last step (`trainer.max_steps`, or the estimated steps of `max_epochs`).
        drop_path_rate, dropout: regularisation of the backbone and the decoder.
        weights: a local state-dict file for the backbone (nothing downloads); a ViT's patch embedding is
            mapped onto the store's bands by name (`eoscale.models.foundation`).
        weights_bands: the band names of `weights`' input channels, or a preset (`ssl4eo-s12`, `prithvi-eo-1.0-100m`, `prithvi-eo-2.0-300m`, `prithvi-eo-2.0-600m`);
            not needed for eoscale's own backbone exports, which carry them.
        finetune_from: an eoscale checkpoint whose model weights start this run; its band contract must
            match the store.
        finetune: `full` trains everything, `linear` the head on a frozen backbone, `lora` adapters on the
            frozen backbone's attention (`eoscale.models.lora`) and the head; a LoRA fit writes its adapter
            to `<default_root_dir>/adapters/<lora.name>/` at the end.
        lora: LoRA's options: `r`, `alpha`, `dropout`, `targets` (qkv, proj, fc1, fc2), `name`.
        init_seed: seed of the initial weights, the same on every rank.
        in_chans, num_classes, img_size: taken from the datamodule when left out.
    """

    def __init__(
        self,
        backbone: str = "resnet18",
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        decoder_channels: int = 128,
        loss: Loss = "ce",
        dice_weight: float = 1.0,
        class_weights: bool = False,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        drop_path_rate: float = 0.0,
        dropout: float = 0.0,
        weights: str | None = None,
        weights_bands: list[str] | str | None = None,
        finetune_from: str | None = None,
        finetune: Finetune = "full",
        lora: dict[str, Any] | None = None,
        init_seed: int = 0,
        in_chans: int | None = None,
        num_classes: int | None = None,
        img_size: int | None = None,
    ) -> None:
        super().__init__()
        if loss not in ("ce", "ce+dice"):
            raise InputError(f"loss={loss!r} is not one of 'ce', 'ce+dice'")
        if finetune not in get_args(Finetune):
            raise InputError(f"finetune={finetune!r} is not one of {', '.join(map(repr, get_args(Finetune)))}")
        if finetune == "lora":
            LoraSettings.from_dict(lora)  # bad LoRA options fail here, before any data is read
        self.save_hyperparameters()
        self.class_names: list[str] = []
        self._class_weights: Tensor | None = None

    @property
    def num_classes(self) -> int:
        return int(self.hparams.num_classes)

    def read_datamodule(self, datamodule: Any) -> None:
        if not getattr(datamodule, "labelled", True):
            raise InputError(
                f"tile store {datamodule.store!r} has no labels (ingested without --labels): fit, validate and test "
                "need a labelled store; pretrain on this one with 'eoscale pretrain', or ingest again with --labels"
            )
        # kept in hparams so the checkpoint alone rebuilds the model (load_from_checkpoint, predict)
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.num_classes = int(datamodule.num_classes)
        self.hparams.img_size = int(datamodule.tile_size)
        if self.hparams.class_weights:
            self._class_weights = torch.as_tensor(datamodule.class_weights(), dtype=torch.float32)

    def configure_models(self) -> nn.Module:
        h = self.hparams
        for name in ("in_chans", "num_classes"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        if self.contract is not None:
            self.class_names = [c["name"] for c in self.contract.classes]
        else:
            self.class_names = [str(i) for i in range(h.num_classes)]
        transform = None
        if h.weights and self.contract is not None:
            transform = FoundationWeights(h.weights, bands=self.contract.bands, source=h.get("weights_bands"))
        return build_model(
            h.backbone,
            in_chans=h.in_chans,
            num_classes=h.num_classes,
            img_size=h.img_size,
            decoder_channels=h.decoder_channels,
            weights=h.weights,
            weights_transform=transform,
            drop_path_rate=h.drop_path_rate,
            dropout=h.dropout,
            **(h.get("backbone_kwargs") or {}),
        )

    def configure_finetune(self, model: nn.Module) -> nn.Module:
        return apply_finetune(model, self.hparams.get("finetune", "full"), self.hparams.get("lora"))

    def on_fit_end(self) -> None:
        if self.hparams.get("finetune") == "lora":  # every rank: gathering FSDP shards is a collective
            name = LoraSettings.from_dict(self.hparams.get("lora")).name
            folder = os.path.join(self.trainer.default_root_dir, ADAPTERS_DIR, name)
            model_args = {k: self.hparams.get(k) for k in ("backbone", "backbone_kwargs", "in_chans", "num_classes",
                                                           "img_size", "decoder_channels", "weights")}
            save_adapter(self.model, folder, name=name, contract=self.contract, model_args=model_args,
                         write=self.trainer.is_global_zero)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        # the network's constructor arguments: inference rebuilds it with build_model(**args), no task needed
        h = self.hparams
        checkpoint[MODEL_KEY] = {"args": model_args_from_hparams(h), "finetune": h.get("finetune", "full"),
                                 "lora": h.get("lora")}

    def configure_losses(self) -> nn.Module:
        dice = self.hparams.dice_weight if "dice" in self.hparams.loss else 0.0
        return SegmentationLoss(self._class_weights, dice_weight=dice)

    def configure_metrics(self) -> MetricCollection:
        return segmentation_metrics(self.num_classes)

    # -- steps ---------------------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch["image"])
        loss = self.criterion(logits, batch["label"])
        size = batch["image"].shape[0]
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, sync_dist=True, batch_size=size)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False, batch_size=size)
        return loss

    def _eval_step(self, split: str, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        logits = self(batch["image"])
        loss = self.criterion(logits, batch["label"])
        self.log(f"{split}_loss", loss, on_epoch=True, sync_dist=True, batch_size=batch["image"].shape[0])
        preds = logits.argmax(dim=1)
        self.metrics[split].update(preds, batch["label"])
        self.confusion[split].update(preds, batch["label"])
        # returned on every rank so callbacks draw panels without running the (possibly sharded) model alone
        return {"pred": preds}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._eval_step("test", batch, batch_idx)

    def _log_epoch(self, split: str) -> None:
        # compute() all-reduces the metric states over ranks (every rank must call it), so the values
        # are global; logging them again with sync_dist would average already-synced numbers.
        values = self.metrics[split].compute()
        per_class = values.pop(f"{split}_iou")
        scalars = {k: v.float() for k, v in values.items()}
        for name, value in zip(self.class_names, per_class, strict=True):
            scalars[f"{split}_iou/{_metric_name(name)}"] = value.float()
        self.log_dict(scalars, sync_dist=False, rank_zero_only=False)
        self.last_confusion[split] = self.confusion[split].compute().cpu()
        self.metrics[split].reset()
        self.confusion[split].reset()

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    # -- optimisation --------------------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        # Lightning calls this after configure_model, so under FSDP the optimizer holds the sharded
        # DTensor parameters; an optimizer made before sharding would update tensors no longer used.
        h = self.hparams
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if p.requires_grad:
                # a ZeRO-3 parameter is an empty placeholder between uses: its own shape is `ds_shape`
                ndim = len(getattr(p, "ds_shape", p.shape))
                (no_decay if ndim <= 1 or name.endswith(".bias") else decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": h.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=h.lr,
        )
        total = self._total_steps()
        schedule = warmup_cosine(h.warmup_steps, total, h.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _total_steps(self) -> int:
        if self.trainer.max_steps and self.trainer.max_steps > 0:
            return int(self.trainer.max_steps)
        steps = self.trainer.estimated_stepping_batches
        if not math.isfinite(steps):
            raise InputError("the number of training steps is unknown: set trainer.max_steps")
        return int(steps)


def _metric_name(class_name: str) -> str:
    """A class name as MLflow accepts it in a metric key (letters, digits, `_ - . / ` and spaces)."""
    return re.sub(r"[^A-Za-z0-9_./ -]+", "_", class_name)


def warmup_cosine(warmup_steps: int, total_steps: int, min_ratio: float = 0.0):
    """The LR factor at step `s`: linear from 0 to 1 over `warmup_steps`, then cosine down to `min_ratio`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(warmup_steps, 1)
        progress = min(1.0, (step - warmup_steps) / max(total_steps - warmup_steps, 1))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class SegmentationLoss(nn.Module):
    """Cross-entropy ignoring `IGNORE_INDEX`, plus `dice_weight` × soft multiclass Dice over valid pixels."""

    def __init__(self, class_weights: Tensor | None = None, *, dice_weight: float = 0.0):
        super().__init__()
        self.register_buffer("class_weights", class_weights, persistent=False)
        self.dice_weight = dice_weight

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        weight = None if self.class_weights is None else self.class_weights.to(logits.dtype)
        loss = F.cross_entropy(logits, target, weight=weight, ignore_index=IGNORE_INDEX)
        if self.dice_weight:
            loss = loss + self.dice_weight * dice_loss(logits, target)
        return loss


def dice_loss(logits: Tensor, target: Tensor, eps: float = 1.0) -> Tensor:
    """1 − mean over classes of the soft Dice coefficient, on pixels whose label is not ignored."""
    valid = (target != IGNORE_INDEX).unsqueeze(1)
    probs = logits.float().softmax(dim=1) * valid
    onehot = F.one_hot(target.masked_fill(~valid.squeeze(1), 0), logits.shape[1]).permute(0, 3, 1, 2) * valid
    dims = (0, 2, 3)
    intersection = (probs * onehot).sum(dims)
    cardinality = probs.sum(dims) + onehot.sum(dims)
    return 1 - ((2 * intersection + eps) / (cardinality + eps)).mean()
