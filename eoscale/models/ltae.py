"""L-TAE: the lightweight temporal attention encoder (Garnot & Landrieu, 2020), with a mask of missing dates.

Each pixel's (or patch's) sequence of per-date features (N, T, d_in) becomes one vector (N, d_out): the features
of each date are normalised and projected to `d_model` channels, the day of the year is added as a sine-cosine
position (period 1000 days, as in the paper), and each of `n_head` heads has one learned query ("master query")
that scores the dates through its keys (a linear map to `d_k` channels a head); each head's softmax over the
dates weighs its own `d_model / n_head` channels of the values (the projected features themselves, split among
the heads, not projected again: what makes it lightweight); the heads' outputs are concatenated and go through
an MLP to `d_out`. The weights are returned too (n_head, N, T): U-TAE uses them at every skip resolution.

Missing dates (mask False) get no weight: their scores are -inf before the softmax (a sequence without a single
valid date weighs all equally, giving the features of its zeros). The input normalisation is per date
(LayerNorm over channels; the paper's GroupNorm spans the dates, through which a missing date would leak), and so
is the MLP's (LayerNorm for the paper's BatchNorm: a tile's coarsest map of 1×1 pixels is a batch of one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def day_of_year_encoding(days: Tensor, dim: int, period: float = 1000.0) -> Tensor:
    """(…, dim) sine-cosine encoding of `days` (…): channel 2i is sin(days / period^(2i/dim)), 2i+1 its cos."""
    i = torch.arange(dim, device=days.device)
    rates = period ** (2 * torch.div(i, 2, rounding_mode="floor") / dim)
    angles = days[..., None].float() / rates
    return torch.where(i % 2 == 0, angles.sin(), angles.cos())


class LTAE(nn.Module):
    """Lightweight temporal attention encoder: `forward(x (N, T, d_in), days (N, T), mask (N, T) bool)` →
    (out (N, d_out), attention (n_head, N, T))."""

    def __init__(self, in_channels: int, *, n_head: int = 16, d_k: int = 4, d_model: int = 256,
                 mlp: Sequence[int] = (256, 128), dropout: float = 0.2, period: float = 1000.0) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} must be a multiple of n_head={n_head}")
        self.n_head, self.d_k, self.d_model, self.period = n_head, d_k, d_model, period
        self.in_norm = nn.LayerNorm(in_channels)
        self.inconv = nn.Linear(in_channels, d_model)
        self.query = nn.Parameter(torch.zeros(n_head, d_k))
        nn.init.normal_(self.query, mean=0, std=math.sqrt(2.0 / d_k))
        self.keys = nn.Linear(d_model, n_head * d_k)
        nn.init.normal_(self.keys.weight, mean=0, std=math.sqrt(2.0 / d_k))
        layers: list[nn.Module] = []
        widths = [d_model, *mlp]
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU()]  # per sequence (the paper: BatchNorm1d)
        self.mlp = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.out_channels = widths[-1]
        self.out_norm = nn.GroupNorm(n_head if self.out_channels % n_head == 0 else 1, self.out_channels)

    def forward(self, x: Tensor, days: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        n, steps, _ = x.shape
        v = self.inconv(self.in_norm(x))  # (N, T, d_model)
        if days is not None:
            v = v + day_of_year_encoding(days, self.d_model, self.period).to(v.dtype)
        k = self.keys(v).view(n, steps, self.n_head, self.d_k)  # (N, T, heads, d_k)
        scores = torch.einsum("nthd,hd->hnt", k, self.query.to(k.dtype)) / math.sqrt(self.d_k)
        if mask is not None:
            mask = mask.bool()
            scores = scores.masked_fill(~mask[None], float("-inf"))
            none = ~mask.any(dim=1)  # no valid date: every date alike
            scores = torch.where(none[None, :, None], torch.zeros_like(scores), scores)
        attention = scores.softmax(dim=-1)  # (heads, N, T)
        values = v.view(n, steps, self.n_head, self.d_model // self.n_head)
        out = torch.einsum("hnt,nthc->nhc", self.dropout(attention), values).reshape(n, self.d_model)
        out = self.out_norm(self.dropout(self.mlp(out)))
        return out, attention


def grouped_attention(features: Tensor, attention: Tensor) -> Tensor:
    """U-TAE's temporal aggregation of a skip: `features` (B, T, C, H, W) weighed by `attention` (heads, B, T, H,
    W) (at the skip's resolution), the channels split into one group a head, each group by its own head's weights
    → (B, C, H, W)."""
    heads = attention.shape[0]
    b, t, c, h, w = features.shape
    groups = features.view(b, t, heads, c // heads, h, w)
    return torch.einsum("gbthw,btgchw->bgchw", attention, groups).reshape(b, c, h, w)
