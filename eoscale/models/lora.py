"""Fine-tuning modes and LoRA adapters (through peft) on an eoscale model's backbone.

    model = build_model("vit_small_patch16_224", in_chans=10, num_classes=8, img_size=64, weights="mae.safetensors")
    model = apply_finetune(model, "lora", {"r": 8, "alpha": 16, "targets": ["qkv", "proj"]})
    ... train ...
    save_adapter(model, "runs/lora/adapters/forest", contract=contract)     # megabytes, not the backbone
    load_adapter(fresh_model, "runs/lora", "forest")                        # onto the same base weights
    merge_adapter(fresh_model)                                              # fold into the weights: no overhead

Three modes: `full` trains everything; `linear` freezes the backbone and trains the head (neck and decoder);
`lora` freezes the backbone, adds low-rank adapters to its attention `qkv` / `proj` (optionally the MLP
`fc1` / `fc2`) Linear layers with peft's `inject_adapter_in_model`, and trains the adapters and the head.
The model keeps its structure (`model.backbone.net.blocks...`), so FSDP's `shardable_blocks` still applies.

An adapter folder holds `adapter_model.safetensors` (the LoRA tensors only, keyed as in the model without
the adapter's name, as peft's `save_pretrained` does), `adapter_config.json` (peft's LoRA config),
`head.safetensors` (the head's weights) and `eoscale.json` (the band contract and how to rebuild the model).
Several adapters share one backbone; each is loaded by name from `<root>/adapters/<name>/`.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from torch import Tensor, nn

from eoscale.errors import InputError, InputNotFoundError

Finetune = Literal["full", "linear", "lora"]
# LoRA target names as the config gives them -> the module path inside a timm ViT block
TARGETS = {"qkv": r"attn\.qkv", "proj": r"attn\.proj", "fc1": r"mlp\.fc1", "fc2": r"mlp\.fc2"}
ADAPTERS_DIR = "adapters"
ADAPTER_FILE = "adapter_model.safetensors"
HEAD_FILE = "head.safetensors"
META_FILE = "eoscale.json"


@dataclass(frozen=True)
class LoraSettings:
    """LoRA's knobs: rank `r`, scale `alpha` (updates are scaled by alpha / r), dropout on the adapter's
    input, the layers it targets (`qkv`, `proj`, `fc1`, `fc2`), and the adapter's name."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("qkv", "proj")
    name: str = "default"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> LoraSettings:
        data = dict(data or {})
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise InputError(f"lora option {unknown[0]!r} is not one of {', '.join(cls.__dataclass_fields__)}")
        if "targets" in data:
            targets = data["targets"]
            data["targets"] = (targets,) if isinstance(targets, str) else tuple(targets)
        settings = cls(**data)
        bad = [t for t in settings.targets if t not in TARGETS]
        if bad or not settings.targets:
            raise InputError(f"lora targets={list(settings.targets)!r}: choose from {', '.join(TARGETS)}")
        if not isinstance(settings.r, int) or settings.r < 1:
            raise InputError(f"lora r={settings.r!r}: give a positive whole number")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", settings.name):
            raise InputError(f"lora name={settings.name!r}: use letters, digits, '_' and '-' only")
        return settings

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), targets=list(self.targets))

    def peft_config(self):
        from peft import LoraConfig

        # a regex (peft full-matches it against module paths): `proj` alone would also catch patch_embed.proj
        pattern = rf".*blocks\.\d+\.({'|'.join(TARGETS[t] for t in self.targets)})"
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=pattern, bias="none")


def apply_finetune(model: nn.Module, mode: Finetune, lora: Mapping[str, Any] | LoraSettings | None = None) -> nn.Module:
    """Set which parameters train: `full` all, `linear` the head only, `lora` adapters and head."""
    if mode not in get_args(Finetune):
        raise InputError(f"finetune={mode!r} is not one of {', '.join(map(repr, get_args(Finetune)))}")
    _backbone(model)
    if mode == "lora":
        add_adapter(model, lora if isinstance(lora, LoraSettings) else LoraSettings.from_dict(lora))
    elif lora:
        raise InputError(f"lora options were given with finetune={mode!r}: set finetune: lora")
    for name, p in model.named_parameters():
        in_backbone = name.startswith("backbone.")
        p.requires_grad_(mode == "full" or not in_backbone or (mode == "lora" and "lora_" in name))
    return model


def add_adapter(model: nn.Module, settings: LoraSettings) -> nn.Module:
    """Inject LoRA layers named `settings.name` into the backbone (in place) and make them the active ones."""
    from peft import inject_adapter_in_model

    net = _backbone(model).net
    if settings.name in adapter_names(model):
        raise InputError(f"the model already has an adapter named {settings.name!r}")
    try:
        with warnings.catch_warnings():  # a second adapter on one backbone is what we mean to do
            warnings.filterwarnings("ignore", message="Already found a `peft_config`")
            inject_adapter_in_model(settings.peft_config(), net, adapter_name=settings.name)
    except ValueError as err:  # peft: "Target modules ... not found in the base model"
        raise InputError(
            f"LoRA targets {list(settings.targets)} match no layer of backbone {_backbone(model).name!r}: "
            "LoRA needs a plain ViT (attn.qkv / attn.proj / mlp.fc1 / mlp.fc2)"
        ) from err
    set_active_adapter(model, settings.name)
    return model


def adapter_names(model: nn.Module) -> list[str]:
    names: list[str] = []
    for layer in _lora_layers(model):
        for name in layer.lora_A:
            if name not in names:
                names.append(name)
    return names


def set_active_adapter(model: nn.Module, name: str) -> None:
    """Make adapter `name` the one the backbone runs (and the one that trains)."""
    layers = _lora_layers(model)
    if not layers or name not in adapter_names(model):
        raise InputError(f"no adapter {name!r} in the model; it has {adapter_names(model) or 'none'}")
    for layer in layers:
        layer.set_adapter(name)


def trainable_fraction(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter elements."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


# -- adapter files -----------------------------------------------------------------------------------------
def adapter_state_dict(model: nn.Module, name: str) -> dict[str, Tensor]:
    """The LoRA tensors of adapter `name`, keyed without the adapter's name (peft's saved layout)."""
    marker = f".{name}."
    out = {}
    for key, value in _full_state_dict(model).items():
        if "lora_" in key and marker in key:
            out[key.replace(marker, ".")] = value
    return out


def head_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Everything outside the backbone: the neck and decoder of a segmentation model, a classifier's head."""
    return {k: v for k, v in _full_state_dict(model).items() if not k.startswith("backbone.")}


def save_adapter(
    model: nn.Module,
    folder: str | Path,
    *,
    name: str | None = None,
    contract: Any = None,
    model_args: Mapping[str, Any] | None = None,
    write: bool = True,
) -> Path:
    """Write adapter `name` (default: the active one) and the head into `folder`.

    Under FSDP every rank must call this (gathering sharded tensors is a collective); pass `write` true
    on one rank only. `contract` is a `BandContract` (or its dict); `model_args` how to rebuild the model.
    """
    from safetensors.torch import save_file

    layers = _lora_layers(model)
    if not layers:
        raise InputError("the model has no LoRA adapter to save")
    name = name or layers[0].active_adapters[0]
    lora = adapter_state_dict(model, name)
    head = head_state_dict(model)
    folder = Path(folder)
    if write:
        folder.mkdir(parents=True, exist_ok=True)
        save_file(lora, str(folder / ADAPTER_FILE), metadata={"format": "pt", "adapter": name})
        save_file(head, str(folder / HEAD_FILE), metadata={"format": "pt"})
        config = layers[0]  # rank, alpha and dropout live on every layer; targets in the peft config
        settings = _settings_of(model, name, config)
        settings.peft_config().save_pretrained(str(folder))
        contract_dict = contract.to_dict() if hasattr(contract, "to_dict") else contract
        meta = {"name": name, "lora": settings.to_dict(), "contract": contract_dict, "model": dict(model_args or {})}
        (folder / META_FILE).write_text(json.dumps(meta, indent=1, default=str))
    return folder


def list_adapters(root: str | Path) -> list[str]:
    """The adapter names saved under `<root>/adapters/`."""
    base = Path(root) / ADAPTERS_DIR
    return sorted(p.name for p in base.iterdir() if (p / ADAPTER_FILE).is_file()) if base.is_dir() else []


def read_adapter_meta(root: str | Path, name: str) -> dict[str, Any]:
    return json.loads((_adapter_folder(root, name) / META_FILE).read_text())


def load_adapter(model: nn.Module, root: str | Path, name: str, *, contract: Any = None) -> LoraSettings:
    """Add adapter `name` from `<root>/adapters/<name>/` to `model`, load its head, and make it active.

    `model` must have the backbone the adapter was trained on (same base weights). With `contract` (the
    store's), the adapter's band contract is checked against it.
    """
    from safetensors.torch import load_file

    folder = _adapter_folder(root, name)
    meta = json.loads((folder / META_FILE).read_text())
    if contract is not None and meta.get("contract"):
        # the store's BandContract class reads the saved one (models does not import train)
        type(contract).from_dict(meta["contract"]).check(contract, what=f"adapter {name!r}")
    settings = LoraSettings.from_dict(dict(meta["lora"], name=name))
    if name not in adapter_names(model):
        add_adapter(model, settings)
    marker = f".{name}."
    own = model.state_dict()
    state = {}
    for key, value in load_file(str(folder / ADAPTER_FILE)).items():
        # lora_A.weight -> lora_A.<name>.weight, as the injected layers name them
        full = re.sub(r"\.(lora_[A-Za-z_]+)\.", rf".\1{marker}", key, count=1)
        if full not in own:
            raise InputError(f"adapter {name!r} does not fit this model: no tensor {full!r}")
        state[full] = value
    state.update(load_file(str(folder / HEAD_FILE)))
    misfit = [k for k, v in state.items() if k not in own or tuple(v.shape) != tuple(own[k].shape)]
    if misfit:
        raise InputError(f"adapter {name!r} does not fit this model ({misfit[0]!r} differs)")
    model.load_state_dict(state, strict=False)
    set_active_adapter(model, name)
    return settings


def merge_adapter(model: nn.Module, name: str | None = None) -> nn.Module:
    """Fold adapter `name` (default: the active one) into the backbone's weights and drop every LoRA layer,
    so inference runs the plain timm model (in place; returns `model`)."""
    layers = _lora_layers(model)
    if not layers:
        raise InputError("the model has no LoRA adapter to merge")
    name = name or layers[0].active_adapters[0]
    if name not in adapter_names(model):
        raise InputError(f"no adapter {name!r} in the model; it has {adapter_names(model)}")
    net = _backbone(model).net
    for path, module in list(net.named_modules()):
        if module in layers:
            module.merge(adapter_names=[name])
            parent_path, _, child = path.rpartition(".")
            setattr(net.get_submodule(parent_path) if parent_path else net, child, module.get_base_layer())
    return model


# -- internals ----------------------------------------------------------------------------------------------
def _backbone(model: nn.Module):
    from eoscale.models.backbone import Backbone

    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, Backbone):
        raise InputError(f"cannot fine-tune a {type(model).__name__} by parts: it has no eoscale backbone")
    return backbone


def _lora_layers(model: nn.Module) -> list[nn.Module]:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def _full_state_dict(model: nn.Module) -> dict[str, Tensor]:
    out = {}
    for key, value in model.state_dict().items():
        if hasattr(value, "full_tensor"):  # an FSDP2 shard: gather it (a collective: every rank calls this)
            value = value.full_tensor()
        out[key] = value.detach().cpu().contiguous()
    return out


def _settings_of(model: nn.Module, name: str, layer) -> LoraSettings:
    targets = []
    for path, module in model.named_modules():
        if module in _lora_layers(model) and name in module.lora_A:
            for target, pattern in TARGETS.items():
                if re.search(pattern + "$", path) and target not in targets:
                    targets.append(target)
    dropout = layer.lora_dropout[name]
    return LoraSettings(
        r=int(layer.r[name]),
        alpha=float(layer.lora_alpha[name]),
        dropout=float(getattr(dropout, "p", 0.0)),
        targets=tuple(t for t in TARGETS if t in targets),
        name=name,
    )


def _adapter_folder(root: str | Path, name: str) -> Path:
    folder = Path(root) / ADAPTERS_DIR / name
    if not (folder / ADAPTER_FILE).is_file():
        found = list_adapters(root)
        raise InputNotFoundError(
            f"no adapter {name!r} under {str(Path(root) / ADAPTERS_DIR)!r}; found: {', '.join(found) or 'none'}"
        )
    return folder


__all__ = [
    "Finetune",
    "LoraSettings",
    "adapter_names",
    "adapter_state_dict",
    "add_adapter",
    "apply_finetune",
    "head_state_dict",
    "list_adapters",
    "load_adapter",
    "merge_adapter",
    "save_adapter",
    "set_active_adapter",
    "trainable_fraction",
]
