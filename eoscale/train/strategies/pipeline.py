"""Pipeline parallelism for MAE pretraining: the encoder-decoder cut at block boundaries, one stage a rank.

    eoscale pretrain --config configs/mae_vit_h14_pretrain.yaml --config configs/strategy/pipeline.yaml \\
        --trainer.devices 4

The MAE's blocks (encoder, then decoder) are split into as many contiguous runs as there are ranks, the
heaviest run's parameters as few as they can be (`stage_bounds`); stage 0 also holds the patch embedding and the masking, the stage of the first decoder
block the encoder's norm and the decoder's embedding, the last stage the reconstruction and the loss. Each rank
keeps only its stage's parameters and optimizer state. Every step splits the batch into `microbatches` and runs
them through the stages with torch.distributed.pipelining's `ScheduleGPipe` (every forward, then every
backward) or `Schedule1F1B` (one forward, one backward: fewer microbatches' activations held at once). The
ranks are stages, not data-parallel replicas: all of them read the same batches (`distributed_sampler_kwargs`),
and the loss, the gradients and the update equal one process's on the same batches (the masking draw comes
from the seed and the step, `MAETask.mask_noise`, not from each rank's random state).

Checkpoints are plain files: rank 0 gathers every stage's parameters under the whole model's names, and each
stage's optimizer state in a list, so the file resumes at the same number of stages; the exported backbone
is the whole encoder (`eoscale.train.tasks.mae.export_backbone`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.utils._pytree import tree_map

from eoscale.errors import InputError
from eoscale.train.strategies.protocol import DataParallel, PlainParallelism

Schedule = Literal["gpipe", "1f1b"]
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
STAGE_KEY = "pipeline_stages"  # a checkpoint's optimizer state: one entry per stage


def stage_bounds(sizes: list[int] | tuple[int, ...], stages: int) -> list[int]:
    """Where each stage's run of blocks starts, and the end: contiguous runs of the blocks (`sizes`: each one's
    parameter elements, with what its stage holds beside it) whose heaviest run is as light as it can be (an
    MAE's decoder blocks are a fraction of its encoder's: equal counts would leave the first stages full)."""
    n = len(sizes)
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    # best[s][i]: the lightest heaviest run of blocks[:i] in s runs; cut[s][i]: where its last run starts
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for s in range(1, stages + 1):
        for i in range(s, n - (stages - s) + 1):
            for j in range(s - 1, i):
                cost = max(best[s - 1][j], prefix[i] - prefix[j])
                if cost < best[s][i]:
                    best[s][i], cut[s][i] = cost, j
    bounds, i = [n], n
    for s in range(stages, 0, -1):
        i = cut[s][i]
        bounds.append(i)
    return bounds[::-1]


def check_stages(encoder: int, decoder: int, stages: int) -> None:
    if stages > encoder + decoder:
        raise InputError(f"{stages} pipeline stages for {encoder + decoder} blocks ({encoder} encoder + {decoder} "
                         f"decoder): use at most {encoder + decoder} ranks (trainer.devices × num_nodes) or more blocks")


def check_microbatches(microbatches: int, batch: int | None, stages: int | None, schedule: str) -> None:
    if batch is not None and batch % microbatches:
        raise InputError(f"pipeline microbatches={microbatches} does not divide the batch size {batch}: "
                         "choose a divisor of data.init_args.batch_size")
    if schedule == "1f1b" and stages is not None and microbatches < stages:
        raise InputError(f"the 1f1b schedule needs at least as many microbatches as stages ({stages}), "
                         f"got {microbatches}: raise microbatches or use schedule gpipe")


def check_pipeline_config(config: Any) -> None:
    """Before any rank starts (a parsed `fit` config): refuse in one line a pipeline of a task other than MAE, more
    stages than blocks, microbatches that do not divide the batch or are fewer than 1F1B's stages."""
    strategy = config.trainer.get("strategy")
    if not _names_pipeline(getattr(strategy, "class_path", None)):
        return
    args = _plain(getattr(strategy, "init_args", None))
    PipelineStrategy(**{k: v for k, v in args.items() if k in ("schedule", "microbatches")})  # their own checks
    schedule, microbatches = args.get("schedule", "1f1b"), int(args.get("microbatches", 4))
    model = config.get("model") or {}
    refuse_task(getattr(model, "class_path", None) or str(model))
    devices, nodes = config.trainer.get("devices"), config.trainer.get("num_nodes") or 1
    stages = int(devices) * int(nodes) if str(devices).isdigit() else None
    data = _plain(getattr(config.get("data"), "init_args", None))
    check_microbatches(microbatches, data.get("batch_size"), stages, schedule)
    if stages is not None:
        init = _plain(getattr(model, "init_args", None))
        encoder = _encoder_depth(init.get("backbone", "vit_small_patch16_224"), dict(init.get("backbone_kwargs") or {}))
        if encoder is not None:
            check_stages(encoder, int(init.get("decoder_depth", 2)), stages)


def refuse_task(task: type | str) -> None:
    """Refuse in one line a task (its class, or a config's class path) other than MAE pretraining: only an MAE
    is cut into stages (DINO's two networks and views, a segmentation head are not). The one check both the
    config (before any rank starts) and the strategy (`connect`, whatever built the task) make."""
    from eoscale.train.tasks.mae import MAETask

    cls = _resolve(task) if isinstance(task, str) else task
    if not (isinstance(cls, type) and issubclass(cls, MAETask)):
        name = task.rsplit(".", 1)[-1] if isinstance(task, str) else task.__name__
        raise InputError(f"the pipeline strategy pipelines MAE pretraining only, not {name}: "
                         "use 'eoscale pretrain' with an MAE config, or another configs/strategy fragment")


def _resolve(path: str) -> Any:
    """The object a class path names (old module paths included), or None."""
    import importlib

    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr) if module else None
    except (ImportError, AttributeError):
        return None


def _names_pipeline(path: str | None) -> bool:
    cls = _resolve(path) if isinstance(path, str) else None
    return isinstance(cls, type) and issubclass(cls, PipelineStrategy)


def _plain(namespace: Any) -> dict[str, Any]:
    return namespace.as_dict() if hasattr(namespace, "as_dict") else dict(namespace or {})


def _encoder_depth(backbone: str, kwargs: dict[str, Any]) -> int | None:
    """The blocks of a timm ViT, built on the meta device (no memory, no weights); None if it is not one."""
    import timm

    try:
        with torch.device("meta"):
            return len(timm.create_model(backbone, pretrained=False, **kwargs).blocks)
    except Exception:  # not a timm ViT: the task refuses it in its own words when it is built
        return None


def owner(name: str, encoder: int, bounds: list[int]) -> int:
    """The stage that holds the MAE's parameter or buffer `name`."""
    stage_of = lambda block: max(s for s in range(len(bounds) - 1) if bounds[s] <= block)  # noqa: E731
    parts = name.split(".")
    if name.startswith("backbone.net.blocks."):
        return stage_of(int(parts[3]))
    if name.startswith("decoder_blocks."):
        return stage_of(encoder + int(parts[1]))
    if name.startswith(("backbone.net.norm.", "decoder_embed.")) or name in ("mask_token", "decoder_pos_embed"):
        return stage_of(min(encoder, bounds[-1] - 1))  # with the first decoder block
    if name.startswith(("decoder_norm.", "decoder_pred.")):
        return len(bounds) - 2
    return 0  # the patch embedding, prefix tokens, positions and whatever else the backbone holds


def block_sizes(mae: nn.Module) -> tuple[int, ...]:
    """The MAE's parameter elements per block, each block a stage of its own (`owner`): any split into fewer
    stages holds the sums of its runs."""
    encoder = len(mae.backbone.net.blocks)
    sizes = [0] * (encoder + len(mae.decoder_blocks))
    for name, p in mae.named_parameters():
        sizes[owner(name, encoder, list(range(len(sizes) + 1)))] += p.numel()
    return tuple(sizes)


class MAEStage(nn.Module):
    """The part of a `MaskedAutoencoder` one stage runs. Stage 0 takes `(image, noise)`; every stage passes
    `(tokens, restore)` on; the last returns `(reconstructed patches, restore)` for the loss."""

    def __init__(self, mae: nn.Module, stage: int, bounds: list[int]) -> None:
        super().__init__()
        self.mae = [mae]  # not a submodule: the task owns the parameters (their names stay the whole model's)
        self.stage, self.first, self.last = stage, stage == 0, stage == len(bounds) - 2
        self.encoder = len(mae.backbone.net.blocks)
        self.blocks = range(bounds[stage], bounds[stage + 1])

    def forward(self, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        mae = self.mae[0]
        if self.first:
            image, noise = inputs
            h, _, restore = mae.embed(image, noise)
        else:
            # clamped: the first call of a stage runs on uninitialised buffers to learn its outputs' shapes (the
            # pipeline's metadata inference); a real order is already within 0..N-1
            h, restore = inputs[0], inputs[1].clamp(0, mae.num_patches - 1)
        for block in self.blocks:
            if block == self.encoder:  # the encoder ends here
                h = mae.unshuffle(mae.encoded(h), restore)
            h = mae.backbone.net.blocks[block](h) if block < self.encoder else mae.decoder_blocks[block - self.encoder](h)
        if self.last:
            if self.blocks.stop == self.encoder:  # no decoder blocks
                h = mae.unshuffle(mae.encoded(h), restore)
            return mae.reconstruct(h), restore
        return h, restore


class Pipe:
    """One rank's stage and its schedules (one per batch size and mode: a stage fixes its tensors' shapes)."""

    def __init__(self, stage: MAEStage, *, num_stages: int, device: torch.device, schedule: Schedule,
                 microbatches: int, params: list[nn.Parameter]) -> None:
        self.stage, self.num_stages, self.device = stage, num_stages, device
        self.schedule, self.microbatches, self.params = schedule, microbatches, params
        self._schedules: dict[tuple[int, bool], Any] = {}

    def _loss(self, output: tuple[Tensor, Tensor], image: Tensor) -> Tensor:
        mae = self.stage.mae[0]
        pred, restore = output
        return mae.loss(image, pred, (restore >= mae.visible_patches()).float())

    def _for(self, batch: int, train: bool) -> Any:
        # a short last batch: as many microbatches as divide it
        n = max(d for d in range(1, self.microbatches + 1) if batch % d == 0)
        if (batch, train) not in self._schedules:
            stage = PipelineStage(self.stage, self.stage.stage, self.num_stages, self.device)
            kind = SCHEDULES[self.schedule] if train and n >= self.num_stages else ScheduleGPipe
            # scale_grads: each microbatch's loss is its mean, the batch's loss their mean
            self._schedules[batch, train] = kind(stage, n, loss_fn=self._loss, scale_grads=True)
        return self._schedules[batch, train]

    def _run(self, image: Tensor, noise: Tensor, train: bool) -> Tensor:
        schedule, losses = self._for(image.shape[0], train), []
        args = (image, noise) if self.stage.first else ()
        target = image if self.stage.last else None
        if train:
            schedule.step(*args, target=target, losses=losses, return_outputs=False)
        else:
            schedule.eval(*args, target=target, losses=losses)
        # the batch's loss, from the last stage to every rank (logging, the progress bar)
        loss = torch.stack(losses).detach().mean() if losses else torch.zeros((), device=self.device)
        dist.broadcast(loss, src=self.num_stages - 1)
        return loss

    def step(self, image: Tensor, noise: Tensor) -> Tensor:
        for p in self.params:  # Lightning's zero_grad comes after training_step (MAETask.optimizer_zero_grad)
            p.grad = None
        return self._run(image, noise, train=True)

    def eval(self, image: Tensor, noise: Tensor) -> Tensor:
        return self._run(image, noise, train=False)


class PipelineStrategy(PlainParallelism, DDPStrategy):
    """Lightning's DDP process set-up with the MAE cut into one pipeline stage per rank, unwrapped (no DDP).

    Args:
        schedule: `gpipe` (all forwards, then all backwards) or `1f1b` (alternating; at least as many
            microbatches as stages).
        microbatches: how many pieces each batch is split into; must divide the per-step batch.
    """

    def __init__(self, *args: Any, schedule: str = "1f1b", microbatches: int = 4, **kwargs: Any) -> None:
        # schedule is a str, not the Literal: jsonargparse's own refusal of another value is many lines
        super().__init__(*args, **kwargs)
        if schedule not in SCHEDULES:
            raise InputError(f"pipeline schedule={schedule!r} is not one of {', '.join(SCHEDULES)}")
        if microbatches < 1:
            raise InputError(f"pipeline microbatches={microbatches}: give at least 1")
        self.schedule, self.microbatches = schedule, microbatches
        self.pipe: Pipe | None = None

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        return {"num_replicas": 1, "rank": 0}  # stages, not replicas: every rank reads the whole batch

    def connect(self, model: Any) -> None:
        refuse_task(type(model))
        super().connect(model)

    def setup(self, trainer: Any) -> None:
        check_microbatches(self.microbatches, getattr(trainer.datamodule, "batch_size", None), self.world_size,
                           self.schedule)
        if trainer.accumulate_grad_batches != 1:
            raise InputError("the pipeline strategy takes no accumulate_grad_batches: raise microbatches instead")
        super().setup(trainer)

    def cut_stage(self, mae: nn.Module) -> None:
        """Keep this rank's stage of `mae` (the others' parameters become None) and make its schedules."""
        encoder, decoder = len(mae.backbone.net.blocks), len(mae.decoder_blocks)
        check_stages(encoder, decoder, self.world_size)
        bounds = stage_bounds(block_sizes(mae), self.world_size)
        names = [n for n, _ in mae.named_parameters()] + [n for n, _ in mae.named_buffers()]
        for name in names:
            if owner(name, encoder, bounds) != self.global_rank:
                parent, _, leaf = name.rpartition(".")
                setattr(mae.get_submodule(parent), leaf, None)
        stage = MAEStage(mae, self.global_rank, bounds)
        self.pipe = Pipe(stage, num_stages=self.world_size, device=self.root_device, schedule=self.schedule,
                         microbatches=self.microbatches, params=list(mae.parameters()))

    # -- the strategy protocol (eoscale.train.strategies.protocol) --------------------------------------------
    def data_parallel(self) -> DataParallel:
        return DataParallel(0, 1)  # stages, not replicas: every rank reads the whole batch

    def prepare_model(self, task: Any, model: nn.Module) -> nn.Module:
        self.cut_stage(model)  # keep this rank's blocks only
        return model

    def clip_gradients(self, module: nn.Module, max_norm: float) -> bool:
        # each stage holds some of the parameters: the norm is of all stages' gradients together
        clip_grad_norm(module.parameters(), max_norm, device=self.root_device)
        return True

    def full_state(self, module: nn.Module) -> dict[str, Tensor]:
        return self.gather_state(module.state_dict())

    def stage_runner(self) -> Pipe | None:
        return self.pipe

    def configure_ddp(self) -> None:
        pass  # each rank trains its own stage's parameters: nothing to all-reduce

    def backward(self, closure_loss: Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> Tensor:
        return closure_loss  # the schedule's step ran every microbatch's backward (Pipe.step)

    # -- checkpoints: the whole model's names on rank 0, each stage's optimizer state in a list ---------------
    def gather_state(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """Every stage's `state` merged on rank 0 (a collective; the other ranks get theirs back)."""
        parts = [None] * self.world_size if self.is_global_zero else None
        dist.gather_object({k: v.detach().cpu() for k, v in state.items()}, parts, dst=0)
        return {k: v for part in parts for k, v in part.items()} if parts else state

    def lightning_module_state_dict(self) -> dict[str, Any]:
        return self.gather_state(self.lightning_module.state_dict())

    def load_model_state_dict(self, checkpoint: dict[str, Any], strict: bool = True) -> None:
        own = self.lightning_module.state_dict().keys()
        missing = [k for k in own if k not in checkpoint["state_dict"]]
        if strict and missing:
            raise InputError(f"the checkpoint lacks {len(missing)} of this stage's tensors (e.g. {missing[0]}): "
                             "resume a checkpoint of the same model")
        self.lightning_module.load_state_dict({k: checkpoint["state_dict"][k] for k in own if k not in missing},
                                              strict=strict)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        parts = [None] * self.world_size if self.is_global_zero else None
        dist.gather_object(tree_map(lambda v: v.cpu() if isinstance(v, Tensor) else v, optimizer.state_dict()),
                           parts, dst=0)
        return {STAGE_KEY: parts or []}

    def load_optimizer_state_dict(self, checkpoint: dict[str, Any]) -> None:
        for optimizer, state in zip(self.optimizers, checkpoint["optimizer_states"], strict=True):
            stages = state.get(STAGE_KEY)
            if stages is None or len(stages) != self.world_size:
                found = "no pipeline stages" if stages is None else f"{len(stages)} stages"
                raise InputError(f"the checkpoint holds {found}, this run {self.world_size}: resume a pipeline "
                                 "checkpoint on as many ranks as wrote it")
            optimizer.load_state_dict(stages[self.global_rank])


def clip_grad_norm(parameters: Any, max_norm: float, *, device: torch.device | None = None) -> Tensor:
    """Clip by the norm of every stage's gradients together, as one process clips the whole model's."""
    grads = [p.grad for p in parameters if p.grad is not None]
    square = torch.stack([g.detach().float().pow(2).sum() for g in grads]).sum() if grads else torch.zeros((), device=device)
    dist.all_reduce(square)
    total = square.sqrt()
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.device, g.dtype))
    return total
