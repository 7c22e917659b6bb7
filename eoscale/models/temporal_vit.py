"""A temporal vision transformer in the manner of Prithvi-EO-2.0: a stack of dates as tubelets of tokens.

    encoder = TemporalViT(in_chans=6, embed_dim=1024, depth=24, num_heads=16, coords_encoding=("time", "location"))
    load_prithvi_state(encoder, torch.load("Prithvi_EO_V2_300M_TL.pt", weights_only=True))
    tokens = encoder(x, temporal_coords=coords, location_coords=latlon, date_mask=valid)  # x (B, C, T, H, W)

What it computes, after Prithvi-EO-2.0's `prithvi_mae.PrithviViT` (NASA-IMPACT/Prithvi-EO-2.0, Apache-2.0; the
equations below, written for this module): a 3-D patch embedding (`Conv3d` with kernel and stride (t, p, p), a
tubelet of `t` dates, 1 in Prithvi-EO-2.0) gives T/t·H/p·W/p tokens in (time, row, column) order; to each adds a
fixed 3-D sine-cosine position (the channels split 6/16 column, 6/16 row, 4/16 time, each half sines half cosines
of position·10000^(-2i/d)), computed for the input's own grid, so any number of dates and tile size work; the "TL"
variants add a date encoding (sine-cosine of the year on half the channels, of the day of the year on the other
half, times a scale, the same for every token of a date) and a location encoding (of latitude and longitude, the
same for every token); a class token (plus position 0) leads; then timm's ViT blocks and a final LayerNorm.

Missing dates (`date_mask` False: clouds over the whole tile, a date the loader dropped) take no part: their tokens
are masked out as keys of every attention, so no valid token and not the class token ever sees them, and
`TemporalSegmenter` leaves them out of its mean over time. With every date valid the forward is Prithvi's.

`load_prithvi_state` reads the published state-dict layout (`encoder.patch_embed.proj.weight` (D, C, t, p, p),
`encoder.blocks.N.…`, `encoder.temporal_embed_enc.scale`, `encoder.location_embed_enc.scale`, …, decoder keys
ignored) as it is: the temporal patch embedding and the date encodings are kept, not averaged into one date
(`eoscale.models.foundation` does that for single-date backbones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from eoscale.errors import InputError

COORDS = ("time", "location")


def sincos_1d(dim: int, positions: Tensor) -> Tensor:
    """(M, dim): sines then cosines of `positions` (M,) at the frequencies 10000^(-2i/dim), i < dim/2."""
    if dim % 2:
        raise InputError(f"a sine-cosine encoding needs an even number of channels, got {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64, device=positions.device) / (dim / 2.0))
    angles = positions.reshape(-1, 1).to(torch.float64) * omega
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def sincos_3d(dim: int, grid: Sequence[int], device: torch.device | None = None) -> Tensor:
    """(T·H·W, dim) positions of a (time, row, column) token grid: channels 6/16 column, 6/16 row, 4/16 time."""
    if dim % 16:
        raise InputError(f"a 3-D sine-cosine position needs embed_dim divisible by 16, got {dim}")
    t, h, w = grid
    cols = sincos_1d(dim // 16 * 6, torch.arange(w, device=device))
    rows = sincos_1d(dim // 16 * 6, torch.arange(h, device=device))
    times = sincos_1d(dim // 16 * 4, torch.arange(t, device=device))
    cols = cols.repeat(t * h, 1)
    rows = rows.repeat_interleave(w, dim=0).repeat(t, 1)
    times = times.repeat_interleave(h * w, dim=0)
    return torch.cat([cols, rows, times], dim=1).float()


class CoordinateEncoder(nn.Module):
    """Two coordinates (year and day of year; latitude and longitude) as half the channels each, sine-cosine,
    times `scale` (a parameter with `trainable_scale`, starting at 0.1; else a buffer of 1), as Prithvi's
    `TemporalEncoder` and `LocationEncoder`."""

    def __init__(self, embed_dim: int, trainable_scale: bool = False) -> None:
        super().__init__()
        self.first = embed_dim // 2
        self.second = embed_dim - self.first
        if trainable_scale:
            self.scale = nn.Parameter(torch.full((1,), 0.1))
        else:
            self.register_buffer("scale", torch.ones(1))

    def forward(self, coords: Tensor) -> Tensor:
        """(…, 2) coordinates → (…, embed_dim)."""
        shape = coords.shape[:-1]
        a = sincos_1d(self.first, coords[..., 0].flatten()).reshape(*shape, -1)
        b = sincos_1d(self.second, coords[..., 1].flatten()).reshape(*shape, -1)
        return (self.scale * torch.cat([a, b], dim=-1)).to(coords.dtype)


class TubeletEmbed(nn.Module):
    """(B, C, T, H, W) → (B, T/t·H/p·W/p, D) by a `Conv3d` of kernel and stride (t, p, p)."""

    def __init__(self, in_chans: int, embed_dim: int, patch_size: int, tubelet: int = 1) -> None:
        super().__init__()
        self.patch_size = (tubelet, patch_size, patch_size)
        self.proj = nn.Conv3d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class TemporalViT(nn.Module):
    """Prithvi-EO-2.0's encoder (see the module docstring), its parameters under Prithvi's names.

    `forward(x, temporal_coords=(B, T, 2) year and day of year, location_coords=(B, 2) latitude and longitude,
    date_mask=(B, T) bool)` → tokens (B, 1 + T/t·h·w, D), the class token first. `num_frames` is the number of
    dates the weights were made for (kept as a fact; any count of dates runs)."""

    def __init__(self, *, in_chans: int, embed_dim: int = 768, depth: int = 12, num_heads: int = 12,
                 patch_size: int = 16, tubelet: int = 1, num_frames: int = 1, mlp_ratio: float = 4.0,
                 coords_encoding: Sequence[str] = (), coords_scale_learn: bool = False,
                 drop_path_rate: float = 0.0) -> None:
        super().__init__()
        unknown = [c for c in coords_encoding if c not in COORDS]
        if unknown:
            raise InputError(f"coords_encoding {unknown!r}: choose from {', '.join(COORDS)}")
        if "time" in coords_encoding and tubelet != 1:
            raise InputError(f"a date encoding needs tubelets of one date, got tubelet={tubelet}")
        self.in_chans, self.embed_dim, self.num_frames = in_chans, embed_dim, num_frames
        self.patch_embed = TubeletEmbed(in_chans, embed_dim, patch_size, tubelet)
        self.temporal_encoding = "time" in coords_encoding
        self.location_encoding = "location" in coords_encoding
        if self.temporal_encoding:
            self.temporal_embed_enc = CoordinateEncoder(embed_dim, coords_scale_learn)
        if self.location_encoding:
            self.location_embed_enc = CoordinateEncoder(embed_dim, coords_scale_learn)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        norm = partial(nn.LayerNorm, eps=1e-6)
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias=True, norm_layer=norm, drop_path=drop_path_rate * i / max(depth - 1, 1))
            for i in range(depth))
        self.norm = norm(embed_dim)
        self._init_weights()

    def _init_weights(self) -> None:
        w = self.patch_embed.proj.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))  # as a Linear over the tubelet
        nn.init.normal_(self.cls_token, std=0.02)
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def grid(self, x: Tensor) -> tuple[int, int, int]:
        """The token grid (T/t, H/p, W/p) of an input (B, C, T, H, W)."""
        return tuple(s // p for s, p in zip(x.shape[-3:], self.patch_embed.patch_size, strict=True))

    def forward(self, x: Tensor, *, temporal_coords: Tensor | None = None, location_coords: Tensor | None = None,
                date_mask: Tensor | None = None, return_blocks: Sequence[int] = ()) -> Tensor | list[Tensor]:
        """Tokens after the final norm; with `return_blocks`, the tokens after each of those blocks (the last
        normed), for a feature pyramid."""
        grid = self.grid(x)
        tokens = self.patch_embed(x)
        pos = sincos_3d(self.embed_dim, grid, device=x.device).to(tokens.dtype)
        tokens = tokens + pos
        per_frame = grid[1] * grid[2]
        if self.temporal_encoding:
            if temporal_coords is None:
                raise InputError("this temporal ViT encodes dates: give temporal_coords (year, day of year) per date")
            tokens = tokens + self.temporal_embed_enc(temporal_coords.to(tokens.dtype)).repeat_interleave(per_frame, dim=1)
        if self.location_encoding:
            if location_coords is None:
                raise InputError("this temporal ViT encodes locations: give location_coords (latitude, longitude)")
            tokens = tokens + self.location_embed_enc(location_coords.to(tokens.dtype))[:, None]
        # the class token's position is 0 (Prithvi's pos_embed[:, :1] is zeros)
        tokens = torch.cat([self.cls_token.expand(len(tokens), -1, -1), tokens], dim=1)
        attn_mask = None
        if date_mask is not None:
            frames = date_mask.bool()
            if self.patch_embed.patch_size[0] > 1:  # a tubelet counts if any of its dates does
                frames = frames.unflatten(1, (grid[0], -1)).any(dim=2)
            keys = torch.cat([frames.new_ones(len(frames), 1), frames.repeat_interleave(per_frame, dim=1)], dim=1)
            # (B, 1, 1, N) added to the attention logits: every query sees only valid keys (the class token is one)
            attn_mask = torch.zeros(keys.shape, dtype=tokens.dtype, device=tokens.device).masked_fill(~keys, float("-inf"))
            attn_mask = attn_mask[:, None, None, :]
        wanted = [i % len(self.blocks) for i in return_blocks]
        kept: dict[int, Tensor] = {}
        for i, block in enumerate(self.blocks):
            tokens = block(tokens, attn_mask=attn_mask)
            if i in wanted:
                kept[i] = tokens
        tokens = self.norm(tokens)
        if not wanted:
            return tokens
        kept[len(self.blocks) - 1] = tokens  # the last block's, normed (unused unless asked for)
        return [kept[i] for i in wanted]


PRITHVI_PREFIXES = ("encoder.", "model.encoder.", "")


def load_prithvi_state(encoder: TemporalViT, state: Mapping[str, Tensor], *, path: str = "?") -> list[str]:
    """Load a Prithvi-EO-2.0-layout state dict (an MAE's, or its encoder's alone; inside a `model`/`state_dict`
    wrapper or not) into `encoder` with every weight as it is, the temporal patch embedding (D, C, t, p, p)
    included; the decoder, the mask token and the fixed position buffers are left out (positions are computed
    for each input). Returns the keys left out; a missing or misshapen weight is an `InputError` in one line."""
    for wrapper in ("state_dict", "model"):
        if wrapper in state and isinstance(state[wrapper], Mapping):
            state = state[wrapper]
    prefix = next(p for p in PRITHVI_PREFIXES if p == "" or any(k.startswith(p) for k in state))
    ours = encoder.state_dict()
    taken, left = {}, []
    for key, value in state.items():
        name = key[len(prefix):] if key.startswith(prefix) else None
        if name in ours:
            taken[name] = value
        else:
            left.append(key)
    missing = [k for k in ours if k not in taken]
    if missing:
        raise InputError(f"{path!r} is not a Prithvi-EO-2.0 encoder of this shape: it lacks {prefix}{missing[0]} "
                         f"({len(missing)} weights missing); build the TemporalViT with the file's depth and coords_encoding")
    for name, value in taken.items():
        if tuple(value.shape) != tuple(ours[name].shape):
            raise InputError(f"{path!r}: {prefix}{name} has shape {tuple(value.shape)}, the model's is "
                             f"{tuple(ours[name].shape)}: give the file's in_chans, embed_dim, patch size and tubelet")
    encoder.load_state_dict(taken, strict=True)
    return left
