"""Networks of several sensors: each sensor's bands enter through their own layer, the rest is one network.

An input of several sensors holds every sensor's bands side by side, `(B, C, H, W)`, each sensor a group of
consecutive channels (`eoscale.sensors.groups.SensorGroup`: name, bands, start). The data read 0 in all of a group's
channels wherever that sensor has nothing at a pixel (clouds in the optical group, radar border noise, a sensor
missing for the whole scene, or dropped in training: `TileDataModule(sensor_dropout=…)`), so a network tells from its
input which sensors it has at each pixel (`presence`). Two ways in (`build_model(..., sensors=…, fusion=…)`):

- `fusion="stems"` (CNNs, or any backbone): `SensorStems`, one small stem a sensor (3×3 convolution, GroupNorm, ReLU
  to a common width); at each pixel the stems' outputs are averaged over the sensors present there, and that map is
  the shared encoder's input (then the FPN decoder, as for one sensor). A pixel that no sensor sees reads 0.
- `fusion="tokens"` (plain ViTs): `SensorPatchEmbed` replaces the ViT's patch embedding: one patch embedding a sensor
  plus a learnt sensor embedding, the tokens of a patch averaged over the sensors, each weighted by the share of the
  patch's pixels it sees (TerraMind's and OlmoEarth's per-modality embeddings into one encoder); then the one encoder.

Averaging over what is present, rather than concatenating, makes a tile without one sensor an input of the same kind
as a tile with it: the encoder sees a mean of fewer terms, which sensor dropout in training teaches it to use.
GroupNorm, not BatchNorm, in the stems: as in the heads (`eoscale.models.heads`), it does not depend on the per-rank
batch of DDP/FSDP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from timm.layers import PatchEmbed
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.heads import ConvNormAct
from eoscale.sensors.groups import SensorGroup, parse_groups

Fusion = Literal["stems", "tokens"]


def sensor_groups(sensors: Sequence[Mapping] | None, *, in_chans: int, fusion: str) -> tuple[SensorGroup, ...]:
    """The groups of a `sensors` record (`[{"name", "bands"}]` in channel order, as a checkpoint's model args carry
    it), checked against `in_chans` and `fusion`."""
    if fusion not in get_args(Fusion):
        raise InputError(f"fusion={fusion!r} is not one of {', '.join(map(repr, get_args(Fusion)))}")
    if not sensors:
        raise InputError(f"fusion={fusion!r} needs the input's sensors ([{{name, bands}}] in channel order): fit it on "
                         "a store or give sensors")
    bands = [str(b) for entry in sensors for b in entry["bands"]]
    groups = parse_groups(sensors, bands)
    if len(bands) != in_chans:
        raise InputError(f"the sensors list {len(bands)} bands, in_chans={in_chans}: give the store's sensors")
    return groups


def presence(x: Tensor, group: SensorGroup) -> Tensor:
    """(B, 1, H, W) float: 1 where `group`'s channels are not all exactly 0 (its sensor saw the pixel), else 0."""
    return (x[:, group.channels] != 0).any(dim=1, keepdim=True).to(x.dtype)


class SensorStems(nn.Module):
    """One stem a sensor (3×3 convolution, GroupNorm, ReLU to `width` channels), averaged at each pixel over the
    sensors present there: `(B, C, H, W)` in, `(B, width, H, W)` out, 0 where no sensor is."""

    def __init__(self, groups: Sequence[SensorGroup], *, width: int = 32):
        super().__init__()
        if not isinstance(width, int) or width < 2:
            raise InputError(f"fusion_width={width!r}: give a whole number of at least 2")
        self.groups = tuple(groups)
        self.channels = width
        self.stems = nn.ModuleList(ConvNormAct(len(g.bands), width) for g in self.groups)

    def forward(self, x: Tensor) -> Tensor:
        total = count = None
        for group, stem in zip(self.groups, self.stems, strict=True):
            seen = presence(x, group)
            term = stem(x[:, group.channels]) * seen
            total, count = (term, seen) if total is None else (total + term, count + seen)
        return total / count.clamp_min(1.0)


class SensorPatchEmbed(nn.Module):
    """A ViT's patch embedding for several sensors: one `PatchEmbed` a sensor (the geometry of the ViT's own, whose
    place in the ViT this takes) plus a learnt embedding a sensor; a patch's token is the mean of the sensors' tokens
    weighted by the share of the patch's pixels each sees (0 where none sees any). timm's ViT asks its patch
    embedding for its geometry (`grid_size`, `feat_ratio`, ...): the first sensor's answers for all."""

    def __init__(self, template: PatchEmbed, groups: Sequence[SensorGroup], embed_dim: int):
        super().__init__()
        self.groups = tuple(groups)
        fmt = None if template.output_fmt.value == "NCHW" else template.output_fmt.value
        self.embeds = nn.ModuleList(
            PatchEmbed(img_size=template.img_size, patch_size=template.patch_size, in_chans=len(g.bands),
                       embed_dim=embed_dim, flatten=template.flatten, output_fmt=fmt,
                       bias=template.proj.bias is not None, strict_img_size=template.strict_img_size,
                       dynamic_img_pad=template.dynamic_img_pad,
                       norm_layer=None if isinstance(template.norm, nn.Identity) else type(template.norm))
            for g in self.groups)
        self.sensor_embed = nn.Parameter(torch.zeros(len(self.groups), embed_dim))
        nn.init.trunc_normal_(self.sensor_embed, std=0.02)

    @property
    def in_chans(self) -> int:
        """The input's channels: every sensor's bands."""
        return sum(len(g.bands) for g in self.groups)

    def present(self, x: Tensor) -> Tensor:
        """(B, C, H, W) float: 1 at each channel of a pixel whose sensor saw it (its group not all 0), else 0."""
        return torch.cat([presence(x, g).expand(-1, len(g.bands), -1, -1) for g in self.groups], dim=1)

    # the geometry timm's VisionTransformer reads from its patch embedding
    def __getattr__(self, name: str):
        if name in ("img_size", "patch_size", "grid_size", "num_patches", "flatten", "output_fmt", "strict_img_size",
                    "dynamic_img_pad", "feat_ratio", "dynamic_feat_size"):
            return getattr(self._modules["embeds"][0], name)
        return super().__getattr__(name)

    def forward(self, x: Tensor) -> Tensor:
        first = self._modules["embeds"][0]
        total = weight = None
        for i, (group, embed) in enumerate(zip(self.groups, self.embeds, strict=True)):
            tokens = embed(x[:, group.channels]) + self.sensor_embed[i]
            share = self._patch_share(presence(x, group), first, tokens)
            term = tokens * share
            total, weight = (term, share) if total is None else (total + term, weight + share)
        return total / weight.clamp_min(1e-6)

    @staticmethod
    def _patch_share(seen: Tensor, embed: PatchEmbed, tokens: Tensor) -> Tensor:
        """(B, 1, H, W) presence as each patch's share of pixels seen, shaped as `tokens` are (NLC or NHWC)."""
        ph, pw = embed.patch_size
        if embed.dynamic_img_pad:
            seen = F.pad(seen, (0, (pw - seen.shape[-1] % pw) % pw, 0, (ph - seen.shape[-2] % ph) % ph))
        share = F.avg_pool2d(seen, (ph, pw), stride=(ph, pw))  # (B, 1, h, w)
        if tokens.ndim == 3:  # (B, N, D)
            return share.flatten(2).transpose(1, 2)
        return share.permute(0, 2, 3, 1)  # (B, h, w, 1) for NHWC tokens


def embed_sensors(net: nn.Module, groups: Sequence[SensorGroup]) -> SensorPatchEmbed:
    """Put a `SensorPatchEmbed` of `groups` in the place of timm ViT `net`'s patch embedding; returns it."""
    template = getattr(net, "patch_embed", None)
    if not isinstance(template, PatchEmbed) or type(template) is not PatchEmbed:
        raise InputError(f"fusion='tokens' needs a plain ViT's patch embedding, {type(net).__name__} has "
                         f"{type(template).__name__}: use fusion='stems'")
    embed = SensorPatchEmbed(template, groups, net.embed_dim)
    net.patch_embed = embed
    return embed


__all__ = ["Fusion", "SensorPatchEmbed", "SensorStems", "embed_sensors", "presence", "sensor_groups"]
