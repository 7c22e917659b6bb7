"""Whole models: a backbone and a head, built from a timm name by `build_model`.

    model = build_model("resnet18", in_chans=10, num_classes=8)                      # segmentation
    model = build_model("vit_small_patch16_224", in_chans=10, num_classes=8, img_size=64)
    model = build_model("convnext_atto", in_chans=10, num_classes=8, task="classification")
    model = build_model("resnet18", in_chans=10, num_classes=9, task="change")   # two dates: (B, 20, H, W) in
    model = build_model("resnet18", in_chans=12, num_classes=8, fusion="stems",      # several sensors
                        sensors=[{"name": "sentinel-2", "bands": [...10]}, {"name": "sentinel-1", "bands": ["VV", "VH"]}])

Later stages reach into the parts by name: `model.backbone` to freeze it or to put LoRA adapters on its
`attn.qkv` / `attn.proj` layers, `shardable_blocks(model)` for FSDP2's per-block `fully_shard`.
Building draws from torch's global generator only, so the same seed gives the same weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, get_args

import torch.nn.functional as F
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.backbone import Backbone, StateDictTransform, VitBackbone, create_backbone
from eoscale.models.change import ChangeFusion, ChangeModel
from eoscale.models.fusion import Fusion, SensorStems, embed_sensors, sensor_groups
from eoscale.models.heads import ClassificationHead, FPNDecoder, PixelHead, SimpleFeaturePyramid
from eoscale.models.temporal import build_temporal_model
from eoscale.models.trees import TREE_MODELS, TreeEnsemble

Task = Literal["segmentation", "classification", "change"]


class SegmentationModel(nn.Module):
    """Per-pixel class logits `(B, num_classes, H, W)` at the input's own size.

    `neck` turns the backbone's maps into a pyramid (a `SimpleFeaturePyramid` for plain ViTs, identity
    for hierarchical backbones); `decoder` is an `FPNDecoder` over the pyramid; `pixel_head`, if any, a
    `PixelHead` whose per-pixel logits from the bands alone are added at full resolution; `stem`, if any, what the
    input goes through before the backbone (`SensorStems` of a model of several sensors: `eoscale.models.fusion`).
    """

    def __init__(self, backbone: Backbone, neck: nn.Module, decoder: nn.Module, pixel_head: nn.Module | None = None,
                 stem: nn.Module | None = None):
        super().__init__()
        if stem is not None:  # absent, not None, in the module tree (as pixel_head): older checkpoints load strictly
            self.stem = stem
        self.backbone = backbone
        self.neck = neck
        self.decoder = decoder
        if pixel_head is not None:  # absent, not None, in the module tree: older checkpoints load strictly
            self.pixel_head = pixel_head

    def forward(self, x: Tensor) -> Tensor:
        logits = self.decoder(self.neck(self.backbone(self.stem(x) if hasattr(self, "stem") else x)))
        logits = F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
        if hasattr(self, "pixel_head"):
            logits = logits + self.pixel_head(x)
        return logits


class TileClassifier(nn.Module):
    """Tile-level class logits `(B, num_classes)`."""

    def __init__(self, backbone: Backbone, head: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))


class _Identity(nn.Module):
    """`nn.Identity` for a list of maps, keeping `channels` and `reductions` for the decoder."""

    def __init__(self, backbone: Backbone):
        super().__init__()
        self.channels = list(backbone.channels)
        self.reductions = list(backbone.reductions)

    def forward(self, features: list[Tensor]) -> list[Tensor]:
        return features


def build_model(
    backbone: str,
    *,
    in_chans: int,
    num_classes: int,
    task: Task = "segmentation",
    img_size: int | None = None,
    decoder_channels: int = 128,
    weights: str | Path | None = None,
    weights_transform: StateDictTransform | None = None,
    drop_path_rate: float = 0.0,
    dropout: float = 0.0,
    architecture: str | None = None,
    spectral_mlp: int = 0,
    sensors: Sequence[Mapping] | None = None,
    fusion: Fusion | None = None,
    fusion_width: int = 32,
    **backbone_kwargs,
) -> nn.Module:
    """Build a segmentation, tile-classification or change model on the timm backbone `backbone`.

    `in_chans` is the tile store's band count (of one date: a change model takes two dates' bands stacked); `img_size` the tile size (required by ViT and Swin);
    `weights` a local state dict for the backbone (see `Backbone.load_weights`), `weights_transform`
    the hook that remaps it first. `spectral_mlp` > 0 adds a `PixelHead` of that width beside the decoder.
    `out_indices` and any other keyword go to `create_backbone`.
    `architecture` builds a temporal model of stacks of dates instead (`eoscale.models.temporal`: "utae" on the
    per-date backbone `backbone`, or "temporal_vit"), its options in the other keywords.
    `random_forest` is no timm name: it builds the empty shell of a fitted forest (`eoscale.models.trees`), its
    size (`trees`, `nodes`, `depth`) from the keywords, for a checkpoint's weights to fill.
    `fusion` builds a segmentation model of several sensors (`eoscale.models.fusion`): `sensors` are the input's
    groups (`[{"name", "bands"}]` in channel order), each entering through its own stem of `fusion_width` channels
    ("stems", any backbone, and U-TAE's per-date backbone) or its own patch embedding ("tokens", plain ViTs); without `fusion` the bands of all
    sensors go into one network as they are (early fusion; `sensors` is then not used, but by a U-TAE with
    `presence_channels`: one channel a sensor, where it has data, beside the bands).
    """
    if fusion is not None and (backbone in TREE_MODELS or (architecture is not None and
                                                           (architecture, fusion) != ("utae", "stems"))):
        raise InputError(f"fusion={fusion!r} is for single-date segmentation networks and U-TAE's stems, not "
                         f"{architecture or backbone!r}: leave fusion out")
    if backbone in TREE_MODELS:
        return TreeEnsemble(in_chans=in_chans, num_classes=num_classes, **backbone_kwargs)
    if architecture is not None:
        # U-TAE: the stems of each date's sensors before its per-date backbone, or each sensor's presence channel
        if fusion is not None or backbone_kwargs.get("presence_channels"):
            if architecture != "utae":
                raise InputError(f"presence_channels is U-TAE's option, not {architecture!r}'s: leave it out")
            backbone_kwargs.update(sensors=sensors, fusion=fusion, fusion_width=fusion_width)
        return build_temporal_model(architecture, backbone=backbone, in_chans=in_chans, num_classes=num_classes,
                                    img_size=img_size, decoder_channels=decoder_channels, weights=weights,
                                    drop_path_rate=drop_path_rate, dropout=dropout, **backbone_kwargs)
    if task not in get_args(Task):
        raise InputError(f"task={task!r} is not one of {', '.join(map(repr, get_args(Task)))}")
    groups = None
    if fusion is not None:
        if task != "segmentation":
            raise InputError(f"fusion={fusion!r} is for segmentation models: leave it out of a {task} model")
        groups = sensor_groups(sensors, in_chans=in_chans, fusion=fusion)
    for option, value in (
        ("in_chans", in_chans),
        ("num_classes", num_classes),
        ("decoder_channels", decoder_channels),
    ):
        if not isinstance(value, int) or value < 1:
            raise InputError(f"{option}={value!r}: give a positive whole number")
    stem = SensorStems(groups, width=fusion_width) if fusion == "stems" else None
    net = create_backbone(
        backbone,
        in_chans=in_chans if stem is None else stem.channels,
        img_size=img_size,
        drop_path_rate=drop_path_rate,
        weights=None if fusion == "tokens" else weights,  # tokens: loaded once the sensors' embeddings are in
        weights_transform=weights_transform,
        **backbone_kwargs,
    )
    if fusion == "tokens":
        if not isinstance(net, VitBackbone):
            raise InputError(f"fusion='tokens' gives each sensor a ViT patch embedding; {backbone!r} is no plain ViT: "
                             "use fusion='stems'")
        embed_sensors(net.net, groups)
        if weights is not None:
            net.load_weights(weights, transform=weights_transform)
    if task == "classification":
        return TileClassifier(
            net, ClassificationHead(net.channels[-1], num_classes=num_classes, dropout=dropout)
        )
    if isinstance(net, VitBackbone):
        neck: nn.Module = SimpleFeaturePyramid(
            net.channels[-1], net.reductions[-1], num_inputs=len(net.channels)
        )
    else:
        neck = _Identity(net)
    decoder = FPNDecoder(neck.channels, num_classes=num_classes, channels=decoder_channels, dropout=dropout)
    if task == "change":
        if spectral_mlp:
            raise InputError("spectral_mlp is for single-date segmentation: leave it out of a change model")
        return ChangeModel(net, neck, ChangeFusion(neck.channels), decoder)
    pixel_head = PixelHead(in_chans, num_classes, hidden=spectral_mlp) if spectral_mlp else None
    return SegmentationModel(net, neck, decoder, pixel_head, stem)


def shardable_blocks(model: nn.Module) -> list[nn.Module]:
    """The submodules of `model`'s backbone to wrap one by one with FSDP2 `fully_shard`.

    Transformer blocks for ViTs, stages for ResNet / ConvNeXt and the like; the heads and whatever is
    left of the backbone go with the root `fully_shard(model)`.
    """
    backbone = model if isinstance(model, Backbone) else getattr(model, "backbone", None)
    if not isinstance(backbone, Backbone):
        raise InputError(f"cannot shard a {type(model).__name__}: it has no eoscale backbone")
    return backbone.blocks_for_sharding()
