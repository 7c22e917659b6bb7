"""Self-distillation (DINO, Caron et al. 2021) pretraining of a timm ViT on a store's images: MAE's alternative.

    eoscale pretrain --config configs/dino_pretrain.yaml --data.init_args.store runs/unlabelled.zarr

A student ViT and its exponential-moving-average teacher see two views of every tile (a random resized crop
back to the tile size, random flips, and a small per-band gain and offset, so a view keeps the tile's spectra
up to a few per cent); the student's projected CLS token learns to match the teacher's centred, sharpened
one on the other view. The projection head, the loss (centring, teacher temperature) and the momentum update
are lightly's (`lightly.models.modules.DINOProjectionHead`, `lightly.loss.DINOLoss`,
`lightly.models.utils.update_momentum`). Everything else is what MAE's task shares with it
(`eoscale.train.tasks.pretraining.PretrainTask`): the same encoder built at the store's bands and tile size, AdamW
with warm-up and cosine decay, and the student's encoder exported as `backbone.safetensors` with its band contract
at the end of fit, so the fine-tuning configs take either pretraining's backbone. DINO is not pipelined (its
teacher and two views do not cut into stages): the pipeline strategy refuses it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor, nn
from torchvision.transforms import v2

from eoscale.errors import InputError
from eoscale.models.backbone import VitBackbone
from eoscale.train.tasks.pretraining import PretrainTask


class SelfDistillation(nn.Module):
    """Student (`backbone` + `head`) and an EMA teacher copy; `forward(x)` returns the DINO loss of two views."""

    def __init__(self, backbone: VitBackbone, *, out_dim: int, hidden_dim: int, bottleneck_dim: int,
                 crop_scale: float, spectral_jitter: float, teacher_temp: float, student_temp: float) -> None:
        super().__init__()
        from lightly.loss import DINOLoss
        from lightly.models.modules import DINOProjectionHead
        from lightly.models.utils import deactivate_requires_grad

        self.backbone = backbone  # the name MAE's export reads: the student's encoder
        dim = backbone.net.embed_dim
        self.head = DINOProjectionHead(dim, hidden_dim, bottleneck_dim, out_dim)
        self.teacher_backbone = copy.deepcopy(backbone)
        self.teacher_head = DINOProjectionHead(dim, hidden_dim, bottleneck_dim, out_dim)
        self.teacher_head.load_state_dict(self.head.state_dict())
        deactivate_requires_grad(self.teacher_backbone)
        deactivate_requires_grad(self.teacher_head)
        self.criterion = DINOLoss(output_dim=out_dim, teacher_temp=teacher_temp, warmup_teacher_temp=teacher_temp,
                                  student_temp=student_temp)
        size = int(backbone.net.patch_embed.img_size[0])
        self.crop = v2.RandomResizedCrop(size, scale=(crop_scale, 1.0), antialias=True)
        self.flip = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomVerticalFlip()])
        self.spectral_jitter = spectral_jitter

    def view(self, x: Tensor) -> Tensor:
        """A random view of each tile: its own crop and flips, and a per-band gain and offset."""
        out = torch.stack([self.flip(self.crop(tile)) for tile in x])
        if self.spectral_jitter:
            b, c = x.shape[:2]
            gain = 1 + self.spectral_jitter * torch.randn(b, c, 1, 1, device=x.device)
            out = out * gain + self.spectral_jitter * torch.randn(b, c, 1, 1, device=x.device)
        return out

    @staticmethod
    def _embed(backbone: VitBackbone, head: nn.Module, x: Tensor) -> Tensor:
        net = backbone.net
        tokens = net.forward_features(x)  # (B, prefix + N, D), normed
        pooled = tokens[:, 0] if net.cls_token is not None else tokens[:, net.num_prefix_tokens:].mean(dim=1)
        return head(pooled)

    def forward(self, x: Tensor) -> Tensor:
        views = [self.view(x), self.view(x)]
        with torch.no_grad():
            teacher = [self._embed(self.teacher_backbone, self.teacher_head, v) for v in views]
        student = [self._embed(self.backbone, self.head, v) for v in views]
        return self.criterion(teacher, student)

    @torch.no_grad()
    def update_teacher(self, momentum: float) -> None:
        from lightly.models.utils import update_momentum

        update_momentum(self.backbone, self.teacher_backbone, m=momentum)
        update_momentum(self.head, self.teacher_head, m=momentum)


class DINOTask(PretrainTask):
    """Self-distillation pretraining of a timm ViT on a tile store's images (use `labels: false`).

    Args:
        backbone, backbone_kwargs, lr, weight_decay, warmup_steps, min_lr_ratio, drop_path_rate, export,
            init_seed, in_chans, img_size: as `MAETask`'s (`PretrainTask`).
        out_dim, hidden_dim, bottleneck_dim: the projection head's output (prototypes), hidden and bottleneck widths.
        momentum: the teacher's EMA momentum at the start; it rises to 1 along a cosine.
        crop_scale: the smallest share of a tile a view's crop keeps.
        spectral_jitter: standard deviation of each view's per-band gain and offset (normalised units).
        teacher_temp, student_temp: the softmax temperatures.
    """

    METHOD = "DINO"

    def __init__(
        self,
        backbone: str = "vit_small_patch16_224",
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        out_dim: int = 1024,
        hidden_dim: int = 512,
        bottleneck_dim: int = 64,
        momentum: float = 0.996,
        crop_scale: float = 0.4,
        spectral_jitter: float = 0.05,
        teacher_temp: float = 0.04,
        student_temp: float = 0.1,
        lr: float = 5e-4,
        weight_decay: float = 0.04,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        drop_path_rate: float = 0.0,
        export: bool = True,
        init_seed: int = 0,
        in_chans: int | None = None,
        img_size: int | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < crop_scale <= 1.0:
            raise InputError(f"crop_scale={crop_scale!r}: give a share of the tile above 0 and at most 1 (e.g. 0.4)")
        if not 0.0 <= momentum < 1.0:
            raise InputError(f"momentum={momentum!r}: give a value from 0 to below 1 (e.g. 0.996)")
        self.save_hyperparameters()

    def configure_models(self) -> nn.Module:
        h = self.hparams
        return SelfDistillation(self.vit_backbone(), out_dim=h.out_dim, hidden_dim=h.hidden_dim, bottleneck_dim=h.bottleneck_dim,
                                crop_scale=h.crop_scale, spectral_jitter=h.spectral_jitter,
                                teacher_temp=h.teacher_temp, student_temp=h.student_temp)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.model(batch["image"])
        self.log_training_loss(loss, batch["image"].shape[0])
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        total = max(int(self.trainer.max_steps or 1), 1)
        progress = min(1.0, self.global_step / total)
        base = self.hparams.momentum
        self.model.update_teacher(1 - (1 - base) * (math.cos(math.pi * progress) + 1) / 2)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.model(batch["image"]), on_epoch=True, sync_dist=True,
                 batch_size=batch["image"].shape[0])
