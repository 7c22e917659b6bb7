"""Segmentation models of a season: (B, T, C, H, W) stacks of dates to per-pixel class logits (B, K, H, W).

    model = build_temporal_model("utae", in_chans=10, num_classes=8, img_size=64)           # no foundation model
    model = build_temporal_model("temporal_vit", in_chans=6, num_classes=8, img_size=224, embed_dim=1024,
                                 depth=24, num_heads=16, coords_encoding=["time", "location"], weights="prithvi.pt")
    logits = model(image, dates=dates, date_valid=date_valid)   # the loader's batch keys (`TileDataModule`)

Two architectures, both leaving out the dates a tile lacks (`date_valid` 0: clouds over the whole tile, a date
the loader dropped, padding):

- `temporal_vit` (`TemporalSegmenter`): Prithvi-EO-2.0's encoder (`eoscale.models.temporal_vit`; its published
  weights load with their temporal parts intact), the tokens of each block taken averaged over the valid dates
  into one map a block, then the ViTDet pyramid and FPN decoder of the single-date models (`eoscale.models.heads`).
- `utae` (`UTAE`, after Garnot & Landrieu 2021): a timm backbone run on every valid date (the repo's
  `create_backbone`, e.g. resnet18; a masked date is left out of its batch, and of its BatchNorm statistics), L-TAE attention over the dates at its coarsest map (`eoscale.models.ltae`), whose per-head
  weights, upsampled, aggregate every finer map over the dates (missing dates weigh 0 there too), then the FPN
  decoder. With `pixel_mask` (every fit's since issue 47; off for older checkpoints, as they were fitted) a date is
  left out also where it holds nothing at a pixel (every channel 0 after the preparation: a cloud, a step of another
  sensor): in L-TAE at each cell of the coarsest map with no such pixel, and at every skip's pixel (its weights
  renormalised over the dates that hold data there). A tile-level mask alone (U-TAE's published `pad_mask`, for
  sequence padding) attends to a clouded pixel's zeros as an observation of the mean spectrum. With
  `fusion="stems"` and the input's `sensors`, each date's sensors enter the backbone through their own stems,
  averaged over those present at each pixel (`eoscale.models.fusion.SensorStems`). With `presence_channels` and the
  input's `sensors`, each date enters the backbone with one more channel a sensor: 1 where that sensor has data at
  the pixel, 0 where its channels are all 0 (`eoscale.models.fusion.presence`). Without it, an absent sensor's
  channels read 0 after the preparation, which is also that sensor's mean spectrum: on a date of a fused season where
  clouds hide the optical bands and the radar sees, the backbone cannot tell "no optical observation" from "an
  optical observation of the mean" (issue 47; off for older checkpoints, which were fitted without it).

`dates` are days since 1970-01-01 (int64, `eoscale.data.stream.NO_DATE` where unknown): `date_coords` makes
Prithvi's (year, day of year) of them; L-TAE's positions are each date's day of the year (`date_encoding=
"day_of_year"`), the same for a date whatever else a tile holds. Checkpoints written before took the days since each
tile's first valid date (`"first_valid"`, which `eoscale.contract.model_spec` infers for them): a cloudy first date
shifted every position of that tile, and a place's windows at predict disagreed with each other.
A 4-D batch (B, C, H, W) runs as one date.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.backbone import Backbone, create_backbone, read_state_dict
from eoscale.models.fusion import SensorStems, presence, sensor_groups
from eoscale.models.heads import FPNDecoder, SimpleFeaturePyramid
from eoscale.models.ltae import LTAE, grouped_attention
from eoscale.models.temporal_vit import TemporalViT, load_prithvi_state
from eoscale.sensors.groups import SensorGroup, parse_groups

ARCHITECTURES = ("utae", "temporal_vit")
DATE_ENCODINGS = ("day_of_year", "first_valid")  # L-TAE's positions; "first_valid" only for old checkpoints
NO_DATE = torch.iinfo(torch.int64).min  # as `eoscale.data.stream.NO_DATE` (models know no loader)


def _as_stack(image: Tensor, dates: Tensor | None, date_valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(B, T, C, H, W), dates (B, T) and the mask of valid dates (B, T) bool, of a batch of one date or several."""
    if image.ndim == 4:
        image = image[:, None]
    b, t = image.shape[:2]
    if dates is None:
        dates = torch.full((b, t), NO_DATE, dtype=torch.int64, device=image.device)
    mask = torch.ones(b, t, dtype=torch.bool, device=image.device) if date_valid is None else date_valid > 0
    return image, dates, mask


def date_coords(dates: Tensor) -> Tensor:
    """(B, T, 2) float32 (year, day of year from 0) of days since 1970-01-01; unknown dates (0, 0)."""
    known = dates != NO_DATE
    days = torch.where(known, dates, torch.zeros_like(dates))
    # the civil calendar from days (Howard Hinnant's days_from_civil inverted), in integer tensor arithmetic
    z = days + 719468
    era = torch.div(z, 146097, rounding_mode="floor")
    doe = z - era * 146097
    yoe = torch.div(doe - torch.div(doe, 1460, rounding_mode="floor") + torch.div(doe, 36524, rounding_mode="floor")
                    - torch.div(doe, 146096, rounding_mode="floor"), 365, rounding_mode="floor")
    doy_march = doe - (365 * yoe + torch.div(yoe, 4, rounding_mode="floor") - torch.div(yoe, 100, rounding_mode="floor"))
    month_index = torch.div(5 * doy_march + 2, 153, rounding_mode="floor")
    year = yoe + era * 400 + (month_index >= 10).long()
    jan1 = _days_from_civil(year)
    coords = torch.stack([year, days - jan1], dim=-1).float()
    return torch.where(known[..., None], coords, torch.zeros_like(coords))


def _days_from_civil(year: Tensor) -> Tensor:
    """Days since 1970-01-01 of 1 January of `year`."""
    y = year - 1  # January counts in the previous March-based year
    era = torch.div(y, 400, rounding_mode="floor")
    yoe = y - era * 400
    doe = 365 * yoe + torch.div(yoe, 4, rounding_mode="floor") - torch.div(yoe, 100, rounding_mode="floor") + 306
    return era * 146097 + doe - 719468


def day_of_year(dates: Tensor, mask: Tensor) -> Tensor:
    """(B, T) each valid known date's day of the year, from 0 (0 where unknown or masked): L-TAE's positions."""
    known = (dates != NO_DATE) & mask
    return torch.where(known, date_coords(dates)[..., 1].long(), torch.zeros_like(dates))


def season_days(dates: Tensor, mask: Tensor) -> Tensor:
    """(B, T) days since each tile's first valid known date (0 where unknown): L-TAE's positions in checkpoints
    written before `day_of_year` (`date_encoding="first_valid"`)."""
    known = (dates != NO_DATE) & mask
    first = torch.where(known, dates, torch.full_like(dates, torch.iinfo(torch.int64).max)).amin(dim=1, keepdim=True)
    return torch.where(known, dates - first, torch.zeros_like(dates))


class TemporalViTBackbone(Backbone):
    """A `TemporalViT` as an eoscale `Backbone` (`net`), so that freezing it (`finetune: linear`) and FSDP2's
    block-by-block sharding (`shardable_blocks`) find it as they find a timm ViT."""

    def __init__(self, net: TemporalViT) -> None:
        super().__init__("temporal_vit", net, [net.embed_dim], [net.patch_embed.patch_size[-1]])

    def blocks_for_sharding(self) -> list[nn.Module]:
        return list(self.net.blocks)


class TemporalSegmenter(nn.Module):
    """Prithvi-EO-2.0's encoder with a feature pyramid and FPN decoder; see the module docstring."""

    def __init__(self, *, in_chans: int, num_classes: int, embed_dim: int = 192, depth: int = 4, num_heads: int = 3,
                 patch_size: int = 16, tubelet: int = 1, num_frames: int = 1, coords_encoding: Sequence[str] = (),
                 coords_scale_learn: bool = False, out_indices: Sequence[int] | None = None,
                 decoder_channels: int = 128, dropout: float = 0.0, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        encoder = TemporalViT(in_chans=in_chans, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
                                   patch_size=patch_size, tubelet=tubelet, num_frames=num_frames,
                              coords_encoding=coords_encoding, coords_scale_learn=coords_scale_learn,
                              drop_path_rate=drop_path_rate)
        self.backbone = TemporalViTBackbone(encoder)  # `model.backbone.net`: where fine-tuning modes look
        self.out_indices = [depth - 1] if out_indices is None else [i % depth for i in out_indices]
        self.neck = SimpleFeaturePyramid(embed_dim, patch_size, num_inputs=len(self.out_indices))
        self.decoder = FPNDecoder(self.neck.channels, num_classes=num_classes, channels=decoder_channels, dropout=dropout)

    def forward(self, image: Tensor, *, dates: Tensor | None = None, date_valid: Tensor | None = None,
                location: Tensor | None = None) -> Tensor:
        image, dates, mask = _as_stack(image, dates, date_valid)
        x = image.permute(0, 2, 1, 3, 4)  # (B, C, T, H, W), as Prithvi takes it
        encoder = self.backbone.net
        if encoder.location_encoding and location is None:
            location = image.new_zeros(len(image), 2)  # tiles do not carry their latitude and longitude yet
        blocks = encoder(x, temporal_coords=date_coords(dates), location_coords=location, date_mask=mask,
                              return_blocks=self.out_indices)
        t, h, w = encoder.grid(x)
        frames = mask if encoder.patch_embed.patch_size[0] == 1 else mask.unflatten(1, (t, -1)).any(dim=2)
        weight = frames.to(image.dtype)[:, :, None, None, None]  # (B, T', 1, 1, 1): valid dates only
        maps = []
        for tokens in blocks:
            grid = tokens[:, 1:].reshape(len(tokens), t, h, w, -1).permute(0, 1, 4, 2, 3)  # (B, T', D, h, w)
            maps.append((grid * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1))
        logits = self.decoder(self.neck(maps))
        return F.interpolate(logits, size=image.shape[-2:], mode="bilinear", align_corners=False)



class UTAE(nn.Module):
    """A per-date timm backbone, L-TAE over the dates at its coarsest map, attention-weighted skips, an FPN
    decoder; see the module docstring."""

    def __init__(self, *, in_chans: int, num_classes: int, backbone: str = "resnet18", img_size: int | None = None,
                 n_head: int = 16, d_k: int = 4, d_model: int = 256, ltae_dropout: float = 0.2,
                 decoder_channels: int = 128, dropout: float = 0.0, drop_path_rate: float = 0.0,
                 date_encoding: str = "day_of_year", pixel_mask: bool = False, sensors: Sequence[Mapping] | None = None,
                 fusion: str | None = None, fusion_width: int = 32, presence_channels: bool = False,
                 **backbone_kwargs) -> None:
        super().__init__()
        if date_encoding not in DATE_ENCODINGS:
            raise InputError(f"date_encoding={date_encoding!r}: choose one of {', '.join(DATE_ENCODINGS)}")
        if fusion not in (None, "stems"):
            raise InputError(f"fusion={fusion!r}: a U-TAE takes fusion='stems' (one stem a sensor) or none")
        self.positions = day_of_year if date_encoding == "day_of_year" else season_days
        self.pixel_mask = bool(pixel_mask)
        self.stems = None
        if fusion == "stems":
            self.stems = SensorStems(sensor_groups(sensors, in_chans=in_chans, fusion=fusion), width=fusion_width)
        self.presence = _presence_groups(sensors, in_chans) if presence_channels else None
        width = (in_chans if self.stems is None else self.stems.channels) + len(self.presence or ())
        self.backbone = create_backbone(backbone, in_chans=width, img_size=img_size, drop_path_rate=drop_path_rate,
                                        **backbone_kwargs)
        channels = list(self.backbone.channels)
        self.ltae = LTAE(channels[-1], n_head=n_head, d_k=d_k, d_model=d_model, mlp=(d_model, channels[-1]),
                         dropout=ltae_dropout)
        self.decoder = FPNDecoder(channels, num_classes=num_classes, channels=decoder_channels, dropout=dropout)

    def forward(self, image: Tensor, *, dates: Tensor | None = None, date_valid: Tensor | None = None,
                location: Tensor | None = None) -> Tensor:
        image, dates, mask = _as_stack(image, dates, date_valid)
        b, t = image.shape[:2]
        held = image.ne(0).any(dim=2) & mask[:, :, None, None] if self.pixel_mask else None  # (B, T, H, W)
        features = [f.unflatten(0, (b, t)) for f in self._per_date(image.flatten(0, 1), mask.flatten())]
        coarse = features[-1]
        _, _, c, h, w = coarse.shape
        pixels = coarse.permute(0, 3, 4, 1, 2).reshape(b * h * w, t, c)
        per_pixel = lambda a: a[:, None, None].expand(b, h, w, t).reshape(b * h * w, t)  # noqa: E731
        valid = per_pixel(mask) if held is None else _held_at(held, (h, w)).permute(0, 2, 3, 1).reshape(b * h * w, t)
        out, attention = self.ltae(pixels, per_pixel(self.positions(dates, mask)), valid)
        top = out.view(b, h, w, -1).permute(0, 3, 1, 2)
        attention = attention.view(-1, b, h, w, t).permute(0, 1, 4, 2, 3)  # (heads, B, T, h, w)
        maps = []
        for skip in features[:-1]:
            size = skip.shape[-2:]
            weights = F.interpolate(attention.flatten(0, 2)[:, None], size=size, mode="bilinear", align_corners=False)
            weights = weights.view(*attention.shape[:3], *size)
            if held is not None:  # a date that holds nothing at the skip's pixel weighs 0 there, the rest 1 in all
                kept = weights * _held_at(held, size)
                total = kept.sum(dim=2, keepdim=True)
                weights = torch.where(total > 0, kept / total.clamp_min(1e-12), weights)
            if skip.shape[2] % attention.shape[0]:  # channels that do not split among the heads: their mean
                weights = weights.mean(dim=0, keepdim=True)
            maps.append(grouped_attention(skip, weights))
        logits = self.decoder([*maps, top])
        return F.interpolate(logits, size=image.shape[-2:], mode="bilinear", align_corners=False)

    def _per_date(self, images: Tensor, valid: Tensor) -> list[Tensor]:
        """The backbone's maps (B*T, C, h, w) of every date, computed on the valid dates only: a masked date (no
        observation, padding, dropped) takes no part in the batch statistics of the backbone's BatchNorm layers
        (its maps are zeros, which L-TAE and the skips weigh 0)."""
        encode = self._encode
        if images.device.type == "meta" or bool(valid.all()) or not bool(valid.any()):  # (meta: `eoscale plan`)
            return encode(images)
        kept = encode(images[valid])
        out = []
        for f in kept:
            full = f.new_zeros((len(images), *f.shape[1:]))
            full[valid] = f
            out.append(full)
        return out

    def _encode(self, x: Tensor) -> list[Tensor]:
        """The backbone's maps of dates `x` (N, C, H, W): through the sensors' stems if any, with each sensor's
        presence channel after the bands if `presence_channels` (read from `x`, the prepared input)."""
        y = x if self.stems is None else self.stems(x)
        if self.presence is not None:
            y = torch.cat([y, *(presence(x, group) for group in self.presence)], dim=1)
        return self.backbone(y)


def _presence_groups(sensors: Sequence[Mapping] | None, in_chans: int) -> tuple[SensorGroup, ...]:
    """The sensor groups whose presence channels a U-TAE adds (`presence_channels`), checked against `in_chans`."""
    if not sensors:
        raise InputError("presence_channels=True needs the input's sensors ([{name, bands}] in channel order): fit it "
                         "on a store or give sensors")
    bands = [str(b) for entry in sensors for b in entry["bands"]]
    if len(bands) != in_chans:
        raise InputError(f"the sensors list {len(bands)} bands, in_chans={in_chans}: give the store's sensors")
    return parse_groups(sensors, bands)


def _held_at(held: Tensor, size: tuple[int, int]) -> Tensor:
    """(B, T, h, w) float: 1 where a date holds data at any pixel of a cell of the map of `size` (`held`: (B, T, H, W)
    bool, the prepared window's pixels that are not all 0)."""
    return F.adaptive_max_pool2d(held.flatten(0, 1)[:, None].to(torch.float32), size).view(*held.shape[:2], *size)


def build_temporal_model(architecture: str, *, in_chans: int, num_classes: int, img_size: int | None = None,
                         weights: str | Path | None = None, **kwargs) -> nn.Module:
    """A temporal segmentation model of `ARCHITECTURES`; `weights` (temporal_vit only): a local Prithvi-EO-2.0
    state dict (`eoscale.models.temporal_vit.load_prithvi_state`; its bands must be the store's, in order)."""
    if architecture not in ARCHITECTURES:
        raise InputError(f"architecture={architecture!r} is not a temporal model: choose one of {', '.join(ARCHITECTURES)}")
    if architecture == "utae":
        if weights is not None:
            raise InputError("weights= loads Prithvi-EO-2.0 encoders into architecture='temporal_vit', not 'utae'")
        return UTAE(in_chans=in_chans, num_classes=num_classes, img_size=img_size, **kwargs)
    kwargs.pop("backbone", None)
    model = TemporalSegmenter(in_chans=in_chans, num_classes=num_classes, **kwargs)
    if weights is not None:
        load_prithvi_state(model.backbone.net, read_state_dict(weights), path=str(weights))
    return model
