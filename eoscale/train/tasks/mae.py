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
the checkpoints (`eoscale.train.tasks.pretraining`), so `weights: …/backbone.safetensors` fine-tunes it on any
store with some of its bands. The `pretrain` command is `eoscale.train.launch.pretrain`.

On a store of several sensors, `fusion: tokens` gives each sensor its own patch embedding and a sensor embedding
(`eoscale.models.fusion.SensorPatchEmbed`, as `SegmentationTask(fusion="tokens")` builds them), and the loss leaves out
the pixels of a sensor that has no data there (its channels all 0: clouds, radar border noise, sensor dropout), so the
encoder learns to reconstruct each sensor from what the others see. The export carries the sensors; a fine-tune with
`fusion: tokens` on a store of the same sensors loads the per-sensor embeddings as they are.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.models.backbone import VitBackbone
from eoscale.models.fusion import SensorPatchEmbed, embed_sensors, sensor_groups
from eoscale.sensors.groups import as_record
from eoscale.train.tasks.pretraining import PretrainTask


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
        self.in_chans = int(getattr(net.patch_embed, "in_chans", None) or net.patch_embed.proj.in_channels)
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
        embed = self.backbone.net.patch_embed
        if isinstance(embed, SensorPatchEmbed):  # several sensors: only the pixels each sensor saw count
            return self._sensor_loss(target, pred, mask, self.patchify(embed.present(x)))
        if self.norm_pix_loss:  # per-patch normalised pixels: MAE's better target
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        per_patch = ((pred.float() - target.float()) ** 2).mean(dim=-1)
        return (per_patch * mask).sum() / mask.sum().clamp_min(1)

    def _sensor_loss(self, target: Tensor, pred: Tensor, mask: Tensor, seen: Tensor) -> Tensor:
        """The loss of a network of several sensors: a patch's statistics (`norm_pix_loss`) and error over the
        values its sensors saw (`seen`, (B, N, p·p·C) 1 or 0); hidden patches that no sensor saw do not count."""
        target, seen = target.float(), seen.float()
        count = seen.sum(dim=-1, keepdim=True)
        if self.norm_pix_loss:
            mean = (target * seen).sum(dim=-1, keepdim=True) / count.clamp_min(1)
            var = (((target - mean) * seen) ** 2).sum(dim=-1, keepdim=True) / (count - 1).clamp_min(1)
            target = (target - mean) / (var + 1e-6).sqrt()
        per_patch = (((pred.float() - target) ** 2) * seen).sum(dim=-1) / count.squeeze(-1).clamp_min(1)
        counted = mask * (count.squeeze(-1) > 0)
        return (per_patch * counted).sum() / counted.sum().clamp_min(1)


class MAETask(PretrainTask):
    """Masked-autoencoder pretraining of a timm ViT on a tile store's images (use `labels: false`).

    Args:
        backbone: a plain timm ViT name (`vit_small_patch16_224`, ...).
        backbone_kwargs: more options for `timm.create_model` (`patch_size`, `depth`, `embed_dim`, ...).
        mask_ratio: fraction of patches hidden from the encoder.
        decoder_dim, decoder_depth, decoder_heads: the light decoder's width, blocks and heads.
        norm_pix_loss: reconstruct per-patch normalised pixels (True, as MAE) or raw normalised reflectances.
        fusion: `tokens` on a store of several sensors: one patch embedding a sensor (`eoscale.models.fusion`), the
            loss over the pixels each sensor saw; left out, every band through one patch embedding.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW with linear warm-up and cosine decay.
        export: write `backbone.safetensors` (encoder + band contract) beside the checkpoints at the end of fit.
        init_seed: seed of the initial weights, the same on every rank.
        in_chans, img_size, sensors: taken from the datamodule when left out (`sensors` only with `fusion`).
    """

    METHOD = "MAE"

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
        fusion: str | None = None,
        lr: float = 1.5e-4,
        weight_decay: float = 0.05,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        drop_path_rate: float = 0.0,
        export: bool = True,
        init_seed: int = 0,
        in_chans: int | None = None,
        img_size: int | None = None,
        sensors: list[dict] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < mask_ratio < 1.0:
            raise InputError(f"mask_ratio={mask_ratio!r}: give a fraction between 0 and 1 (e.g. 0.75)")
        if fusion not in (None, "tokens"):
            raise InputError(f"fusion={fusion!r}: MAE pretraining of several sensors takes fusion: tokens (one patch "
                             "embedding a sensor), or none")
        self.save_hyperparameters()

    def read_datamodule(self, datamodule: Any) -> None:
        super().read_datamodule(datamodule)
        if self.hparams.get("fusion"):
            self.hparams.sensors = as_record(datamodule.sensor_groups)

    def configure_models(self) -> nn.Module:
        h = self.hparams
        backbone = self.vit_backbone()
        if h.get("fusion"):
            embed_sensors(backbone.net, sensor_groups(h.get("sensors"), in_chans=h.in_chans, fusion=h.fusion))
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
        self.log_training_loss(loss, image.shape[0])
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
        rank = self.parallelism.data_parallel().rank if self._trainer is not None else 0
        key = f"{self.hparams.get('init_seed', 0)}/{split}/{index}/{int(rank)}".encode()
        generator = torch.Generator().manual_seed(int.from_bytes(hashlib.blake2b(key, digest_size=7).digest(), "little"))
        n = self.model.num_patches if self.model is not None else 0
        return torch.rand(image.shape[0], n, generator=generator).to(image.device)

    @property
    def pipeline(self) -> Any:
        """The pipeline stage this rank runs (`eoscale.train.strategies.pipeline.PipelineStrategy`), else None."""
        return self.parallelism.stage_runner() if self._trainer is not None else None

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        # Lightning zeroes gradients between training_step and backward; a pipeline's step has already done both
        # (its strategy's backward does nothing), so it zeroes them itself before the step
        if self.pipeline is None:
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)
