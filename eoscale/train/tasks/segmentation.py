"""`SegmentationTask`: semantic segmentation of tiles into land-cover classes, on `BaseTask`'s hooks.

The network is a timm backbone with an FPN decoder (`eoscale.models.build_model`); the loss cross-entropy
(optionally plus soft Dice); the metrics torchmetrics' per split (`val_`, `test_`), summed over the data-parallel
ranks. Fine-tuning modes (full, linear, LoRA) and foundation weights mapped onto the store's bands come in here.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassConfusionMatrix

from eoscale.classes import IGNORE_INDEX
from eoscale.contract import MODEL_KEY, model_args_from_hparams
from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.models.foundation import FoundationWeights
from eoscale.models.fusion import Fusion
from eoscale.models.lora import ADAPTERS_DIR, Finetune, LoraSettings, apply_finetune, save_adapter
from eoscale.models.metrics import segmentation_metrics
from eoscale.sensors.groups import as_record
from eoscale.train.tasks.base import BaseTask

Loss = Literal["ce", "ce+dice"]
ClassWeights = Literal["inverse", "sqrt"]
SPLITS = ("val", "test")
SQRT_WEIGHT_CAP = 10.0  # tempered weights: a rare class weighs at most this many times the most frequent one
# a class with at least this share of a split's pixels that is never predicted right is named in a warning
MISSED_CLASS_SHARE = 0.001
BEST_VALIDATION_KEY = "eoscale_best_validation"  # the checkpoint's copy of the best val confusion (a resumed fit's)


class SegmentationTask(BaseTask):
    """Semantic segmentation of tiles into land-cover classes.

    Args:
        backbone: a timm model name (`resnet18`, `vit_small_patch16_224`, ...).
        backbone_kwargs: more options for `timm.create_model` (`patch_size`, `depth`, `out_indices`, ...).
        decoder_channels: width of the FPN decoder.
        loss: `ce` (cross-entropy, ignoring label 255) or `ce+dice` (plus a soft multiclass Dice term).
        class_weights: weight cross-entropy by the class frequencies of the store's training split: `inverse`
            (or `true`) by their inverse, `sqrt` by the inverse square root, capped at `SQRT_WEIGHT_CAP` times the
            most frequent class's (tempered: rare classes found without the inverse's flood of false alarms on
            small, imbalanced sets, issue 38); `false` (the default) none.
        spectral_mlp: hidden width of a per-pixel MLP (1×1 convolutions on the bands) whose logits are added to
            the decoder's, so the network has the spectra-only path a per-pixel forest has (0: none).
        fusion: how the sensors of a store of several enter the network (`eoscale.models.fusion`): `stems` (one
            small convolutional stem a sensor, averaged over the sensors present at each pixel, before the shared
            encoder; any backbone), `tokens` (one patch embedding a sensor, plain ViTs); left out, every band goes
            into one network as it is (early fusion). Sensor dropout is the datamodule's (`sensor_dropout`).
        fusion_width: the stems' output channels (`fusion: stems`; default 32).
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
        in_chans, num_classes, img_size, sensors: taken from the datamodule when left out (`sensors`, the input's
            sensor groups `[{name, bands}]`, only with `fusion`).
    """

    def __init__(
        self,
        backbone: str = "resnet18",
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        decoder_channels: int = 128,
        loss: Loss = "ce",
        dice_weight: float = 1.0,
        class_weights: bool | ClassWeights = False,
        spectral_mlp: int = 0,
        fusion: Fusion | None = None,
        fusion_width: int | None = None,
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
        sensors: list[dict] | None = None,
    ) -> None:
        super().__init__()
        if fusion is not None and fusion not in get_args(Fusion):
            raise InputError(f"fusion={fusion!r} is not one of {', '.join(map(repr, get_args(Fusion)))}")
        if loss not in ("ce", "ce+dice"):
            raise InputError(f"loss={loss!r} is not one of 'ce', 'ce+dice'")
        if class_weights not in (True, False, *get_args(ClassWeights)):
            raise InputError(f"class_weights={class_weights!r} is not one of false, true, 'inverse', 'sqrt'")
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
        if self.hparams.get("fusion"):  # the groups a fusion network gives each its own way in (one store: one group)
            self.hparams.sensors = as_record(datamodule.sensor_groups)
        if self.hparams.class_weights:
            self._class_weights = class_weights(datamodule.class_weights(), self.hparams.class_weights)

    def configure_model(self) -> None:
        """The network (`BaseTask`), then the criterion and the metrics of each split."""
        if self.model is not None:
            return
        super().configure_model()
        self.criterion = self.configure_losses()
        metrics = self.configure_metrics()
        self.metrics = nn.ModuleDict({split: metrics.clone(prefix=f"{split}_") for split in SPLITS})
        self.confusion = nn.ModuleDict(
            {split: MulticlassConfusionMatrix(self.num_classes, ignore_index=IGNORE_INDEX) for split in SPLITS}
        )
        self.last_confusion: dict[str, Tensor] = {}
        group = self.parallelism.data_parallel().group
        if group is not None:
            # the ranks of a tensor-parallel group score the same batch: the metrics sum over the data-parallel
            # ranks only (over all of them, every count was the group's size times too many)
            for metric in [m for c in self.metrics.values() for m in c.values()] + list(self.confusion.values()):
                metric.process_group = group

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
            task=h.get("task") or "segmentation",  # "change": `ChangeTask`
            img_size=h.img_size,
            decoder_channels=h.decoder_channels,
            weights=h.weights,
            weights_transform=transform,
            drop_path_rate=h.drop_path_rate,
            dropout=h.dropout,
            **({"spectral_mlp": h.spectral_mlp} if h.get("spectral_mlp") else {}),
            **({"fusion": h.fusion, "sensors": h.get("sensors"),
                **({"fusion_width": h.fusion_width} if h.get("fusion_width") else {})} if h.get("fusion") else {}),
            **(h.get("backbone_kwargs") or {}),
        )

    def configure_finetune(self, model: nn.Module) -> nn.Module:
        return apply_finetune(model, self.hparams.get("finetune", "full"), self.hparams.get("lora"))

    def warn_missed_classes(self, split: str, confusion: Tensor | None = None, *, when: str = "") -> None:
        """Name, on stderr, each class of at least `MISSED_CLASS_SHARE` of `split`'s pixels that an evaluation
        (`confusion`, by default the last one) never predicted right (producer's accuracy 0): a small, imbalanced
        label set's usual failure, which mIoU alone hides (issue 38). `when` says which evaluation."""
        if confusion is None:
            confusion = self.last_confusion.get(split) if hasattr(self, "last_confusion") else None
        if confusion is None or self._trainer is None or not self.trainer.is_global_zero:
            return
        support = confusion.sum(1).double()
        total = float(support.sum())
        for index, name in enumerate(self.class_names):
            share = float(support[index]) / total if total else 0.0
            if share >= MISSED_CLASS_SHARE and int(confusion[index, index]) == 0:
                print(f"warning: class {name!r} ({share:.2%} of the {split} pixels) has producer's accuracy 0{when}: "
                      f"the model never maps it right; try class_weights: sqrt, more labels of it, or the forest "
                      f"(docs/how-to/imbalanced.md)", file=sys.stderr)

    def on_validation_end(self) -> None:
        if self.trainer.state.fn == "validate":  # `eoscale validate`; a fit warns once, at its end
            self.warn_missed_classes("val")

    def _keep_best_validation(self, scalars: dict[str, Tensor] | None) -> None:
        """Keep the val confusion of the best validation by the checkpoint's metric (the one `fit` keeps as
        `epoch…-miou….ckpt` and `predict` takes from a run's folder): strictly better replaces it, as in
        Lightning's ModelCheckpoint. Called where the epoch's metrics are computed, before the callbacks save a
        checkpoint at this validation, which then holds it (a resumed fit still knows it)."""
        trainer, confusion = self._trainer, getattr(self, "last_confusion", {}).get("val")
        if scalars is None or confusion is None or trainer is None or trainer.state.fn != "fit" or trainer.sanity_checking:
            return  # not a class task's fit (a regression's epoch gives no confusion)
        checkpoint = trainer.checkpoint_callback
        monitor, mode = ((checkpoint.monitor, checkpoint.mode) if checkpoint is not None and checkpoint.monitor
                         else self.CHECKPOINT_MONITOR[:2])
        self.last_validation_step = int(trainer.global_step)
        value = scalars.get(monitor)
        if value is None or not torch.isfinite(value):
            return  # another metric than this task's (`--checkpoint.monitor val_loss`): no best to tell
        score, best = float(value), getattr(self, "best_validation", None)
        if best is None or best["monitor"] != monitor or (score > best["score"] if mode == "max" else
                                                          score < best["score"]):
            self.best_validation = {"monitor": monitor, "score": score, "step": self.last_validation_step,
                                    "confusion": confusion.tolist()}

    def on_test_end(self) -> None:
        self.warn_missed_classes("test")

    def _warn_at_fit_end(self) -> None:
        """The missed classes of the last validation and, where it was another one, of the best (issue 38)."""
        best, last = getattr(self, "best_validation", None), getattr(self, "last_validation_step", None)
        if best is None or best["step"] == last:
            self.warn_missed_classes("val", when=" at the last validation, also the best" if best else "")
            return
        self.warn_missed_classes("val", when=f" at the last validation (step {last})")
        self.warn_missed_classes("val", torch.tensor(best["confusion"]),
                                 when=f" at the best validation (step {best['step']}, {best['monitor']} "
                                      f"{best['score']:.4f}: the checkpoint predict takes)")

    def on_fit_end(self) -> None:
        self._warn_at_fit_end()
        if self.hparams.get("finetune") == "lora":  # every rank: gathering FSDP shards is a collective
            name = LoraSettings.from_dict(self.hparams.get("lora")).name
            folder = os.path.join(self.trainer.default_root_dir, ADAPTERS_DIR, name)
            model_args = {k: self.hparams.get(k) for k in ("backbone", "backbone_kwargs", "in_chans", "num_classes",
                                                           "img_size", "decoder_channels", "weights", "task")}
            if self.hparams.get("fusion"):
                model_args.update({k: self.hparams.get(k) for k in ("fusion", "sensors", "fusion_width")})
            save_adapter(self.model, folder, name=name, contract=self.contract, model_args=model_args,
                         write=self.trainer.is_global_zero)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        # the network's constructor arguments: inference rebuilds it with build_model(**args), no task needed
        h = self.hparams
        checkpoint[MODEL_KEY] = {"args": model_args_from_hparams(h), "finetune": h.get("finetune", "full"),
                                 "lora": h.get("lora")}
        if getattr(self, "best_validation", None) is not None:
            checkpoint[BEST_VALIDATION_KEY] = dict(self.best_validation)  # plain data (weights_only loads it)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if checkpoint.get(BEST_VALIDATION_KEY) is not None:  # a resumed fit: the best validation before it
            self.best_validation = dict(checkpoint[BEST_VALIDATION_KEY])

    def configure_losses(self) -> nn.Module:
        dice = self.hparams.dice_weight if "dice" in self.hparams.loss else 0.0
        return SegmentationLoss(self._class_weights, dice_weight=dice)

    def configure_metrics(self) -> MetricCollection:
        return segmentation_metrics(self.num_classes)

    # -- steps ---------------------------------------------------------------------------------------------
    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """The network's output for a batch (a temporal task passes the dates along: `TemporalSegmentationTask`)."""
        return self(batch["image"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self.logits(batch)
        loss = self.criterion(logits, batch["label"])
        self.log_training_loss(loss, batch["image"].shape[0])
        return loss

    def _eval_step(self, split: str, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        logits = self.logits(batch)
        loss = self.criterion(logits, batch["label"])
        self.log(f"{split}_loss", loss, on_epoch=True, sync_dist=True, batch_size=batch["image"].shape[0])
        preds = logits.argmax(dim=1)
        self.metrics[split].update(preds, batch["label"])
        self.confusion[split].update(preds, batch["label"])
        # returned on every rank so callbacks draw panels and fit the temperature (TemperatureScaling) without
        # running the (possibly sharded) model alone
        return {"pred": preds, "logits": logits.detach()}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._eval_step("test", batch, batch_idx)

    def _log_epoch(self, split: str) -> dict[str, Tensor]:
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
        return scalars

    def on_validation_epoch_end(self) -> None:
        self._keep_best_validation(self._log_epoch("val"))

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")


def class_weights(inverse: Tensor, kind: bool | str) -> Tensor:
    """The loss's class weights from the datamodule's inverse-frequency ones (0 for absent classes): those
    (`inverse`, `true`) or their square root capped at `SQRT_WEIGHT_CAP` × the most frequent class's (`sqrt`)."""
    inverse = torch.as_tensor(inverse, dtype=torch.float32)
    if kind in (True, "inverse"):
        return inverse
    present = inverse > 0
    tempered = inverse.sqrt()
    tempered = tempered / tempered[present].min()  # the most frequent class weighs 1
    return torch.where(present, tempered.clamp(max=SQRT_WEIGHT_CAP), torch.zeros_like(tempered))


def _metric_name(class_name: str) -> str:
    """A class name as MLflow accepts it in a metric key (letters, digits, `_ - . / ` and spaces)."""
    return re.sub(r"[^A-Za-z0-9_./ -]+", "_", class_name)


class SegmentationLoss(nn.Module):
    """Cross-entropy ignoring `IGNORE_INDEX`, plus `dice_weight` × soft multiclass Dice over valid pixels."""

    def __init__(self, class_weights: Tensor | None = None, *, dice_weight: float = 0.0):
        super().__init__()
        self.register_buffer("class_weights", class_weights, persistent=False)
        self.dice_weight = dice_weight

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        weight = None if self.class_weights is None else self.class_weights.to(logits.dtype)
        # cross-entropy's mean over the labelled pixels, as a sum over a count clamped away from 0: a batch of sparse
        # labels (a sample's points, `eoscale label --training-raster`) may hold none, and the built-in mean is then
        # 0/0 = NaN (in the logged loss and in val_loss's mean); this is 0, with no host sync to check for it
        total = F.cross_entropy(logits, target, weight=weight, ignore_index=IGNORE_INDEX, reduction="sum")
        valid = target != IGNORE_INDEX
        if weight is None:
            count = valid.sum().to(total.dtype)
        else:
            count = (weight[target.masked_fill(~valid, 0)] * valid).sum().to(total.dtype)
        loss = total / count.clamp(min=torch.finfo(total.dtype).tiny)
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
