"""`RegressionTask`: per-pixel regression of a continuous variable (tree height, cover fraction), on `BaseTask`.

The network is the segmentation network (a timm backbone with an FPN decoder, `eoscale.models.build_model`) with
one output channel. It learns the target normalised by the store's target mean and std (recorded in the band
contract's `target_info`, so `BandContract.activate` gives maps in the target's units); the loss (`mse` or
`huber`) counts only pixels with a target (NaN elsewhere: nodata, no value). Validation and test report RMSE,
MAE, bias (mean of prediction − target) and R² in the target's units, summed over the data-parallel ranks.
The store must hold per-pixel values (`eoscale ingest --targets`) and the datamodule load them
(`TileDataModule(target="values")`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MeanMetric, MeanSquaredError, MetricCollection, R2Score

from eoscale.errors import InputError
from eoscale.train.tasks.segmentation import SPLITS, SegmentationTask

RegressionLoss = Literal["mse", "huber"]


class RegressionTask(SegmentationTask):
    """Per-pixel regression: `SegmentationTask`'s network with one output channel.

    Args:
        loss: `mse` or `huber` (`huber_delta` in normalised units), both over pixels with a target only.
        the others: as `SegmentationTask`'s (backbone, decoder, optimizer, fine-tuning).
    """

    CHECKPOINT_MONITOR = ("val_rmse", "min", "epoch{epoch:03d}-step{step:06d}-rmse{val_rmse:.4f}")

    def __init__(
        self,
        backbone: str = "resnet18",
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        decoder_channels: int = 128,
        loss: RegressionLoss = "mse",
        huber_delta: float = 1.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        drop_path_rate: float = 0.0,
        dropout: float = 0.0,
        weights: str | None = None,
        weights_bands: list[str] | str | None = None,
        finetune_from: str | None = None,
        finetune: str = "full",
        lora: dict[str, Any] | None = None,
        init_seed: int = 0,
        in_chans: int | None = None,
        num_classes: int | None = 1,
        img_size: int | None = None,
    ) -> None:
        if loss not in ("mse", "huber"):
            raise InputError(f"loss={loss!r} is not one of 'mse', 'huber'")
        if num_classes not in (None, 1):
            raise InputError(f"a regression network has one output channel, not num_classes={num_classes}")
        super().__init__(backbone, backbone_kwargs=backbone_kwargs, decoder_channels=decoder_channels, lr=lr,
                         weight_decay=weight_decay, warmup_steps=warmup_steps, min_lr_ratio=min_lr_ratio,
                         drop_path_rate=drop_path_rate, dropout=dropout, weights=weights, weights_bands=weights_bands,
                         finetune_from=finetune_from, finetune=finetune, lora=lora, init_seed=init_seed,
                         in_chans=in_chans, num_classes=1, img_size=img_size)
        self.hparams.loss = loss  # SegmentationTask saved its own default
        self.hparams.huber_delta = huber_delta
        self.target_mean, self.target_std = 0.0, 1.0

    def read_datamodule(self, datamodule: Any) -> None:
        info = getattr(datamodule, "target_info", None)
        if getattr(datamodule, "target", None) != "values" or info is None:
            raise InputError("RegressionTask learns per-pixel values: give it data.init_args.target: values and a "
                             "store ingested with --targets")
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.num_classes = 1
        self.hparams.img_size = int(datamodule.tile_size)
        self.target_mean, self.target_std = float(info["mean"]), max(float(info["std"]), 1e-6)

    def configure_model(self) -> None:
        if self.model is not None:
            return
        super(SegmentationTask, self).configure_model()  # BaseTask's: the network
        if self.contract is not None and self.contract.target_info is not None:
            info = self.contract.target_info
            self.target_mean, self.target_std = float(info["mean"]), max(float(info["std"]), 1e-6)
        self.criterion = self.configure_losses()
        metrics = self.configure_metrics()
        self.metrics = nn.ModuleDict({split: metrics.clone(prefix=f"{split}_") for split in SPLITS})
        group = self.parallelism.data_parallel().group
        if group is not None:
            for metric in [m for c in self.metrics.values() for m in c.values()]:
                metric.process_group = group

    def configure_losses(self) -> nn.Module:
        return MaskedRegressionLoss(self.hparams.loss, delta=self.hparams.get("huber_delta", 1.0))

    def configure_metrics(self) -> MetricCollection:
        return MetricCollection({"rmse": MeanSquaredError(squared=False), "mae": MeanAbsoluteError(),
                                 "bias": MeanMetric(), "r2": R2Score()})

    # -- steps ---------------------------------------------------------------------------------------------
    def _normalised(self, target: Tensor) -> Tensor:
        return (target - self.target_mean) / self.target_std

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        pred = self(batch["image"])[:, 0]
        loss = self.criterion(pred, self._normalised(batch["target"]))
        self.log_training_loss(loss, batch["image"].shape[0])
        return loss

    def _eval_step(self, split: str, batch: dict[str, Tensor], batch_idx: int) -> None:
        # nothing returned: the monitor's panels are class maps (a label beside the prediction)
        pred = self(batch["image"])[:, 0]
        target = batch["target"]
        loss = self.criterion(pred, self._normalised(target))
        self.log(f"{split}_loss", loss, on_epoch=True, sync_dist=True, batch_size=batch["image"].shape[0])
        values = pred.float() * self.target_std + self.target_mean
        keep = torch.isfinite(target)
        if keep.any():
            p, t = values[keep], target[keep]
            collection = self.metrics[split]
            for name, metric in collection.items():
                if name.endswith("bias"):
                    metric.update(p - t)
                else:
                    metric.update(p, t)
        return None

    def _log_epoch(self, split: str) -> None:
        values = self.metrics[split].compute()
        self.log_dict({k: v.float() for k, v in values.items()}, sync_dist=False, rank_zero_only=False)
        self.metrics[split].reset()


class MaskedRegressionLoss(nn.Module):
    """MSE or Huber over the pixels whose target is finite (NaN: no value); 0 for a batch without any."""

    def __init__(self, kind: str = "mse", *, delta: float = 1.0) -> None:
        super().__init__()
        self.kind = kind
        self.delta = delta

    def forward(self, pred: Tensor, target: Tensor) -> Tensor:
        keep = torch.isfinite(target)
        if not keep.any():
            return pred.sum() * 0.0  # keeps the graph (every rank steps together)
        p, t = pred[keep].float(), target[keep].float()
        if self.kind == "huber":
            return F.huber_loss(p, t, delta=self.delta)
        return F.mse_loss(p, t)
