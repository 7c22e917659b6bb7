"""`eoscale pretrain`: masked-autoencoder (MAE) self-supervised pretraining of a timm ViT on a store's images.

One machine::

    eoscale pretrain --config configs/mae_pretrain.yaml --data.init_args.store runs/tiles.zarr

Several GPUs, FSDP2, Slurm: as `eoscale fit` (it is `fit` with `MAETask`), e.g.::

    srun --ntasks-per-node 4 --gpus-per-node 4 eoscale pretrain --config configs/mae_pretrain.yaml \\
        --config configs/strategy/fsdp.yaml --trainer.num_nodes 2 --trainer.devices 4

Pipeline parallel (the encoder-decoder cut into one stage a GPU, GPipe or 1F1B over microbatches)::

    eoscale pretrain --config configs/mae_pretrain.yaml --config configs/strategy/pipeline.yaml --trainer.devices 2

The encoder is timm's `VisionTransformer`, built with the store's band count as `in_chans` (a multispectral
patch embedding) and at the tile size; its own `patch_embed`, `pos_embed`, `blocks` and `norm` run on the
visible patch tokens only (He et al. 2022: 75% of patches masked at random, per tile). A light decoder of
timm `Block`s reconstructs the per-patch normalised pixels of every patch; the loss is the mean squared
error on the masked patches only. At the end of fit the encoder is written as `backbone.safetensors` beside
the checkpoints, carrying its band contract in the safetensors metadata (`eoscale.models.foundation`), so
`weights: …/backbone.safetensors` fine-tunes it on any store with some of its bands.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from pathlib import Path
from typing import Any

import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.backbone import VitBackbone, create_backbone
from eoscale.models.foundation import save_backbone
from eoscale.train.task import BaseTask, warmup_cosine

EXPORT_NAME = "backbone.safetensors"


class MaskedAutoencoder(nn.Module):
    """A timm ViT encoder (`backbone.net`) on visible patches and a small transformer decoder for all of them.

    `forward(x)` returns `(loss, pred, mask)`: `pred` (B, N, p·p·C) the reconstructed patches, `mask`
    (B, N) 1 where a patch was hidden. The encoder sits in a `VitBackbone` so FSDP's `shardable_blocks`
    wraps its blocks one by one, as in fine-tuning.
    """

    def __init__(
        self,
        backbone: VitBackbone,
        *,
        mask_ratio: float = 0.75,
        decoder_dim: int = 128,
        decoder_depth: int = 2,
        decoder_heads: int = 4,
        norm_pix_loss: bool = True,
    ) -> None:
        super().__init__()
        if not 0.0 < mask_ratio < 1.0:
            raise InputError(f"mask_ratio={mask_ratio!r}: give a fraction between 0 and 1 (e.g. 0.75)")
        self.backbone = backbone
        net = backbone.net
        self.mask_ratio = mask_ratio
        self.norm_pix_loss = norm_pix_loss
        self.patch = int(net.patch_embed.patch_size[0])
        self.in_chans = int(net.patch_embed.proj.in_channels)
        self.num_patches = int(net.patch_embed.num_patches)
        self.decoder_embed = nn.Linear(net.embed_dim, decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_dim))
        self.decoder_pos_embed = nn.Parameter(torch.zeros(1, self.num_patches, decoder_dim))
        self.decoder_blocks = nn.Sequential(
            *(Block(decoder_dim, decoder_heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(decoder_depth))
        )
        self.decoder_norm = nn.LayerNorm(decoder_dim)
        self.decoder_pred = nn.Linear(decoder_dim, self.patch * self.patch * self.in_chans)
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        nn.init.trunc_normal_(self.decoder_pos_embed, std=0.02)

    def forward(self, x: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        latent, mask, restore = self.encode(x, noise)
        pred = self.decode(latent, restore)
        return self.loss(x, pred, mask), pred, mask

    def embed(self, x: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Patch tokens of a random `1 - mask_ratio` of each tile's patches, with the prefix tokens: the
        encoder blocks' input, the mask (1 hidden) and the order that restores the patches.

        `noise` (B, N): the draw that orders each tile's patches (the lowest stay visible); drawn here when
        left out. Pipeline stages pass one drawn per step (`mask_noise`) so every stage masks alike."""
        net = self.backbone.net
        tokens = net.patch_embed(x)  # (B, N, D)
        prefix = net.num_prefix_tokens
        pos = net.pos_embed
        if net.no_embed_class or pos is None:
            patch_pos, prefix_pos = pos, None
        else:
            patch_pos, prefix_pos = pos[:, prefix:], pos[:, :prefix]
        if patch_pos is not None:
            tokens = tokens + patch_pos
        batch, n, dim = tokens.shape
        keep = self.visible_patches()
        if noise is None:
            noise = torch.rand(batch, n, device=x.device)
        order = noise.to(x.device).argsort(dim=1)  # a random permutation per tile: the first `keep` stay visible
        restore = order.argsort(dim=1)
        visible = torch.gather(tokens, 1, order[:, :keep, None].expand(-1, -1, dim))
        mask = (restore >= keep).float()
        extra = [t for t in (net.cls_token, getattr(net, "reg_token", None)) if t is not None]
        if extra:
            lead = torch.cat([t.expand(batch, -1, -1) for t in extra], dim=1)
            if prefix_pos is not None:
                lead = lead + prefix_pos
            visible = torch.cat([lead, visible], dim=1)
        return net.norm_pre(net.pos_drop(visible)), mask, restore

    def visible_patches(self) -> int:
        return max(1, int(round(self.num_patches * (1 - self.mask_ratio))))

    def encode(self, x: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Encoder on a random `1 - mask_ratio` of each tile's patches; returns tokens, mask, restore order."""
        h, mask, restore = self.embed(x, noise)
        return self.encoded(self.backbone.net.blocks(h)), mask, restore

    def encoded(self, h: Tensor) -> Tensor:
        """The encoder's last norm, prefix tokens dropped."""
        net = self.backbone.net
        return net.norm(h)[:, net.num_prefix_tokens:]

    def decode(self, latent: Tensor, restore: Tensor) -> Tensor:
        return self.reconstruct(self.decoder_blocks(self.unshuffle(latent, restore)))

    def unshuffle(self, latent: Tensor, restore: Tensor) -> Tensor:
        """The decoder's input: visible tokens embedded, mask tokens for the hidden ones, patch order restored."""
        h = self.decoder_embed(latent)
        batch, keep, dim = h.shape
        filler = self.mask_token.expand(batch, restore.shape[1] - keep, -1)
        h = torch.gather(torch.cat([h, filler], dim=1), 1, restore[:, :, None].expand(-1, -1, dim))
        return h + self.decoder_pos_embed

    def reconstruct(self, h: Tensor) -> Tensor:
        return self.decoder_pred(self.decoder_norm(h))

    def patchify(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, N, p·p·C), patches in the patch embedding's row-major order."""
        p = self.patch
        b, c, hh, ww = x.shape
        x = x.reshape(b, c, hh // p, p, ww // p, p)
        return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (hh // p) * (ww // p), p * p * c)

    def loss(self, x: Tensor, pred: Tensor, mask: Tensor) -> Tensor:
        target = self.patchify(x)
        if self.norm_pix_loss:  # per-patch normalised pixels: MAE's better target
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        per_patch = ((pred.float() - target.float()) ** 2).mean(dim=-1)
        return (per_patch * mask).sum() / mask.sum().clamp_min(1)


class MAETask(BaseTask):
    """Masked-autoencoder pretraining of a timm ViT on a tile store's images (use `labels: false`).

    Args:
        backbone: a plain timm ViT name (`vit_small_patch16_224`, ...).
        backbone_kwargs: more options for `timm.create_model` (`patch_size`, `depth`, `embed_dim`, ...).
        mask_ratio: fraction of patches hidden from the encoder.
        decoder_dim, decoder_depth, decoder_heads: the light decoder's width, blocks and heads.
        norm_pix_loss: reconstruct per-patch normalised pixels (True, as MAE) or raw normalised reflectances.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW with linear warm-up and cosine decay.
        export: write `backbone.safetensors` (encoder + band contract) beside the checkpoints at the end of fit.
        init_seed: seed of the initial weights, the same on every rank.
        in_chans, img_size: taken from the datamodule when left out.
    """

    def __init__(
        self,
        backbone: str = "vit_small_patch16_224",
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        mask_ratio: float = 0.75,
        decoder_dim: int = 128,
        decoder_depth: int = 2,
        decoder_heads: int = 4,
        norm_pix_loss: bool = True,
        lr: float = 1.5e-4,
        weight_decay: float = 0.05,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        drop_path_rate: float = 0.0,
        export: bool = True,
        init_seed: int = 0,
        in_chans: int | None = None,
        img_size: int | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < mask_ratio < 1.0:
            raise InputError(f"mask_ratio={mask_ratio!r}: give a fraction between 0 and 1 (e.g. 0.75)")
        self.save_hyperparameters()

    def read_datamodule(self, datamodule: Any) -> None:
        if getattr(datamodule, "labels", False):
            raise InputError("MAE pretraining reads images only: set data.init_args.labels: false")
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.img_size = int(datamodule.tile_size)

    def configure_model(self) -> None:
        # BaseTask's build (contract, same seed on every rank, FSDP2 sharding), without the segmentation metrics
        if self.model is None:
            self.model = self.build_model()
            strategy = self._trainer.strategy if self._trainer is not None else None
            if hasattr(strategy, "cut_stage"):  # pipeline parallel: keep this rank's blocks only
                strategy.cut_stage(self.model)

    def configure_models(self) -> nn.Module:
        h = self.hparams
        for name in ("in_chans", "img_size"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        backbone = create_backbone(
            h.backbone, in_chans=h.in_chans, img_size=h.img_size, drop_path_rate=h.drop_path_rate,
            **(h.get("backbone_kwargs") or {}),
        )
        if not isinstance(backbone, VitBackbone):
            raise InputError(f"MAE pretraining needs a plain ViT backbone, not {h.backbone!r} (e.g. vit_small_patch16_224)")
        patch = backbone.net.patch_embed.patch_size[0]
        if h.img_size % patch:
            raise InputError(f"tile size {h.img_size} is not a multiple of the patch size {patch}: set backbone_kwargs.patch_size")
        return MaskedAutoencoder(
            backbone, mask_ratio=h.mask_ratio, decoder_dim=h.decoder_dim, decoder_depth=h.decoder_depth,
            decoder_heads=h.decoder_heads, norm_pix_loss=h.norm_pix_loss,
        )

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        image = batch["image"]
        noise = self.mask_noise(image, "train", self.global_step)
        if self.pipeline is not None:  # forward and backward of every microbatch, stage by stage
            loss = self.pipeline.step(image, noise)
        else:
            loss, _, _ = self.model(image, noise)
        size = image.shape[0]
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, sync_dist=True, batch_size=size)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False, batch_size=size)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        image = batch["image"]
        noise = self.mask_noise(image, "val", batch_idx)
        loss = self.pipeline.eval(image, noise) if self.pipeline is not None else self.model(image, noise)[0]
        self.log("val_loss", loss, on_epoch=True, sync_dist=True, batch_size=image.shape[0])

    def mask_noise(self, image: Tensor, split: str, index: int) -> Tensor:
        """The draw that orders each tile's patches for masking (`MaskedAutoencoder.embed`), from the seed, the
        split, the step (validation: the batch) and the data-parallel rank: the same on every pipeline stage,
        and the same as one process draws for the same batch, whatever the strategy."""
        sampler = getattr(self._trainer and self._trainer.strategy, "distributed_sampler_kwargs", None) or {}
        key = f"{self.hparams.get('init_seed', 0)}/{split}/{index}/{int(sampler.get('rank', 0))}".encode()
        generator = torch.Generator().manual_seed(int.from_bytes(hashlib.blake2b(key, digest_size=7).digest(), "little"))
        n = self.model.num_patches if self.model is not None else 0
        return torch.rand(image.shape[0], n, generator=generator).to(image.device)

    @property
    def pipeline(self) -> Any:
        """The pipeline stage this rank runs (`eoscale.train.pipeline.PipelineStrategy`), else None."""
        return getattr(self._trainer and self._trainer.strategy, "pipe", None)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        # Lightning zeroes gradients between training_step and backward; a pipeline's step has already done both
        # (its strategy's backward does nothing), so it zeroes them itself before the step
        if self.pipeline is None:
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.hparams
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if p.requires_grad:
                ndim = len(getattr(p, "ds_shape", p.shape))  # a ZeRO-3 parameter is an empty placeholder: ds_shape
                (no_decay if ndim <= 1 or name.endswith(("bias", "token", "pos_embed")) else decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": h.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=h.lr, betas=(0.9, 0.95),
        )
        total = self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 else self.trainer.estimated_stepping_batches
        if not math.isfinite(total):
            raise InputError("the number of training steps is unknown: set trainer.max_steps")
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(h.warmup_steps, int(total), h.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_end(self) -> None:
        if self.hparams.get("export", True):
            export_backbone(self, self.export_path())

    def export_path(self) -> Path:
        """`backbone.safetensors` in the checkpoint folder (the run folder without a checkpoint callback)."""
        callback = self.trainer.checkpoint_callback
        folder = getattr(callback, "dirpath", None) or self.trainer.default_root_dir
        return Path(folder) / EXPORT_NAME


def export_backbone(task: MAETask, path: str | Path) -> Path:
    """Write the task's encoder as a timm-keyed safetensors file with its band contract in the metadata.

    Every rank calls this (gathering FSDP2 shards is a collective); rank 0 writes.
    """
    strategy = task.trainer.strategy
    if hasattr(strategy, "gather_state"):  # pipeline stages: each holds some blocks; rank 0 gets them all
        prefix = "backbone.net."
        state = {k.removeprefix(prefix): v for k, v in strategy.gather_state(task.model.state_dict()).items()
                 if k.startswith(prefix)}
    else:
        state = {}
        for key, value in task.model.backbone.net.state_dict().items():
            if hasattr(value, "full_tensor"):
                value = value.full_tensor()
            state[key] = value
    if not task.trainer.is_global_zero:
        return Path(path)
    h, contract = task.hparams, task.contract
    metadata = {
        "model": h.backbone,
        "model_kwargs": dict(h.get("backbone_kwargs") or {}),
        "patch_size": int(task.model.backbone.net.patch_embed.patch_size[0]),  # MAE's and DINO's models alike
        "img_size": int(h.img_size),
        "in_chans": int(h.in_chans),
        "bands": list(contract.bands) if contract else [],
        "mean": list(contract.mean) if contract else [],
        "std": list(contract.std) if contract else [],
        "steps": int(task.trainer.global_step),
    }
    return save_backbone(state, path, metadata=metadata)


# -- `eoscale pretrain`: `fit` with MAE's checkpoint defaults -------------------------------------------------
PRETRAIN_DEFAULTS = [
    "--checkpoint.monitor", "val_loss", "--checkpoint.mode", "min",
    "--checkpoint.filename", "epoch{epoch:03d}-step{step:06d}-loss{val_loss:.4f}",
]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="LightningCLI arguments (see --help)")
    parser.prefix_chars = "\0"  # let '--config', '--help', ... through to LightningCLI


def run(args: argparse.Namespace) -> int:
    from eoscale.train.cli import main

    # the defaults come first so that --config files and flags after them override them
    main(["fit", *PRETRAIN_DEFAULTS, *args.rest])
    return 0
