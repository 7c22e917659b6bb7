"""A bi-temporal change network: two dates of one place in, from-to change classes out.

    model = build_model("resnet18", in_chans=10, num_classes=9, task="change")   # 10 bands a date
    logits = model(torch.cat([before, after], dim=1))                            # (B, 20, H, W) -> (B, 9, H, W)

One backbone, shared by both dates (a Siamese encoder, as in the change-detection literature: FC-Siam-diff,
Daudt et al. 2018; ChangeFormer and BIT fuse the same way with attention), so what it learns about a date holds for
the other. At each scale of the pyramid the two dates' maps are fused by a 1x1 convolution over
`[f_before, f_after, |f_after - f_before|]`: the difference says *that* something changed, the maps themselves *from
what to what*, which a difference alone cannot tell (forest -> grass and grass -> forest differ only in sign). The
fused pyramid goes through the same FPN decoder as the single-date model.

The input is the two dates' bands stacked along the channel axis, date by date (`(B, dates * C, H, W)`), so the
window loop of `predict`, serving and the loss see an ordinary image network; `split_dates` undoes it. A window
whose date is nodata reads as the band mean (0 after normalisation), as in training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eoscale.models.backbone import Backbone
from eoscale.models.heads import ConvNormAct


def split_dates(x: Tensor, dates: int) -> Tensor:
    """`(B, dates * C, H, W)` -> `(B, dates, C, H, W)`; refuses channels that do not divide by `dates`."""
    b, channels, h, w = x.shape
    if channels % dates:
        raise ValueError(f"{channels} input channels do not hold {dates} dates of equal band counts")
    return x.reshape(b, dates, channels // dates, h, w)


class ChangeFusion(nn.Module):
    """Per scale, `[f_a, f_b, |f_b - f_a|]` -> the scale's width by a 1x1 convolution, normalisation and ReLU."""

    def __init__(self, channels: list[int]):
        super().__init__()
        self.channels = list(channels)
        self.fuse = nn.ModuleList(ConvNormAct(3 * c, c, kernel_size=1) for c in channels)

    def forward(self, before: list[Tensor], after: list[Tensor]) -> list[Tensor]:
        return [f(torch.cat([a, b, (b - a).abs()], dim=1)) for f, a, b in zip(self.fuse, before, after, strict=True)]


class ChangeModel(nn.Module):
    """Change-class logits `(B, num_classes, H, W)` from two dates stacked on the channel axis.

    `backbone` and `neck` are the single-date model's (a timm backbone, a `SimpleFeaturePyramid` for a plain ViT);
    `fusion` a `ChangeFusion` over the neck's channels; `decoder` an `FPNDecoder`. `model.backbone` is there by the
    same name as in `SegmentationModel`, so freezing, LoRA and FSDP2's per-block sharding find it.
    """

    dates = 2

    def __init__(self, backbone: Backbone, neck: nn.Module, fusion: ChangeFusion, decoder: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.neck = neck
        self.fusion = fusion
        self.decoder = decoder

    def forward(self, x: Tensor) -> Tensor:
        stacked = split_dates(x, self.dates)
        b = stacked.shape[0]
        # both dates in one pass through the shared encoder: one batch of 2B, the same weights for each date
        pyramid = self.neck(self.backbone(stacked.transpose(0, 1).reshape(2 * b, *stacked.shape[2:])))
        before, after = [f[:b] for f in pyramid], [f[b:] for f in pyramid]
        logits = self.decoder(self.fusion(before, after))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)

