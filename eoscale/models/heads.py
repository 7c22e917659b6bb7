"""What sits on a backbone's feature maps: a ViT feature pyramid, an FPN segmentation decoder, a tile head.

All take the backbone's list of feature maps, finest first, and know their input channels up front, so
`eoscale.models.factory` can wire any backbone to any head from `Backbone.channels` / `.reductions`.
Normalisation is GroupNorm: it does not depend on the batch, so it behaves the same with the small
per-rank batches of DDP/FSDP and needs no SyncBatchNorm.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from timm.layers import LayerNorm2d
from torch import Tensor, nn

from eoscale.errors import InputError


class ConvNormAct(nn.Sequential):
    """Convolution, GroupNorm, ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False),
            nn.GroupNorm(_groups(out_channels), out_channels),
            nn.ReLU(inplace=True),
        )


class SimpleFeaturePyramid(nn.Module):
    """ViTDet's simple feature pyramid: patch-token maps at one stride to maps at four strides.

    With the default `scales` a stride-16 ViT gives strides 4, 8, 16, 32: two transposed convolutions
    (×4), one (×2), identity (×1), max-pooling (×½); channels halve with each ×2 as in ViTDet.
    It takes either one map (the last block's), used for every level, or one map per level.
    """

    def __init__(
        self,
        in_channels: int,
        in_reduction: int,
        *,
        num_inputs: int = 1,
        scales: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
    ):
        super().__init__()
        if num_inputs not in (1, len(scales)):
            raise InputError(
                f"a ViT feature pyramid takes 1 or {len(scales)} block outputs, got {num_inputs}: "
                f"give out_indices with 1 or {len(scales)} blocks"
            )
        self.num_inputs = num_inputs
        self.levels = nn.ModuleList()
        self.channels: list[int] = []
        self.reductions: list[int] = []
        for scale in scales:
            layers: list[nn.Module] = []
            channels, s = in_channels, scale
            while s > 1:
                if layers:
                    layers += [LayerNorm2d(channels), nn.GELU()]
                layers.append(nn.ConvTranspose2d(channels, channels // 2, kernel_size=2, stride=2))
                channels, s = channels // 2, s / 2
            while s < 1:
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True))
                s *= 2
            self.levels.append(nn.Sequential(*layers) if layers else nn.Identity())
            self.channels.append(channels)
            self.reductions.append(max(1, round(in_reduction / scale)))

    def forward(self, features: Sequence[Tensor]) -> list[Tensor]:
        if self.num_inputs == 1:
            return [level(features[-1]) for level in self.levels]
        return [level(f) for level, f in zip(self.levels, features, strict=True)]


class FPNDecoder(nn.Module):
    """Feature-pyramid segmentation decoder: logits at the finest feature stride.

    Lateral 1×1 convolutions bring every level to `channels`; a top-down pass upsamples each coarser
    level to the next finer one's size and adds it; 3×3 convolutions smooth each level; all levels are
    upsampled to the finest one, concatenated and fused by a 3×3 convolution; a 1×1 convolution
    classifies. Upsampling goes to the exact size of the finer map, so inputs need not be multiples
    of the backbone's stride.
    """

    def __init__(
        self, in_channels: Sequence[int], *, num_classes: int, channels: int = 128, dropout: float = 0.0
    ):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, kernel_size=1) for c in in_channels)
        self.smooth = nn.ModuleList(ConvNormAct(channels, channels) for _ in in_channels)
        self.fuse = ConvNormAct(channels * len(in_channels), channels)
        self.dropout = nn.Dropout2d(dropout)
        self.classifier = nn.Conv2d(channels, num_classes, kernel_size=1)

    def forward(self, features: Sequence[Tensor]) -> Tensor:
        laterals = [conv(f) for conv, f in zip(self.lateral, features, strict=True)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(
                laterals[i], size=laterals[i - 1].shape[-2:], mode="nearest"
            )
        levels = [conv(f) for conv, f in zip(self.smooth, laterals, strict=True)]
        size = levels[0].shape[-2:]
        upsampled = [levels[0]] + [
            F.interpolate(f, size=size, mode="bilinear", align_corners=False) for f in levels[1:]
        ]
        return self.classifier(self.dropout(self.fuse(torch.cat(upsampled, dim=1))))


class ClassificationHead(nn.Module):
    """Tile-level classes from the coarsest feature map: global average pool, dropout, linear."""

    def __init__(self, in_channels: int, *, num_classes: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, features: Sequence[Tensor]) -> Tensor:
        pooled = features[-1].mean(dim=(-2, -1))
        return self.fc(self.dropout(pooled))


def _groups(channels: int) -> int:
    """GroupNorm groups: up to 32, but at least 2 channels per group, so a 1×1 map of a batch of one tile
    (the coarsest level of a 32 px tile) still has more than one value to normalise over."""
    return max(g for g in range(1, 33) if channels % g == 0 and channels // g >= 2) if channels >= 2 else 1


class PixelHead(nn.Module):
    """Class logits of each pixel from its bands alone: an MLP of 1×1 convolutions (`hidden` wide, two layers).

    Beside a spatial decoder, its logits are added to the decoder's, so a segmentation network has the
    spectra-only path a per-pixel random forest has, and cannot do worse than what the spectra give (issue 38).
    """

    def __init__(self, in_chans: int, num_classes: int, *, hidden: int = 64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(in_chans, hidden, 1), nn.GELU(), nn.Conv2d(hidden, hidden, 1), nn.GELU(),
                                 nn.Conv2d(hidden, num_classes, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x)
