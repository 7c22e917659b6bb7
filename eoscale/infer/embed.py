"""A backbone's feature maps as the window loop's network: what `eoscale embed` runs where `predict` runs a model.

    model, layer = load_embedding_model("best.ckpt", layer="decoder", device="cpu")
    model.network(windows)      # (B, D, H, W): one D-dimensional vector a pixel, at the window's own size

Two layers:

- `decoder` (a fitted model's checkpoint, the default): the features the model's last 1×1 classifier sees, the FPN
  decoder's fused map at the finest stride, upsampled to the window by the model's own interpolation. The model is
  the checkpoint's network with its classifier replaced by `UnitVectors` (and its per-pixel spectral head, whose
  logits are added to the classes', left out): the same class, so a temporal model is still handed its dates
  (`eoscale.infer.stacked`) and a change model its two dates, through the input spec as `predict` does.
- `backbone`: the backbone's last (coarsest) feature map, upsampled bilinearly to the window; the only layer of a
  foundation backbone (`backbone.safetensors` from `eoscale pretrain`), which has no decoder.

The vectors are made unit length at the features' own stride, before the upsampling to the window and the blending
(`UnitVectors`), and again after the blending (`eoscale.infer.outputs.embedding`), so a pixel's vector is the direction
the windows covering it agree on.

`cell` > 1 (`eoscale embed --field-stride`): one vector a cell of `cell` × `cell` pixels instead of one a pixel, the
maps resized to `window / cell` instead of the window (none at all where that is the features' own stride, 4 for the
decoder of a CNN), blended and written on that grid of cells (`eoscale.infer.predict.predict_blocks`). A field at the
features' stride holds what the network computed, not an interpolation of it, at 1/16 of the pixels: on a CPU
`eoscale embed` then runs faster than `eoscale predict` (1.16× in benchmarks/embed.json), where a vector a pixel
reaches 0.75× (blending, quantising and writing 64 bytes a pixel beside the forward passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eoscale.contract import BandContract
from eoscale.errors import InputError
from eoscale.infer.model import PredictionModel, load_model
from eoscale.models.backbone import Backbone
from eoscale.models.factory import SegmentationModel

LAYERS = ("decoder", "backbone")


@dataclass(frozen=True)
class Layer:
    """Which features a field holds: the layer's name, its dimensions, and the backbone they come from."""

    name: str
    dimensions: int
    backbone: str
    cell: int = 1  # pixels a side of the field's cells: 1, a vector a pixel; the features' stride, a vector a cell


def unit_vectors(features: Tensor) -> Tensor:
    """`features` (B, D, H, W) as float32 vectors of length 1 along D (a zero vector stays zero)."""
    return F.normalize(features.float(), dim=1, eps=1e-12)


class UnitVectors(nn.Module):
    """`unit_vectors` as a layer: in place of a model's classifier, at the features' own stride, so that the model's
    upsampling to the window and the blending work on unit vectors without normalising 16× as many pixels after."""

    def forward(self, features: Tensor) -> Tensor:
        return unit_vectors(features)


def cells(x: Tensor, cell: int) -> tuple[int, int]:
    """The size of a map of one vector a cell of `cell` × `cell` pixels of the windows `x`."""
    return x.shape[-2] // cell, x.shape[-1] // cell


def resized(features: Tensor, size: tuple[int, int]) -> Tensor:
    """`features` bilinearly resized to `size`, or as they are if they have it."""
    if tuple(features.shape[-2:]) == tuple(size):
        return features
    return F.interpolate(features, size=size, mode="bilinear", align_corners=False)


class BackboneFeatures(nn.Module):
    """The last feature map of `backbone` (after `stem`, a model of several sensors' stems), made unit length, at the
    input's size (one vector a cell of `cell` pixels)."""

    def __init__(self, backbone: Backbone, stem: nn.Module | None = None, *, cell: int = 1) -> None:
        super().__init__()
        self.backbone = backbone
        self.stem = stem if stem is not None else nn.Identity()
        self.cell = cell

    def forward(self, x: Tensor) -> Tensor:
        features = unit_vectors(self.backbone(self.stem(x))[-1])
        return F.interpolate(features, size=cells(x, self.cell), mode="bilinear", align_corners=False)


class DecoderCells(nn.Module):
    """A segmentation model's decoder features (its classifier a `UnitVectors`), one vector a cell of `cell` pixels:
    the model's forward without the upsampling to the window."""

    def __init__(self, network: nn.Module, cell: int) -> None:
        super().__init__()
        self.network = network
        self.cell = cell

    def forward(self, x: Tensor) -> Tensor:
        net = self.network
        features = net.decoder(net.neck(net.backbone(net.stem(x) if hasattr(net, "stem") else x)))
        return resized(features, cells(x, self.cell))


def embedding_network(network: nn.Module, layer: str, *, backbone: str, cell: int = 1) -> tuple[nn.Module, Layer]:
    """`network` (a checkpoint's, in eval mode) giving the features of `layer` instead of its output, one vector a
    cell of `cell` pixels; the layer's facts."""
    if layer not in LAYERS:
        raise InputError(f"--layer {layer!r} is not one of {', '.join(LAYERS)}")
    if cell > 1 and not isinstance(network, SegmentationModel):  # a season's or a change model: dates, not cells
        raise InputError(f"--field-stride {cell} takes a single-date segmentation model; a {type(network).__name__} "
                         f"({backbone}) gives its features at the window's pixels: leave --field-stride out")
    if layer == "decoder":
        classifier = getattr(getattr(network, "decoder", None), "classifier", None)
        if not isinstance(classifier, nn.Conv2d):
            raise InputError(f"a {type(network).__name__} ({backbone}) has no decoder whose features could be an "
                             "embedding: use --layer backbone, or a segmentation checkpoint")
        network.decoder.classifier = UnitVectors()
        if hasattr(network, "pixel_head"):  # its class logits are added to the decoder's: no feature of its own
            del network.pixel_head
        if cell > 1:
            network = DecoderCells(network, cell).eval()
        return network, Layer(layer, classifier.in_channels, backbone, cell)
    inner = getattr(network, "backbone", None)
    if not isinstance(inner, Backbone) or not hasattr(network, "neck"):
        raise InputError(f"--layer backbone takes a single-date segmentation model's backbone; {type(network).__name__} "
                         f"({backbone}) has none: use --layer decoder")
    stem = getattr(network, "stem", None)
    return BackboneFeatures(inner, stem, cell=cell).eval(), Layer(layer, int(inner.channels[-1]), backbone, cell)


def load_embedding_model(checkpoint: str | Path, *, layer: str, adapter: str | None = None,
                         device: torch.device | str = "cpu", cell: int = 1) -> tuple[PredictionModel, Layer]:
    """The network of `checkpoint` giving `layer`'s features, one vector a cell of `cell` pixels, on `device`: an
    eoscale checkpoint (`eoscale fit`), or a backbone export (`backbone.safetensors` from `eoscale pretrain`: the
    backbone layer only)."""
    if cell < 1:
        raise InputError(f"--field-stride {cell}: give a whole number of pixels, 1 or more")
    path = Path(checkpoint)
    if path.suffix == ".safetensors":
        return _foundation(path, layer=layer, device=device, cell=cell)
    model = load_model(path, adapter=adapter, device="cpu")
    network, facts = embedding_network(model.network, layer, backbone=model.backbone, cell=cell)
    model.network = network.to(device).eval().requires_grad_(False)
    return model, facts


def _foundation(path: Path, *, layer: str, device: torch.device | str, cell: int) -> tuple[PredictionModel, Layer]:
    """A backbone export as a model of its last feature map, its band contract from the file's metadata."""
    from eoscale.models.backbone import create_backbone
    from eoscale.models.foundation import FoundationWeights, read_export_metadata

    meta = read_export_metadata(path)
    if meta is None:
        raise InputError(f"{str(path)!r} is no eoscale backbone export (no band contract in its metadata): give an "
                         "eoscale checkpoint, or the backbone.safetensors 'eoscale pretrain' writes")
    if layer != "backbone":
        raise InputError(f"{str(path)!r} is a backbone without a decoder: use --layer backbone")
    if meta.get("fusion"):
        raise InputError(f"{str(path)!r} is an encoder of several sensors: embed with a fitted model of it instead")
    bands = [str(b) for b in meta["bands"]]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        backbone = create_backbone(meta["model"], in_chans=len(bands), img_size=int(meta["img_size"]),
                                   weights=path, weights_transform=FoundationWeights(path, bands=bands),
                                   **dict(meta.get("model_kwargs") or {}))
    network = BackboneFeatures(backbone, cell=cell).to(device).eval().requires_grad_(False)
    contract = BandContract(tuple(bands), tuple(meta["mean"]), tuple(meta["std"]), int(meta["img_size"]), ())
    model = PredictionModel(network, contract, None, path, str(meta["model"]),
                            spec={"args": {"backbone": meta["model"]}}, lineage=None)
    return model, Layer("backbone", int(backbone.channels[-1]), str(meta["model"]), cell)
