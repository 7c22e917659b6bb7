"""Foundation-model weights from local files, mapped onto a store's bands by name.

    transform = FoundationWeights("ssl4eo_vits16_mae.pth", bands=store_bands, source="ssl4eo-s12")
    model = build_model("vit_small_patch16_224", in_chans=len(store_bands), num_classes=8, img_size=64,
                        weights="ssl4eo_vits16_mae.pth", weights_transform=transform)
    print(transform.report.summary())

Each named preset is a declared `Preset` record in `PRESETS` (bands, key prefix, temporal patch, timm model,
patch size, mean/std, source): a file given with `source="<preset>"` is read in exactly that layout, and one
that does not match raises an `InputError` naming the preset, what was expected and what was found.
Three layouts are read (nothing downloads):

- a timm-style ViT state dict, as SSL4EO-S12's ViT MAE weights come (`patch_embed.proj.weight` of shape
  (D, 13, p, p) for B01..B12 with B8A and B10); band names from `source="ssl4eo-s12"` or a list;
- an MAE checkpoint whose encoder sits under `encoder.` or `model.encoder.` (inside a `state_dict` or `model`
  wrapper), as Prithvi's come, with a temporal patch embedding (D, C, T, p, p): its T frames are averaged
  into one 2-D filter, and a position embedding over T×h×w tokens is averaged over T;
  the Prithvi presets (`prithvi-eo-1.0-100m`, alias `prithvi`; `prithvi-eo-2.0-300m`, `prithvi-eo-2.0-600m`)
  name their six HLS bands (B02, B03, B04, B8A, B11, B12) and declare each file's key layout;
- eoscale's own backbone export (`eoscale pretrain`): a safetensors file whose metadata carries the band
  contract (bands, wavelengths, normalisation, patch and image size, timm model name) - no `source` needed.

The patch embedding's input channels are then matched to the target bands by name: kept bands are
reordered, extra ones dropped, and target bands the file lacks are filled with the filter of the band
nearest in wavelength (`fill="nearest"`, the default where wavelengths are known) or the mean of the
file's filters (`fill="mean"`). A patch size other than the model's is resampled (timm's
`resample_patch_embed`); position embeddings are resampled to the tile size by `VitBackbone` itself.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from eoscale.bands import normalise_band_name
from eoscale.errors import BandMismatchError, InputError, InputNotFoundError
from eoscale.sensors import SENTINEL2, get_sensor

log = logging.getLogger(__name__)

PATCH_KEY = "patch_embed.proj.weight"
SENSOR_PATCH_PREFIX = "patch_embed.embeds."  # an encoder of several sensors: one patch embedding a sensor
META_KEY = "eoscale"  # safetensors metadata entry of an eoscale backbone export (JSON)
EXPORT_FORMAT = "eoscale-backbone/1"

# Central wavelengths (nm) of the presets' bands, from their sensor's spec (`eoscale.sensors`): every preset names
# Sentinel-2 bands (HLS's are named as Sentinel-2's; SSL4EO-S12 takes all 13 L1C bands), on the reference table (S2A).
WAVELENGTHS: dict[str, float] = get_sensor(SENTINEL2).wavelength_table()

@dataclass(frozen=True)
class Preset:
    """A foundation-weight layout, declared: what the file holds and where, checked when it loads."""

    name: str
    bands: tuple[str, ...]  # the patch embedding's input channels, in order
    key_prefix: str  # the encoder's keys start with this (after a `state_dict`/`model` container)
    temporal_patch: bool  # patch embedding (D, C, T, p, p) rather than (D, C, p, p)
    model: str  # timm architecture name
    patch_size: int
    mean: tuple[float, ...] | None  # per-band normalisation, where the source publishes it
    std: tuple[float, ...] | None
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_HLS = ("B02", "B03", "B04", "B8A", "B11", "B12")  # HLS blue, green, red, narrow NIR, SWIR 1, SWIR 2
_PRITHVI_V2_MEAN = (1087.0, 1342.0, 1433.0, 2734.0, 1958.0, 1363.0)
_PRITHVI_V2_STD = (2248.0, 2179.0, 2178.0, 1850.0, 1242.0, 1049.0)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="ssl4eo-s12",
            bands=("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B10", "B11", "B12"),
            key_prefix="",
            temporal_patch=False,
            model="vit_small_patch16_224",
            patch_size=16,
            mean=None,
            std=None,
            source="SSL4EO-S12 (Wang et al. 2022) ViT MAE: timm-keyed, all 13 Sentinel-2 L1C bands in band order",
        ),
        # Prithvi (IBM/NASA, HLS bands). Layouts and statistics as TerraTorch reads the published files
        # (terratorch/models/backbones/prithvi_vit.py): EO-1.0 keeps the MAE's keys at the top level (encoder and
        # decoder_* side by side), EO-2.0 under "encoder."/"decoder."; patch embeddings (D, 6, 1, p, p) with a
        # tubelet of one frame; fixed 3-D sin-cos position embeddings over num_frames × (224/p)² tokens.
        Preset(
            name="prithvi-eo-1.0-100m",
            bands=_HLS,
            key_prefix="",
            temporal_patch=True,
            model="vit_base_patch16_224",
            patch_size=16,
            mean=(775.2290211032589, 1080.992780391705, 1228.5855250417867,
                  2497.2022620507532, 2204.2139147975554, 1610.8324823273745),
            std=(1281.526139861424, 1270.0297974547493, 1399.4802505642526,
                 1368.3446143747644, 1291.6764008585435, 1154.505683480695),
            source="Prithvi-EO-1.0-100M (Prithvi_EO_V1_100M.pt): ViT-B/16 MAE, keys at the top level, 3 frames",
        ),
        Preset(
            name="prithvi-eo-2.0-300m",
            bands=_HLS,
            key_prefix="encoder.",
            temporal_patch=True,
            model="vit_large_patch16_224",
            patch_size=16,
            mean=_PRITHVI_V2_MEAN,
            std=_PRITHVI_V2_STD,
            source="Prithvi-EO-2.0-300M (Prithvi_EO_V2_300M.pt, also -TL): ViT-L/16 MAE, encoder under 'encoder.'",
        ),
        Preset(
            name="prithvi-eo-2.0-600m",
            bands=_HLS,
            key_prefix="encoder.",
            temporal_patch=True,
            model="vit_huge_patch14_224",
            patch_size=14,
            mean=_PRITHVI_V2_MEAN,
            std=_PRITHVI_V2_STD,
            source="Prithvi-EO-2.0-600M (Prithvi_EO_V2_600M.pt, also -TL): ViT-H/14 MAE, encoder under 'encoder.'",
        ),
    )
}
# Earlier names, kept so configs that use them still load: "prithvi" was the EO-1.0 layout.
PRESET_ALIASES = {"prithvi": "prithvi-eo-1.0-100m"}
# Pretraining-only tensors of an MAE file: never part of the encoder, dropped rather than reported as unexpected.
MAE_ONLY = ("decoder", "mask_token")
PRESET_IMAGE_SIZE = 224  # the image size every preset's position embedding was made for
# Without a preset: the containers and key prefixes a plain, wrapped or eoscale-trained ViT's keys come under.
CONTAINERS = ("state_dict", "model", "module")
GENERIC_PREFIXES = ("model.encoder.", "encoder.", "backbone.net.", "model.backbone.", "backbone.", "module.")
Fill = Literal["nearest", "mean"]


@dataclass
class BandMappingReport:
    """How the file's input channels became the model's: which band came from where."""

    path: str
    format: str
    source: list[str]
    target: list[str]
    copied: list[str] = field(default_factory=list)
    filled: dict[str, str] = field(default_factory=dict)  # target band -> how ("nearest B8A", "mean")
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.format} weights {self.path!r}: {len(self.copied)}/{len(self.target)} bands copied by name"
        if self.filled:
            text += "; filled " + ", ".join(f"{b} ({how})" for b, how in self.filled.items())
        if self.dropped:
            text += f"; dropped {', '.join(self.dropped)}"
        if self.notes:
            text += "; " + "; ".join(self.notes)
        return text


class FoundationWeights:
    """A `weights_transform` for `build_model` / `create_backbone` that maps a foundation file's bands.

    `bands` are the target (the store's) band names in order; `source` the file's band names, a preset
    name (`ssl4eo-s12`, a `prithvi-…` one), or None to read them from an eoscale export's metadata. After loading,
    `report` says what was mapped.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        bands: Sequence[str],
        source: Sequence[str] | str | None = None,
        fill: Fill = "nearest",
    ) -> None:
        if fill not in ("nearest", "mean"):
            raise InputError(f"fill={fill!r} is not one of 'nearest', 'mean'")
        self.path = Path(path)
        self.bands = [str(b) for b in bands]
        self.source = source
        self.preset = get_preset(source) if isinstance(source, str) else None
        self.fill = fill
        self.metadata = read_export_metadata(self.path)
        self.report: BandMappingReport | None = None

    def __call__(self, state: dict[str, Tensor], backbone: Any) -> dict[str, Tensor]:
        if any(k.startswith(SENSOR_PATCH_PREFIX) for k in _unwrap(dict(state))):
            return self._sensor_encoder(_unwrap(dict(state)), backbone)
        if self.source is None and self.metadata is None and PATCH_KEY not in state:
            return state  # nothing says these are foundation weights (a CNN's, an eoscale model's): as they are
        if self.preset is not None:
            state, fmt, notes = preset_state(state, self.preset, path=self.path)
        else:
            state, fmt, notes = encoder_state(state, path=self.path)
        if self.metadata is not None:
            fmt = "eoscale export"
        source = source_bands(self.source, self.metadata, path=self.path)
        if source is None:
            source = _guess_source(state, self.bands, path=self.path)
        patch = state[PATCH_KEY]
        if patch.shape[1] != len(source):
            raise InputError(
                f"weights {str(self.path)!r} have {patch.shape[1]} input channels but {len(source)} band names "
                f"were given ({', '.join(source)})"
            )
        weight, self.report = map_bands(patch, source, self.bands, fill=self.fill)
        self.report.path, self.report.format, self.report.notes = str(self.path), fmt, notes
        own = getattr(getattr(backbone, "net", None), "patch_embed", None)
        if own is not None and tuple(weight.shape[-2:]) != tuple(own.proj.weight.shape[-2:]):
            import timm

            self.report.notes.append(f"patch size {tuple(weight.shape[-2:])} resampled to {tuple(own.proj.weight.shape[-2:])}")
            weight = timm.layers.resample_patch_embed(weight, list(own.proj.weight.shape[-2:]))
        state = dict(state)
        state[PATCH_KEY] = weight
        (log.warning if self.report.filled else log.info)("%s", self.report.summary())
        return state

    def _sensor_encoder(self, state: dict[str, Tensor], backbone: Any) -> dict[str, Tensor]:
        """An encoder of several sensors (one patch embedding a sensor, `eoscale.models.fusion`): loaded as it is, on
        a backbone of the same sensors and bands (`fusion: tokens` on a store of them)."""
        from eoscale.models.fusion import SensorPatchEmbed

        own = getattr(getattr(backbone, "net", None), "patch_embed", None)
        saved = [(s["name"], list(s["bands"])) for s in (self.metadata or {}).get("sensors") or []]
        if not isinstance(own, SensorPatchEmbed) or (saved and saved != [(g.name, list(g.bands)) for g in own.groups]):
            names = ", ".join(f"{n} ({len(b)} bands)" for n, b in saved) or "several sensors"
            raise InputError(f"weights {str(self.path)!r} are an encoder of {names}: fine-tune it with fusion: tokens on "
                             "a store of the same sensors and bands")
        return state


def encoder_state(state: Mapping[str, Tensor], *, path: str | Path = "?") -> tuple[dict[str, Tensor], str, list[str]]:
    """The ViT encoder's tensors, timm-keyed, from a plain, prefixed or temporal (Prithvi) state dict.

    Returns the state, the format's name and notes on what was changed. Raises `InputError` when no
    ViT patch embedding is found (not a format eoscale knows).
    """
    state = dict(state)
    state = _unwrap(state)
    fmt = "timm ViT"
    for prefix in GENERIC_PREFIXES:
        if any(k.startswith(prefix + PATCH_KEY) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            fmt = f"MAE encoder ({prefix!r} prefix)" if "encoder" in prefix else fmt
            break
    if PATCH_KEY not in state:
        raise InputError(
            f"weights {str(path)!r} are not a known format: no ViT patch embedding ({PATCH_KEY}) under any of "
            "'', 'encoder.', 'model.encoder.', 'backbone.'"
        )
    patch = state[PATCH_KEY]
    if patch.ndim not in (4, 5):
        raise InputError(f"weights {str(path)!r}: {PATCH_KEY} has shape {tuple(patch.shape)}, expected 4 or 5 dims")
    if patch.ndim == 5 and fmt.startswith("MAE"):
        fmt = "Prithvi-style MAE encoder"
    state, notes = _flatten_time(state)
    return state, fmt, notes


def preset_state(state: Mapping[str, Tensor], preset: Preset, *, path: str | Path = "?") -> tuple[dict[str, Tensor], str, list[str]]:
    """The ViT encoder's tensors, timm-keyed, read from a file in `preset`'s declared layout.

    Raises `InputError` naming the preset when the keys or the patch embedding's shape differ.
    """
    state = _unwrap(state)
    key = preset.key_prefix + PATCH_KEY
    where = f"weights {str(path)!r} do not match preset {preset.name!r}"
    if key not in state:
        found = [k for k in state if k.endswith(PATCH_KEY)] or sorted(state)[:3]
        raise InputError(f"{where}: expected key {key!r}, found {', '.join(map(repr, found)) or 'no keys'}")
    n = len(preset.key_prefix)
    state = {k[n:]: v for k, v in state.items() if k.startswith(preset.key_prefix) and not k[n:].startswith(MAE_ONLY)}
    patch = state[PATCH_KEY]
    ndim = 5 if preset.temporal_patch else 4
    expected = f"(D, {len(preset.bands)}, {'T, ' if preset.temporal_patch else ''}{preset.patch_size}, {preset.patch_size})"
    if (patch.ndim != ndim or patch.shape[1] != len(preset.bands)
            or tuple(patch.shape[-2:]) != (preset.patch_size, preset.patch_size)):
        raise InputError(f"{where}: expected {PATCH_KEY} of shape {expected}, found {tuple(patch.shape)}")
    fmt = f"{preset.name} preset"
    state, notes = _flatten_time(state, grid=(PRESET_IMAGE_SIZE // preset.patch_size) ** 2)
    return state, fmt, notes


def get_preset(name: str) -> Preset:
    """The declared preset `name`; an `InputError` listing the known ones otherwise."""
    key = name.strip().lower()
    key = PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        raise InputError(f"weights bands preset {name!r} is not one of {', '.join(PRESETS)}; or give a list of band names")
    return PRESETS[key]


def _unwrap(state: Mapping[str, Any]) -> dict[str, Any]:
    state = dict(state)
    for wrapper in CONTAINERS:
        if wrapper in state and isinstance(state[wrapper], Mapping):
            state = dict(state[wrapper])
    return state


def _flatten_time(state: dict[str, Tensor], *, grid: int | None = None) -> tuple[dict[str, Tensor], list[str]]:
    """A temporal patch embedding averaged into one 2-D filter, and its position embedding over time.

    The frames of the position embedding are not the patch's T (Prithvi's tubelet is one frame while its
    embedding covers 3 or 4 frames): they are the embedding's tokens over the `grid` tokens of one frame where
    the layout declares it, else the patch's T.
    """
    notes: list[str] = []
    patch = state[PATCH_KEY]
    if patch.ndim == 5:  # (D, C, T, p, p): a temporal patch embedding (Prithvi); one frame in, so average
        state[PATCH_KEY] = patch.mean(dim=2)
        notes.append(f"temporal patch embedding averaged over {patch.shape[2]} frame(s)")
        pos = state.get("pos_embed")
        tokens = pos.shape[1] - 1 if pos is not None else 0  # after the class token
        frames = tokens // grid if grid and tokens % grid == 0 else _frames_of(tokens, patch.shape[2])
        if pos is not None and frames > 1 and tokens % frames == 0:
            cls, grid = pos[:, :1], pos[:, 1:]
            grid = grid.reshape(pos.shape[0], frames, -1, pos.shape[-1]).mean(dim=1)
            state["pos_embed"] = torch.cat([cls, grid], dim=1)
            notes.append("position embedding averaged over time")
    return state, notes


def _frames_of(tokens: int, patch_frames: int) -> int:
    """The frames of a position embedding of `tokens` tokens (no class token) whose layout is not declared: one
    if they make a square grid, else the fewest frames of a square grid each (3 × 14² for Prithvi EO-1.0), else
    the patch embedding's T."""
    if math.isqrt(tokens) ** 2 == tokens:
        return 1
    for frames in range(2, 17):
        if tokens % frames == 0 and math.isqrt(tokens // frames) ** 2 == tokens // frames:
            return frames
    return patch_frames


def map_bands(
    weight: Tensor, source: Sequence[str], target: Sequence[str], *, fill: Fill = "nearest"
) -> tuple[Tensor, BandMappingReport]:
    """A patch-embedding weight (D, len(source), p, p) as (D, len(target), p, p), matched by band name."""
    src = [normalise_band_name(b) for b in source]
    dst = [normalise_band_name(b) for b in target]
    common = [b for b in dst if b in src]
    if not common:
        raise BandMismatchError(
            f"no band in common between the weights ({', '.join(source)}) and the store ({', '.join(target)}): "
            "give the weights' band names (weights_bands) or use a store with some of them"
        )
    report = BandMappingReport(path="", format="", source=list(source), target=list(target))
    mean = weight[:, [src.index(b) for b in common]].mean(dim=1)
    channels = []
    for name, band in zip(target, dst, strict=True):
        if band in src:
            channels.append(weight[:, src.index(band)])
            report.copied.append(name)
            continue
        nearest = _nearest(band, src) if fill == "nearest" else None
        if nearest is not None:
            channels.append(weight[:, src.index(nearest)])
            report.filled[name] = f"nearest {nearest}"
        else:
            channels.append(mean)
            report.filled[name] = "mean"
    report.dropped = [s for s, b in zip(source, src, strict=True) if b not in dst]
    return torch.stack(channels, dim=1).contiguous(), report


def source_bands(
    source: Sequence[str] | str | None, metadata: Mapping[str, Any] | None, *, path: str | Path = "?"
) -> list[str] | None:
    """The file's band names: a preset's, the ones given, or those in an eoscale export's metadata."""
    if isinstance(source, str):
        return list(get_preset(source).bands)
    if source is not None:
        return [str(b) for b in source]
    if metadata is not None:
        return list(metadata["bands"])
    return None


def read_export_metadata(path: str | Path) -> dict[str, Any] | None:
    """The band contract of an eoscale backbone export (safetensors metadata), or None for other files."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"no weights file at {str(path)!r}")
    if path.suffix != ".safetensors":
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return json.loads(meta[META_KEY]) if META_KEY in meta else None


def save_backbone(state: Mapping[str, Tensor], path: str | Path, *, metadata: Mapping[str, Any]) -> Path:
    """Write a timm-keyed backbone state dict as safetensors, its band contract in the metadata.

    `metadata` holds at least `bands`, `mean`, `std`, `patch_size`, `img_size` and `model` (timm name);
    band wavelengths are added where known.
    """
    from safetensors.torch import save_file

    missing = [k for k in ("bands", "mean", "std", "patch_size", "img_size", "model") if k not in metadata]
    if missing:
        raise ValueError(f"backbone export metadata lacks {missing}")
    meta = dict(metadata, format=EXPORT_FORMAT)
    meta.setdefault("wavelengths", [WAVELENGTHS.get(normalise_band_name(b)) for b in meta["bands"]])
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={META_KEY: json.dumps(meta), "format": "pt"})
    return path


def _nearest(band: str, source: list[str]) -> str | None:
    if band not in WAVELENGTHS:
        return None
    known = [b for b in source if b in WAVELENGTHS]
    return min(known, key=lambda b: abs(WAVELENGTHS[b] - WAVELENGTHS[band])) if known else None


def _guess_source(state: Mapping[str, Tensor], target: list[str], *, path: Path) -> list[str]:
    """Without band names, a file whose channel count equals the store's is taken in the store's order."""
    channels = state[PATCH_KEY].shape[1]
    if channels == len(target):
        return list(target)
    presets = [name for name, p in PRESETS.items() if len(p.bands) == channels]
    hint = f" (perhaps {' or '.join(map(repr, presets))})" if presets else ""
    raise InputError(
        f"weights {str(path)!r} have {channels} input bands and no band names: give weights_bands as a list of "
        f"{channels} names or a preset{hint}"
    )
