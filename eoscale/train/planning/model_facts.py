"""What `eoscale plan` needs to know of a config's model: parameter counts and activation bytes per sample.

The config is parsed as `eoscale fit` parses it (`EoscaleCLI`: every `--config` fragment, LightningCLI's
types and defaults); the task and datamodule are instantiated, the Trainer and its loggers are not (planning
writes nothing). The network is built by the task's own `configure_models` and `configure_finetune` on the
meta device: the real module tree with every shape and no memory, so a ViT-H plans on a laptop.

Activations are what autograd saves for the backward pass, recorded by `saved_tensors_hooks` during a
forward of the same meta network at batch 1 and at batch 2: the difference is the bytes per sample, the
rest (weights autograd keeps a reference to) is counted once. Saved tensors are the activation memory of
a step (the backward's transient gradients are one layer's at a time); under bf16 autocast the saved
tensors are bf16 but for normalisation statistics, so a mixed-precision plan halves the floating-point ones.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from eoscale.errors import InputError
from eoscale.models import shardable_blocks
from eoscale.sensors.groups import as_record


@dataclass(frozen=True)
class ModelFacts:
    """One config's network and step, as the planner uses them."""

    name: str
    params: int  # parameter elements
    trainable: int  # of which train (get gradients and optimizer state)
    largest_unit: int  # parameter elements of the largest block (what FSDP2/ZeRO-3 gather at once)
    activations_per_sample: int  # saved-for-backward bytes per sample, fp32
    activations_fixed: int  # saved bytes that do not grow with the batch, fp32
    batch_size: int  # per device
    tile: int
    in_chans: int
    precision: str | None  # the config's trainer.precision (None: eoscale's default for the hardware)
    # tensor parallelism (`eoscale.train.strategies.tp`): ViT blocks, their attention heads, tokens and width, and the
    # parameter elements the column/row-wise layers split (0 for a backbone without ViT blocks)
    blocks: int = 0
    heads: int = 0
    tokens: int = 0
    embed_dim: int = 0
    tp_split: int = 0
    tp_split_trainable: int = 0
    # pipeline parallelism (`eoscale.train.strategies.pipeline`, MAE only): each block's parameter elements in pipeline
    # order (encoder, then decoder), with the pieces its stage holds beside it (embedding, norms, prediction)
    pipeline_blocks: tuple[int, ...] = ()
    time_steps: int = 1  # dates a sample (a temporal model's stack): the activations above are of that many


def facts_from_config(configs: list[str], *, batch_size: int | None = None) -> ModelFacts:
    """Parse `configs` as `eoscale fit` does and measure the network on the meta device."""
    from eoscale.train.launch.cli import EoscaleCLI

    for path in configs:
        if not os.path.isfile(path):
            raise InputError(f"no config file {path!r}: give a YAML file such as configs/vit_l16_seg.yaml")

    class PlanCLI(EoscaleCLI):
        """The config as `fit` reads it; the task and datamodule built, no Trainer (no logger, no run folder)."""

        def add_arguments_to_parser(self, parser: Any) -> None:
            super().add_arguments_to_parser(parser)
            # a precision the config does not name is the GPU's (bf16-mixed), not this machine's; no MLflow
            # logger (instantiated with the config, it created mlflow.db in the working directory)
            parser.set_defaults({"trainer.precision": None, "trainer.logger": False})

        def before_instantiate_classes(self) -> None:
            pass

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            return None

    args = [a for path in configs for a in ("--config", path)]
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")  # 'Seed set to 0': nothing trains here
    level = seed_log.level
    seed_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cli = PlanCLI(args=args, run=False)
    finally:
        seed_log.setLevel(level)
    task, data = cli.model, cli.datamodule
    config = cli.config
    in_chans, num_classes, tile = _data_facts(task, data)
    steps = _time_steps(task, data)
    task.hparams.in_chans, task.hparams.num_classes, task.hparams.img_size = in_chans, num_classes, tile
    task.hparams.weights = None  # the weights change values, not shapes; nothing is read from disk
    store = getattr(data, "store", None)
    if task.hparams.get("fusion") and store is not None and os.path.exists(store):
        task.hparams.sensors = as_record(data.sensor_groups)  # a network of several sensors: one stem or embedding each
    with torch.device("meta"):
        model = task.configure_models()
        model = task.configure_finetune(model)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    try:
        units = [sum(p.numel() for p in block.parameters()) for block in shardable_blocks(model)]
    except InputError:
        units = []
    rest = params - sum(units)
    vit = _vit_facts(model)
    fixed, per_sample = saved_activation_bytes(model, in_chans=in_chans, tile=tile, steps=steps)
    name = str(task.hparams.get("backbone", type(model).__name__))
    return ModelFacts(name=name, params=params, trainable=trainable, largest_unit=max([rest, *units]),
                      activations_per_sample=per_sample, activations_fixed=fixed,
                      batch_size=int(batch_size or getattr(data, "batch_size", 1)), tile=tile, in_chans=in_chans,
                      precision=config.trainer.get("precision"), pipeline_blocks=_pipeline_facts(model),
                      time_steps=steps, **vit)


def _pipeline_facts(model: nn.Module) -> tuple[int, ...]:
    """An MAE's parameter elements per pipeline block (`eoscale.train.strategies.pipeline.block_sizes`); () for other models."""
    if not hasattr(model, "decoder_blocks"):
        return ()
    from eoscale.train.strategies.pipeline import block_sizes

    return block_sizes(model)


def _vit_facts(model: nn.Module) -> dict[str, int]:
    """What tensor parallelism splits of `model`: the ModelFacts fields `blocks` .. `tp_split_trainable`."""
    from eoscale.train.strategies.tp import check_divisible

    try:
        blocks = check_divisible(model, 1)
    except InputError:
        return {}
    split = [p for b in blocks for layer in (b.attn.qkv, b.mlp.fc1) for p in layer.parameters()]
    split += [b.attn.proj.weight for b in blocks] + [b.mlp.fc2.weight for b in blocks]  # row-wise biases stay whole
    net = getattr(getattr(model, "backbone", None), "net", None)
    embed = getattr(net, "patch_embed", None)
    tokens = int(getattr(embed, "num_patches", 0) or 0) + int(getattr(net, "num_prefix_tokens", 0) or 0)
    return {"blocks": len(blocks), "heads": int(blocks[0].attn.num_heads), "tokens": tokens,
            "embed_dim": int(blocks[0].attn.qkv.in_features), "tp_split": sum(p.numel() for p in split),
            "tp_split_trainable": sum(p.numel() for p in split if p.requires_grad)}


def _data_facts(task: Any, data: Any) -> tuple[int, int, int]:
    """Bands, classes and tile size: from the config's tile store when it exists, else from the model's arguments."""
    h = task.hparams
    store = getattr(data, "store", None)
    if store is not None and os.path.exists(store):
        return int(data.num_bands), int(data.num_classes), int(data.tile_size)
    # pretraining tasks (MAE, DINO) have no classes: their configs need only bands and tile size
    needed = ("in_chans", "num_classes", "img_size") if "num_classes" in h else ("in_chans", "img_size")
    if any(h.get(name) is None for name in needed):
        raise InputError(f"no tile store at {store!r} to read bands{', classes' if 'num_classes' in h else ''} and "
                         f"tile size from: ingest it first, or set {', '.join(f'model.init_args.{n}' for n in needed)} "
                         "in a config")
    return int(h.in_chans), int(h.get("num_classes") or 0), int(h.img_size)


def _time_steps(task: Any, data: Any) -> int:
    """The dates a sample of a temporal task (its store's, else `model.init_args.time_steps`); 1 for the others."""
    if "architecture" not in task.hparams:
        return 1
    store = getattr(data, "store", None)
    if store is not None and os.path.exists(store):
        steps = int(data.time_steps)
        return min(steps, int(data.max_dates)) if getattr(data, "max_dates", None) else steps
    return int(task.hparams.get("time_steps") or 1)


def saved_activation_bytes(model: nn.Module, *, in_chans: int, tile: int, device: str = "meta",
                           steps: int = 1) -> tuple[int, int]:
    """(bytes saved independent of the batch, bytes saved per sample) by a training forward of `model`; a
    temporal model's samples are stacks of `steps` dates (B, T, C, H, W), whose activations grow with T.

    Each saved tensor counts once by storage (a tensor saved by two ops is one piece of memory); parameters
    autograd keeps for the backward are not activations and are left out."""
    params = {id(p) for p in model.parameters()}
    was_training = model.training
    model.train()
    sizes = []
    for batch in (1, 2):
        seen: dict[Any, int] = {}
        held: list[torch.Tensor] = []  # keeps the ids of this pass's tensors unique

        def pack(t: torch.Tensor, seen=seen, held=held) -> torch.Tensor:
            if id(t) in params or (t._base is not None and id(t._base) in params):
                return t
            if t.device.type == "meta":  # no memory to point at: one tensor object, its own extent
                held.append(t)
                seen[id(t)] = t.numel() * t.element_size()
            else:
                storage = t.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        shape = (batch, in_chans, tile, tile) if steps == 1 else (batch, steps, in_chans, tile, tile)
        x = torch.zeros(shape, device=device)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
        sizes.append(sum(seen.values()))
    model.train(was_training)
    per_sample = sizes[1] - sizes[0]
    return max(sizes[0] - per_sample, 0), per_sample
