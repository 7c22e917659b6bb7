"""`BaseTask`: what every eoscale task shares, made of hooks like TorchGeo's.

`configure_models` builds the network, `configure_losses` the criterion, `configure_metrics` the torchmetrics
collections (cloned per split with `val_` / `test_` prefixes). The base owns the rest: the band contract and the
lineage the monitor writes into every checkpoint, the build on every rank from one seed, the strategy's
preparation of the model (`eoscale.train.strategies.protocol`), gradient clipping, and AdamW with warm-up and
cosine decay (subclasses say which parameters skip weight decay, and AdamW's betas).

What comes from the data (band count, class count, tile size) is read from the datamodule in `configure_model`,
which runs on every rank after the datamodule's `setup`; it is then kept in the hyperparameters so
`load_from_checkpoint` rebuilds the model.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning import LightningModule
from torch import Tensor, nn
from torchmetrics import MetricCollection

from eoscale import __version__
from eoscale.contract import CONTRACT_KEY, LINEAGE_KEY, BandContract
from eoscale.errors import InputError
from eoscale.models.checkpoint import load_finetune_weights
from eoscale.train.callbacks.monitor import run_lineage, store_lineage
from eoscale.train.strategies.protocol import Parallelism
from eoscale.train.strategies.resolve import parallelism


class BaseTask(LightningModule):
    """A LightningModule whose parts come from hooks; subclasses fill them in.

    Subclasses save `lr`, `weight_decay`, `warmup_steps` and `min_lr_ratio` in their hyperparameters (AdamW and
    its schedule read them) and may set `NO_DECAY_SUFFIXES` (parameter names that skip weight decay besides
    every 0-/1-D one) and `BETAS`.
    """

    NO_DECAY_SUFFIXES: tuple[str, ...] = (".bias",)
    BETAS: tuple[float, float] = (0.9, 0.999)  # torch's default
    # the best checkpoint's metric, mode and file name where the config names none (`eoscale fit` reads it)
    CHECKPOINT_MONITOR: tuple[str, str, str] = ("val_miou", "max", "epoch{epoch:03d}-step{step:06d}-miou{val_miou:.4f}")
    # `eoscale fit` stops once that metric has not improved for a while (`eoscale.train.callbacks.early_stopping`)
    EARLY_STOPPING: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.model: nn.Module | None = None
        self.contract: BandContract | None = None
        self._store_lineage: dict | None = None

    def configure_models(self) -> nn.Module:
        raise NotImplementedError

    def configure_losses(self) -> nn.Module:
        raise NotImplementedError

    def configure_metrics(self) -> MetricCollection:
        raise NotImplementedError

    @property
    def parallelism(self) -> Parallelism:
        """The strategy this task runs under, as eoscale's strategy protocol (one process without a trainer)."""
        return parallelism(self._trainer.strategy if self._trainer is not None else None)

    def build_model(self) -> nn.Module:
        """The network of this rank: band contract and datamodule facts read, built from the same seed on
        every rank, starting weights and fine-tune mode applied, and prepared by the strategy (sharded by FSDP2,
        split by tensor parallelism, cut to a pipeline stage)."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None:
            self.contract = BandContract.from_datamodule(datamodule)
            self.read_datamodule(datamodule)
            self._store_lineage = store_lineage(datamodule)
        # same seed on every rank before building: FSDP2's fully_shard keeps each rank's own slice of its own
        # initial weights (it does not broadcast), so ranks seeded differently would train a chimera;
        # under srun/torchrun each process draws its own seed if seed_everything is left to chance.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.hparams.get("init_seed", 0))
            model = self.configure_models()
        if self.hparams.get("finetune_from"):
            load_finetune_weights(model, self.hparams.finetune_from, self.contract)
        model = self.configure_finetune(model)
        if self._trainer is not None:  # before the optimizer exists (Lightning makes it later)
            model = self.parallelism.prepare_model(self, model)
        return model

    def configure_model(self) -> None:
        """Build the network once per rank (Lightning calls this again for `test` after `fit`)."""
        if self.model is None:
            self.model = self.build_model()

    def configure_finetune(self, model: nn.Module) -> nn.Module:
        """Choose what trains (and add adapters) once the starting weights are in; default: everything."""
        return model

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        # the strategy clips by the whole model's norm where Lightning's clipping cannot (several device meshes,
        # parameters spread over pipeline stages)
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and self._trainer is not None and \
                self.parallelism.clip_gradients(self, gradient_clip_val):
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def read_datamodule(self, datamodule: Any) -> None:
        """Take what the model's shape depends on from the datamodule (subclasses extend)."""

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def log_training_loss(self, loss: Tensor, batch_size: int) -> None:
        """The step's loss (and its epoch mean) and learning rate, as every task logs them."""
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, sync_dist=True, batch_size=batch_size)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False, batch_size=batch_size)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.contract is not None:
            checkpoint[CONTRACT_KEY] = self.contract.to_dict()
        # where this model comes from (the MLflow run, the tile store and its scenes), for `eoscale lineage`;
        # plain data, like the contract
        run = run_lineage(self._trainer) if self._trainer is not None else None
        checkpoint[LINEAGE_KEY] = {"run": run, "store": getattr(self, "_store_lineage", None),
                                   "eoscale_version": __version__}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # resuming: the store must be the one the checkpoint was trained on (same bands, statistics, tiles)
        saved = checkpoint.get(CONTRACT_KEY)
        if saved is not None and self.contract is not None:
            BandContract.from_dict(saved).check(self.contract, what="checkpoint")

    # -- optimisation --------------------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        # Lightning calls this after configure_model, so under FSDP the optimizer holds the sharded
        # DTensor parameters; an optimizer made before sharding would update tensors no longer used.
        h = self.hparams
        decay, no_decay = [], []
        strategy = self.parallelism
        for name, p in self.named_parameters():
            if p.requires_grad:
                ndim = len(strategy.parameter_shape(p))  # a ZeRO-3 parameter's own shape, not its placeholder's
                (no_decay if ndim <= 1 or name.endswith(self.NO_DECAY_SUFFIXES) else decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": h.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=h.lr, betas=self.BETAS,
        )
        schedule = warmup_cosine(h.warmup_steps, self._total_steps(), h.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _total_steps(self) -> int:
        if self.trainer.max_steps and self.trainer.max_steps > 0:
            return int(self.trainer.max_steps)
        steps = self.trainer.estimated_stepping_batches
        if not math.isfinite(steps):
            raise InputError("the number of training steps is unknown: set trainer.max_steps")
        return int(steps)


def warmup_cosine(warmup_steps: int, total_steps: int, min_ratio: float = 0.0):
    """The LR factor at step `s`: linear from 0 to 1 over `warmup_steps`, then cosine down to `min_ratio`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(warmup_steps, 1)
        progress = min(1.0, (step - warmup_steps) / max(total_steps - warmup_steps, 1))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
