"""`TemporalMAETask`: masked-autoencoder pretraining of the temporal ViT (`eoscale.models.temporal_vit`) on a season.

    eoscale pretrain --config configs/temporal_mae_pretrain.yaml --data.init_args.store runs/season/tiles.zarr

The encoder is the `TemporalViT` that `configs/temporal_prithvi.yaml` fine-tunes: its 3-D patch embedding cuts a
stack (B, T, C, H, W) into tubelets of `tubelet` dates × `patch_size`² pixels, T/t·h·w tokens in (time, row,
column) order, with the fixed 3-D positions and the date encoding added. A share `mask_ratio` of the tokens is
hidden from the encoder:

- `masking: tube` (the default): the same spatial patches are hidden on every date, whole tubes through time, so a
  hidden patch cannot be copied from the same place on another date (as VideoMAE's tube masking);
- `masking: random`: tokens are hidden one by one over the whole (time, row, column) grid, as Prithvi-EO-2.0's
  MAE draws them.

Dates without observations (`date_valid` 0) take no part as attention keys in the encoder or the decoder, as in
fine-tuning. A light decoder of timm `Block`s (3-D sine-cosine positions and its own date encoding) reconstructs
every token's pixels; the loss is the mean squared error on the hidden tokens of valid dates only, and within a
token on the pixels with data only (the loader sets a pixel without data to 0 in every band: such pixels count
neither in the error nor in the per-token mean and variance of `norm_pix_loss`).

At the end of fit the encoder goes to `backbone.safetensors` beside the checkpoints, under the `TemporalViT`'s own
parameter names with its band contract and shape in the metadata, so `model.init_args.weights:` of
`configs/temporal_prithvi.yaml` (the same `backbone_kwargs`) loads it as it is, the temporal patch embedding
(D, C, t, p, p) and the date encoding included (`eoscale.models.temporal_vit.load_prithvi_state`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.foundation import save_backbone
from eoscale.models.temporal import TemporalViTBackbone, date_coords
from eoscale.models.temporal_vit import CoordinateEncoder, TemporalViT, sincos_3d
from eoscale.train.tasks.pretraining import PretrainTask, export_fields

MASKINGS = ("tube", "random")
# the segmentation model's own options, accepted in backbone_kwargs so that both configs can share one dict
SEGMENTER_ONLY = ("out_indices",)


class TemporalMaskedAutoencoder(nn.Module):
    """A `TemporalViT` encoder on the visible tokens of a stack and a small transformer decoder for all of them.

    `forward(image (B, T, C, H, W), dates (B, T), date_valid (B, T), noise)` returns `(loss, pred, mask)`: `pred`
    (B, N, t·p·p·C) every token's reconstructed pixels, `mask` (B, N) 1 where a token was hidden; N = T/t·h·w.
    """

    def __init__(self, backbone: TemporalViTBackbone, *, mask_ratio: float = 0.75, masking: str = "tube",
                 decoder_dim: int = 128, decoder_depth: int = 2, decoder_heads: int = 4,
                 norm_pix_loss: bool = True) -> None:
        super().__init__()
        if not 0.0 < mask_ratio < 1.0:
            raise InputError(f"mask_ratio={mask_ratio!r}: give a fraction between 0 and 1 (e.g. 0.75)")
        if masking not in MASKINGS:
            raise InputError(f"masking={masking!r}: choose 'tube' (the same patches hidden on every date) or 'random'")
        if decoder_dim % 16:
            raise InputError(f"decoder_dim={decoder_dim} must be divisible by 16 (3-D sine-cosine positions)")
        self.backbone = backbone
        net: TemporalViT = backbone.net
        self.mask_ratio, self.masking, self.norm_pix_loss = mask_ratio, masking, norm_pix_loss
        self.tubelet, self.patch = net.patch_embed.patch_size[0], net.patch_embed.patch_size[1]
        self.in_chans, self.decoder_dim = net.in_chans, decoder_dim
        self.decoder_embed = nn.Linear(net.embed_dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        if net.temporal_encoding:
            self.decoder_temporal = CoordinateEncoder(decoder_dim, trainable_scale=True)
        self.decoder_blocks = nn.ModuleList(
            Block(decoder_dim, decoder_heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(decoder_depth))
        self.decoder_norm = nn.LayerNorm(decoder_dim)
        self.decoder_pred = nn.Linear(decoder_dim, self.tubelet * self.patch * self.patch * self.in_chans)
        nn.init.trunc_normal_(self.mask_token, std=0.02)

    # -- the token grid and the mask -------------------------------------------------------------------------
    def grid(self, image: Tensor) -> tuple[int, int, int]:
        """(T/t, h, w) of a stack (B, T, C, H, W)."""
        t, _, hh, ww = image.shape[-4:]
        if t % self.tubelet or hh % self.patch or ww % self.patch:
            raise InputError(f"a stack of {t} dates of {hh}×{ww} px does not split into tubelets of {self.tubelet} "
                             f"date(s) × {self.patch}×{self.patch} px: set max_dates, the tile size or patch_size")
        return t // self.tubelet, hh // self.patch, ww // self.patch

    def noise_shape(self, image: Tensor) -> tuple[int, int]:
        """The draw that orders the tokens for masking: one number a spatial patch (tube) or a token (random)."""
        t, h, w = self.grid(image)
        return image.shape[0], h * w * (1 if self.masking == "tube" else t)

    def draw_mask(self, image: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
        """`order` (B, N) of the token indices, the visible ones first, `mask` (B, N) 1 where hidden, and the count
        of visible tokens; the lowest `noise` values stay visible (a patch's whole tube with `masking: tube`)."""
        t, h, w = self.grid(image)
        if noise is None:
            noise = torch.rand(self.noise_shape(image), device=image.device)
        noise = noise.to(image.device)
        if self.masking == "tube":  # the same draw for every date: a spatial patch is hidden on all of them
            noise = noise[:, None, :].expand(-1, t, -1).reshape(len(noise), -1)
        n = t * h * w
        keep = max(1, int(round(n * (1 - self.mask_ratio))))
        if self.masking == "tube":  # whole tubes: a multiple of the dates
            keep = t * max(1, int(round(h * w * (1 - self.mask_ratio))))
        # ties (a tube's dates) broken by the token index: stable sorting keeps time order within a tube
        order = noise.argsort(dim=1, stable=True)
        mask = torch.ones_like(noise)
        mask.scatter_(1, order[:, :keep], 0.0)
        return order, mask, keep

    # -- encoder and decoder ---------------------------------------------------------------------------------
    def forward(self, image: Tensor, dates: Tensor | None = None, date_valid: Tensor | None = None,
                noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        b, t = image.shape[:2]
        valid = torch.ones(b, t, dtype=torch.bool, device=image.device) if date_valid is None else date_valid > 0
        coords = date_coords(dates) if dates is not None else image.new_zeros(b, t, 2)
        order, mask, keep = self.draw_mask(image, noise)
        frames = self.frame_valid(valid)  # (B, T/t)
        latent = self.encode(image, coords, frames, order[:, :keep])
        pred = self.decode(latent, order, keep, coords, frames, self.grid(image))
        return self.loss(image, pred, mask, frames), pred, mask

    def frame_valid(self, valid: Tensor) -> Tensor:
        """(B, T/t) bool: a tubelet counts if any of its dates does (as `TemporalViT`)."""
        return valid if self.tubelet == 1 else valid.unflatten(1, (-1, self.tubelet)).any(dim=2)

    def encode(self, image: Tensor, coords: Tensor, frames: Tensor, visible: Tensor) -> Tensor:
        """The encoder on the `visible` tokens (B, K) (a class token first); returns their normed tokens (B, K, D)."""
        net: TemporalViT = self.backbone.net
        x = image.permute(0, 2, 1, 3, 4)  # (B, C, T, H, W), as TemporalViT takes it
        grid = net.grid(x)
        per_frame = grid[1] * grid[2]
        tokens = net.patch_embed(x) + sincos_3d(net.embed_dim, grid, device=x.device).to(x.dtype)
        if net.temporal_encoding:
            tokens = tokens + net.temporal_embed_enc(coords[:, :: self.tubelet].to(x.dtype)).repeat_interleave(per_frame, dim=1)
        if net.location_encoding:  # tiles carry no latitude and longitude yet: (0, 0), as in fine-tuning
            tokens = tokens + net.location_embed_enc(x.new_zeros(len(x), 2))[:, None]
        b, _, dim = tokens.shape
        tokens = torch.gather(tokens, 1, visible[:, :, None].expand(-1, -1, dim))
        tokens = torch.cat([net.cls_token.expand(b, -1, -1), tokens], dim=1)
        token_valid = frames.repeat_interleave(per_frame, dim=1).gather(1, visible)
        attn_mask = _key_mask(torch.cat([token_valid.new_ones(b, 1), token_valid], dim=1), tokens.dtype)
        for block in net.blocks:
            tokens = block(tokens, attn_mask=attn_mask)
        return net.norm(tokens)[:, 1:]

    def decode(self, latent: Tensor, order: Tensor, keep: int, coords: Tensor, frames: Tensor,
               grid: tuple[int, int, int]) -> Tensor:
        """Every token's pixels: visible tokens embedded, mask tokens for the hidden ones, in grid order."""
        h = self.decoder_embed(latent)
        b, _, dim = h.shape
        n = order.shape[1]
        full = self.mask_token.to(h.dtype).expand(b, n, dim).clone()
        full = full.scatter(1, order[:, :keep, None].expand(-1, -1, dim), h)
        full = full + sincos_3d(dim, grid, device=h.device).to(h.dtype)
        per_frame = grid[1] * grid[2]
        if hasattr(self, "decoder_temporal"):
            full = full + self.decoder_temporal(coords[:, :: self.tubelet].to(h.dtype)).repeat_interleave(per_frame, dim=1)
        attn_mask = _key_mask(frames.repeat_interleave(per_frame, dim=1), h.dtype)
        for block in self.decoder_blocks:
            full = block(full, attn_mask=attn_mask)
        return self.decoder_pred(self.decoder_norm(full))

    # -- target and loss -------------------------------------------------------------------------------------
    def patchify(self, image: Tensor) -> Tensor:
        """(B, T, C, H, W) → (B, N, t·p·p·C), tokens in the patch embedding's (time, row, column) order."""
        b, t, c, hh, ww = image.shape
        k, p = self.tubelet, self.patch
        x = image.reshape(b, t // k, k, c, hh // p, p, ww // p, p)
        x = x.permute(0, 1, 4, 6, 2, 5, 7, 3)  # (B, T', h, w, t, p, p, C)
        return x.reshape(b, (t // k) * (hh // p) * (ww // p), k * p * p * c)

    def loss(self, image: Tensor, pred: Tensor, mask: Tensor, frames: Tensor) -> Tensor:
        """Mean squared error over the hidden tokens of valid dates, within a token over the pixels with data."""
        target = self.patchify(image).float()
        has_data = (image != 0).any(dim=2, keepdim=True).expand_as(image)  # a pixel without data is 0 in every band
        data = self.patchify(has_data.to(target.dtype))
        count = data.sum(dim=-1, keepdim=True)
        if self.norm_pix_loss:  # per-token normalised pixels (MAE's better target), over the pixels with data
            mean = (target * data).sum(dim=-1, keepdim=True) / count.clamp_min(1)
            var = (((target - mean) * data) ** 2).sum(dim=-1, keepdim=True) / (count - 1).clamp_min(1)
            target = (target - mean) / (var + 1e-6).sqrt()
        per_token = (((pred.float() - target) ** 2) * data).sum(dim=-1) / count.squeeze(-1).clamp_min(1)
        per_frame = mask.shape[1] // frames.shape[1]
        weight = mask * frames.repeat_interleave(per_frame, dim=1).to(mask.dtype) * (count.squeeze(-1) > 0).to(mask.dtype)
        return (per_token * weight).sum() / weight.sum().clamp_min(1)


def _key_mask(keys: Tensor, dtype: torch.dtype) -> Tensor:
    """(B, 1, 1, N) added to attention logits: tokens of dates without observations are no query's keys (a tile
    without a single valid date keeps them all, so that no softmax is over nothing; none of its tokens counts)."""
    keys = keys.bool() | ~keys.bool().any(dim=1, keepdim=True)
    return torch.zeros(keys.shape, dtype=dtype, device=keys.device).masked_fill(~keys, float("-inf"))[:, None, None]


class TemporalMAETask(PretrainTask):
    """MAE pretraining of the temporal ViT on a store of several dates a tile (use `labels: false`).

    Args:
        backbone_kwargs: the `TemporalViT`'s shape (`embed_dim`, `depth`, `num_heads`, `patch_size`, `tubelet`,
            `coords_encoding`, `coords_scale_learn`, `mlp_ratio`): the fine-tuning config's (its `out_indices` is
            accepted and left to fine-tuning).
        masking: "tube" (the same patches hidden on every date, the default) or "random" (tokens one by one).
        mask_ratio: fraction of the tokens (of the patches, with tubes) hidden from the encoder.
        decoder_dim, decoder_depth, decoder_heads: the light decoder's width, blocks and heads.
        norm_pix_loss: reconstruct per-token normalised pixels (True, as MAE) or the normalised reflectances.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW with linear warm-up and cosine decay.
        export: write `backbone.safetensors` beside the checkpoints at the end of fit.
        init_seed: seed of the initial weights and of the masks, the same on every rank.
        in_chans, img_size, time_steps: taken from the datamodule when left out.
    """

    METHOD = "temporal MAE"

    def __init__(self, backbone: str = "temporal_vit", *, backbone_kwargs: dict[str, Any] | None = None,
                 masking: Literal["tube", "random"] = "tube", mask_ratio: float = 0.75, decoder_dim: int = 128,
                 decoder_depth: int = 2, decoder_heads: int = 4, norm_pix_loss: bool = True, lr: float = 1.5e-4,
                 weight_decay: float = 0.05, warmup_steps: int = 100, min_lr_ratio: float = 0.0,
                 drop_path_rate: float = 0.0, export: bool = True, init_seed: int = 0, in_chans: int | None = None,
                 img_size: int | None = None, time_steps: int | None = None) -> None:
        super().__init__()
        if backbone != "temporal_vit":
            raise InputError(f"backbone={backbone!r}: temporal MAE pretraining trains the temporal ViT only "
                             "(backbone: temporal_vit, its shape in backbone_kwargs)")
        if not 0.0 < mask_ratio < 1.0:
            raise InputError(f"mask_ratio={mask_ratio!r}: give a fraction between 0 and 1 (e.g. 0.75)")
        if masking not in MASKINGS:
            raise InputError(f"masking={masking!r}: choose 'tube' (the same patches hidden on every date) or 'random'")
        self.save_hyperparameters()

    def read_datamodule(self, datamodule: Any) -> None:
        if getattr(datamodule, "labels", False):
            raise InputError(f"{self.METHOD} pretraining reads images only: set data.init_args.labels: false")
        steps = int(getattr(datamodule, "time_steps", 1) or 1)
        if steps < 2:
            raise InputError(f"tile store {str(datamodule.store)!r} holds one date a tile (or date_step picks one): "
                             "temporal MAE pretraining needs a season store; for one date use configs/mae_pretrain.yaml")
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.img_size = int(datamodule.tile_size)
        self.hparams.time_steps = steps

    def encoder_kwargs(self) -> dict[str, Any]:
        kwargs = {k: v for k, v in (self.hparams.get("backbone_kwargs") or {}).items() if k not in SEGMENTER_ONLY}
        kwargs.setdefault("num_frames", int(self.hparams.get("time_steps") or 1))
        return kwargs

    def configure_models(self) -> nn.Module:
        h = self.hparams
        for name in ("in_chans", "img_size"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        try:
            encoder = TemporalViT(in_chans=h.in_chans, drop_path_rate=h.drop_path_rate, **self.encoder_kwargs())
        except TypeError as err:  # an option the temporal ViT does not take
            raise InputError(f"backbone_kwargs: the temporal ViT does not accept these options: {err}") from err
        patch = encoder.patch_embed.patch_size[1]
        if h.img_size % patch:
            raise InputError(f"tile size {h.img_size} is not a multiple of the patch size {patch}: set backbone_kwargs.patch_size")
        return TemporalMaskedAutoencoder(
            TemporalViTBackbone(encoder), mask_ratio=h.mask_ratio, masking=h.masking, decoder_dim=h.decoder_dim,
            decoder_depth=h.decoder_depth, decoder_heads=h.decoder_heads, norm_pix_loss=h.norm_pix_loss)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        image = batch["image"]
        noise = self.mask_noise(image, "train", self.global_step)
        loss, _, _ = self.model(image, batch.get("dates"), batch.get("date_valid"), noise)
        self.log_training_loss(loss, image.shape[0])
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        image = batch["image"]
        noise = self.mask_noise(image, "val", batch_idx)
        loss = self.model(image, batch.get("dates"), batch.get("date_valid"), noise)[0]
        self.log("val_loss", loss, on_epoch=True, sync_dist=True, batch_size=image.shape[0])

    def mask_noise(self, image: Tensor, split: str, index: int) -> Tensor:
        """The draw that orders the tokens for masking, from the seed, the split, the step (validation: the
        batch) and the data-parallel rank: the same as one process draws for the same batch, whatever the strategy."""
        rank = self.parallelism.data_parallel().rank if self._trainer is not None else 0
        key = f"{self.hparams.get('init_seed', 0)}/{split}/{index}/{int(rank)}".encode()
        generator = torch.Generator().manual_seed(int.from_bytes(hashlib.blake2b(key, digest_size=7).digest(), "little"))
        return torch.rand(self.model.noise_shape(image), generator=generator).to(image.device)

    def on_fit_end(self) -> None:
        if self.hparams.get("export", True):
            export_temporal_backbone(self, self.export_path())


def export_temporal_backbone(task: TemporalMAETask, path) -> Any:
    """Write the task's `TemporalViT` under its own parameter names (what `load_prithvi_state` reads) with its
    band contract and shape in the metadata. Every rank calls this (gathering FSDP2 shards is a collective)."""
    net: TemporalViT = task.model.backbone.net
    state = task.parallelism.full_state(net)
    if not task.trainer.is_global_zero:
        return path
    h = task.hparams
    metadata = {
        "model": "temporal_vit",
        "model_kwargs": task.encoder_kwargs(),
        "patch_size": int(net.patch_embed.patch_size[1]),
        "tubelet": int(net.patch_embed.patch_size[0]),
        "time_steps": int(h.time_steps or 1),
        **export_fields(task),
    }
    return save_backbone(state, path, metadata=metadata)
