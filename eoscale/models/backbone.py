"""Backbones: any timm model, by its timm name, as a list of multi-scale feature maps.

`create_backbone("resnet18", in_chans=10)` gives a `Backbone` whose `forward(x)` returns feature maps
`(B, C_i, H/s_i, W/s_i)`, finest first, with `channels` (C_i) and `reductions` (s_i) for the heads.
Two routes, chosen from the model itself rather than from its name:

- hierarchical models (ResNet, ConvNeXt, EfficientNet, Swin, ...) through timm's `features_only=True`;
- plain vision transformers (every block at one stride, e.g. `vit_small_patch16_224`) built at the tile
  size and read through timm's public `forward_intermediates`; a neck turns their one stride into a
  pyramid (`eoscale.models.heads.SimpleFeaturePyramid`).

Nothing downloads: timm models are always built with `pretrained=False`; `weights=` loads a local file
(`Backbone.load_weights`), with a `transform` hook for loaders that remap foundation-model weights.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import timm
import torch
from torch import Tensor, nn

from eoscale.errors import InputError, InputNotFoundError

log = logging.getLogger(__name__)

StateDict = dict[str, Tensor]
# A hook that rewrites a state dict before it is loaded (band mapping, renamed keys, ...).
StateDictTransform = Callable[[StateDict, "Backbone"], StateDict]


class Backbone(nn.Module):
    """A timm model seen as a feature extractor: `forward(x) -> list[Tensor]`, finest map first.

    `net` is the timm module itself, so LoRA (peft) can target its `attn.qkv` / `attn.proj` Linear layers
    and `blocks_for_sharding()` names the submodules that FSDP2 wraps one by one.
    """

    def __init__(self, name: str, net: nn.Module, channels: Sequence[int], reductions: Sequence[int]):
        super().__init__()
        self.name = name
        self.net = net
        self.channels: list[int] = list(channels)
        self.reductions: list[int] = list(reductions)

    def blocks_for_sharding(self) -> list[nn.Module]:
        """The submodules to wrap one by one with FSDP2 `fully_shard` (before wrapping the root)."""
        raise NotImplementedError

    def adapt_state_dict(self, state: StateDict) -> StateDict:
        """Backbone-specific fixes applied to every state dict loaded into `net` (renamed keys, ...)."""
        return _match_keys(state, self.net.state_dict().keys())

    def load_weights(self, path: str | Path, *, transform: StateDictTransform | None = None) -> WeightsReport:
        """Load a local state dict into `net`, non-strictly, and report missing and unexpected keys.

        The file may hold a timm model's state dict (full or `features_only`), this backbone's, a whole
        eoscale model's or a Lightning checkpoint's. `transform(state, backbone)` runs first: the hook
        for loaders that map foundation-model weights onto other bands. Tensors whose shape differs
        from the model's are refused rather than skipped, so no layer stays silently random.
        """
        state = _strip_wrappers(read_state_dict(path))
        if transform is not None:
            state = transform(state, self)
        state = self.adapt_state_dict(state)
        own = self.net.state_dict()
        mismatched = [k for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
        if mismatched:
            shown = "; ".join(
                f"{k!r} is {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
                for k in mismatched[:3]
            )
            raise InputError(
                f"weights {str(path)!r} do not fit backbone {self.name!r}: {shown}"
                f"{' (and more)' if len(mismatched) > 3 else ''}; pass a transform that maps them"
            )
        result = self.net.load_state_dict(state, strict=False)
        report = WeightsReport(
            path=str(path),
            loaded=len(state) - len(result.unexpected_keys),
            missing=list(result.missing_keys),
            unexpected=list(result.unexpected_keys),
        )
        (log.warning if report.missing else log.info)("backbone %s: %s", self.name, report.summary())
        return report


class FeatureBackbone(Backbone):
    """A hierarchical timm model built with `features_only=True` (CNNs, Swin, ...)."""

    def forward(self, x: Tensor) -> list[Tensor]:
        features = self.net(x)
        if str(getattr(self.net, "output_fmt", "NCHW")).endswith("NHWC"):  # Swin and friends
            features = [f.permute(0, 3, 1, 2) for f in features]
        return list(features)

    def blocks_for_sharding(self) -> list[nn.Module]:
        # A container of stages the feature wrapper kept whole (EfficientNet's `blocks`) ...
        for attr in ("stages", "layers", "blocks"):
            seq = getattr(self.net, attr, None)
            if isinstance(seq, nn.Sequential | nn.ModuleList) and len(seq) > 1:
                return list(seq)
        # ... or the feature modules themselves (`layer1`.. of ResNet, `stages_0`.. of ConvNeXt);
        # timm's feature wrapper flattens `stages.0` to `stages_0` and drops modules past the last index.
        blocks: list[nn.Module] = []
        for info in self.net.feature_info.info:
            module = _get_submodule(self.net, info["module"])
            if module is not None and any(True for _ in module.parameters()) and module not in blocks:
                blocks.append(module)
        if len(blocks) < 2:
            raise InputError(
                f"backbone {self.name!r} has no stages eoscale can shard one by one; "
                "use DDP or shard it whole"
            )
        return blocks


class VitBackbone(Backbone):
    """A plain vision transformer at the tile size; features are patch-token maps of chosen blocks."""

    def __init__(self, name: str, net: nn.Module, indices: Sequence[int]):
        take = net.prune_intermediate_layers(list(indices), prune_norm=False, prune_head=True)
        reduction = net.feature_info[-1]["reduction"]
        super().__init__(name, net, [net.embed_dim] * len(take), [reduction] * len(take))
        self.indices: list[int] = list(take)

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.net.forward_intermediates(
            x, indices=self.indices, norm=True, output_fmt="NCHW", intermediates_only=True
        )

    def blocks_for_sharding(self) -> list[nn.Module]:
        return list(self.net.blocks)

    def adapt_state_dict(self, state: StateDict) -> StateDict:
        # Weights trained at another image size carry another position-embedding grid: resample it.
        pos = state.get("pos_embed")
        own = self.net.pos_embed
        if pos is not None and own is not None and pos.shape != own.shape:
            prefix = 0 if self.net.no_embed_class else self.net.num_prefix_tokens
            state = dict(state)
            state["pos_embed"] = timm.layers.resample_abs_pos_embed(
                pos, new_size=list(self.net.patch_embed.grid_size), num_prefix_tokens=prefix
            )
        return super().adapt_state_dict(state)


@dataclass
class WeightsReport:
    """What `Backbone.load_weights` loaded, and which keys the file and the model did not share."""

    path: str
    loaded: int
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    def summary(self) -> str:
        def few(keys: list[str]) -> str:
            return ", ".join(keys[:5]) + (f", ... ({len(keys)} in all)" if len(keys) > 5 else "")

        text = f"loaded {self.loaded} tensors from {self.path!r}"
        if self.missing:
            text += f"; missing (left as initialised): {few(self.missing)}"
        if self.unexpected:
            text += f"; unexpected (ignored): {few(self.unexpected)}"
        return text


def create_backbone(
    name: str,
    *,
    in_chans: int,
    img_size: int | None = None,
    out_indices: Sequence[int] | None = None,
    drop_path_rate: float = 0.0,
    weights: str | Path | None = None,
    weights_transform: StateDictTransform | None = None,
    **timm_kwargs,
) -> Backbone:
    """Build the timm model `name` with `in_chans` bands as a `Backbone`, never downloading anything.

    `img_size` is the tile size, required by models built for one input size (ViT, Swin). `out_indices`
    picks the feature levels: timm's feature indices for hierarchical models (default: the last four at
    stride 4 or coarser), block indices for plain ViTs (default: the last block). Other keyword
    arguments go to `timm.create_model` unchanged.
    """
    check_model_name(name)
    kwargs = dict(timm_kwargs, in_chans=in_chans, pretrained=False)
    if drop_path_rate:
        kwargs["drop_path_rate"] = drop_path_rate
    # Build once on the meta device (no memory, no init) to learn what kind of model this is.
    probe = _create(name, dict(kwargs, num_classes=0))
    if "img_size" in inspect.signature(type(probe).__init__).parameters:
        if img_size is None and not kwargs.get("dynamic_img_size"):
            raise InputError(f"backbone {name!r} is built for one input size: give img_size (the tile size)")
        if img_size is not None:
            kwargs["img_size"] = img_size
    reductions = [info["reduction"] for info in probe.feature_info]
    plain = len(set(reductions)) == 1 and hasattr(probe, "forward_intermediates") and hasattr(probe, "blocks")

    if plain:
        net = timm.create_model(name, num_classes=0, **kwargs)
        depth = len(net.blocks)
        indices = [depth - 1] if out_indices is None else [i % depth for i in out_indices]
        backbone: Backbone = VitBackbone(name, net, indices)
    else:
        if out_indices is None:
            coarse = [i for i, r in enumerate(reductions) if r >= 4] or list(range(len(reductions)))
            out_indices = coarse[-4:]
        net = timm.create_model(name, features_only=True, out_indices=tuple(out_indices), **kwargs)
        backbone = FeatureBackbone(name, net, net.feature_info.channels(), net.feature_info.reduction())
    if weights is not None:
        backbone.load_weights(weights, transform=weights_transform)
    return backbone


def check_model_name(name: str) -> None:
    """Fail fast on a name timm does not know, naming the closest ones it does."""
    arch, _tag = timm.models.split_model_name_tag(name)
    if timm.is_model(arch):
        return
    close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
    hint = f"closest timm names: {', '.join(close)}" if close else "see timm.list_models()"
    raise InputError(f"unknown timm backbone {name!r}; {hint}")


def read_state_dict(path: str | Path) -> StateDict:
    """Read a state dict from a local `.safetensors` file or a `torch.save` file (tensors only)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"no weights file at {str(path)!r}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle of arbitrary objects, a truncated file, not a torch file at all
        raise InputError(f"cannot read weights {str(path)!r} as a state dict: {err}".splitlines()[0]) from err


def _create(name: str, kwargs: dict) -> nn.Module:
    try:
        with torch.device("meta"):
            return timm.create_model(name, **kwargs)
    except TypeError as err:  # an option this model family does not take
        raise InputError(f"backbone {name!r} does not accept these options: {err}") from err


def _strip_wrappers(state: Mapping) -> StateDict:
    """Unwrap checkpoint containers and the prefixes of eoscale models, Lightning and DDP."""
    for key in ("state_dict", "model", "module"):
        if key in state and isinstance(state[key], Mapping):
            state = state[key]
    keys = list(state)
    marker = "backbone.net."  # an eoscale model, possibly inside a Lightning module (`model.backbone.net.`)
    if any(marker in k for k in keys):
        return {k.split(marker, 1)[1]: v for k, v in state.items() if marker in k}
    for prefix in ("net.", "module."):
        if keys and all(k.startswith(prefix) for k in keys):
            return {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)


def _match_keys(state: StateDict, model_keys) -> StateDict:
    """Rename keys that differ from the model's only by timm's feature-wrapper flattening (`.` vs `_`)."""
    model_keys = set(model_keys)

    def norm(key: str) -> str:
        return key.replace("_", ".")

    by_norm: dict[str, list[str]] = {}
    for key in model_keys:
        by_norm.setdefault(norm(key), []).append(key)
    out: StateDict = {}
    for key, value in state.items():
        candidates = by_norm.get(norm(key), [])
        out[candidates[0] if key not in model_keys and len(candidates) == 1 else key] = value
    return out


def _get_submodule(net: nn.Module, name: str) -> nn.Module | None:
    for candidate in (name, name.replace(".", "_")):
        try:
            return net.get_submodule(candidate)
        except AttributeError:
            continue
    return None
