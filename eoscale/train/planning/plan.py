"""`eoscale plan`: which training strategy fits a config's model on the GPUs a user is about to book.

    eoscale plan --config configs/vit_l16_seg.yaml --gpus-per-node 4 --gpu-memory 40GB --nodes 1,2,4,16

For DDP, FSDP2, DeepSpeed ZeRO-2, ZeRO-3, ZeRO-3 with the optimizer offloaded to the CPU, FSDP2 × tensor
parallelism (ViTs) and pipeline stages (MAE pretraining), at each node count:
the memory each GPU holds (parameters, gradients, optimizer state, activations at the config's per-device
batch and tile, communication buffers), whether that fits, and the bytes each rank sends per step.

The model comes from `eoscale.train.planning.model_facts` (the config parsed as `fit` does, the network built on the
meta device, saved activations measured). The state follows what each implementation keeps, with AdamW
(two moments per trainable element, in the parameters' dtype):

| strategy | parameters | gradients | optimizer |
|---|---|---|---|
| DDP | P·p | T·g | T·8 |
| FSDP2 | P·p/W | T·g/W | T·8/W |
| ZeRO-2 | P·d | T·d/W | T·(8+4)/W (an fp32 master partition, copied even in fp32) |
| ZeRO-3 | P·d/W | T·d/W | T·(8+m)/W (m = 4, the master partition, under bf16/fp16; in fp32 the partition is its own master: m = 0) |
| ZeRO-3 offload | P·d/W | T·d/W | 0 on the GPU (T·12/W in host memory) |
| FSDP2×TP | (S/t + P−S)·p/D | (Sₜ/t + T−Sₜ)·g/D | (Sₜ/t + T−Sₜ)·8/D |
| Pipeline | Pₛ·p | Pₛ·(T/P)·g | Pₛ·(T/P)·8 |

P parameters, T of them trainable, W ranks; under FSDP2×TP, W = t·D: t tensor-parallel ranks (within a node:
the largest divisor of the heads and the GPUs per node) split the S (Sₜ trainable) elements of each block's
qkv/fc1 (with biases) and proj/fc2 weights, D data-parallel ranks shard everything; its activations are
planned whole (an upper bound: the blocks' inner activations are split t ways, their inputs are not); p = g = 4 (Lightning keeps fp32 parameters under `*-mixed`,
autocast casts per op), 2 under `bf16-true`; d = DeepSpeed's parameter dtype (2 under bf16, 4 in fp32).
Pipeline (`eoscale.train.strategies.pipeline`): W stages, one a rank, each a run of the MAE's blocks split as evenly as
their parameters allow; Pₛ the parameter elements of the heaviest stage (its blocks with the embedding, norms or prediction they hold). Its activations
are the stage's share of the blocks times the microbatches in flight (all M under GPipe, at most W under 1F1B,
of B/M samples each: configs/strategy/pipeline.yaml's 1F1B and M = 4); a middle stage sends each microbatch's
tokens forward and their gradients back (an upper bound: all patch tokens at the encoder's width).
Sent per step (ring algorithms: each collective sends (W-1)/W of its buffer): DDP all-reduces the
gradients (2×); FSDP2×TP all-reduces each block's B·N·E activations 4 times a step over the t ranks
(2·(t−1)/t of them each) and does FSDP2's traffic on its share over the D ranks; FSDP2 and ZeRO-3 gather the parameters twice (forward, backward) and reduce-scatter the
gradients; ZeRO-2 reduce-scatters the gradients and gathers the updated parameters. `eoscale.train.planning.state`
measures the state of a running rank; the tests hold the two within 10 %.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from eoscale.errors import InputError
from eoscale.paths import AppendPaths
from eoscale.train.planning.model_facts import ModelFacts

STRATEGIES = ("ddp", "fsdp2", "zero2", "zero3", "zero3_offload", "fsdp2_tp", "pipeline")
LABELS = {"ddp": "DDP", "fsdp2": "FSDP2", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "zero3_offload": "ZeRO-3+offload",
          "fsdp2_tp": "FSDP2×TP", "pipeline": "Pipeline"}
MICROBATCHES, SCHEDULE = 4, "1f1b"  # configs/strategy/pipeline.yaml
ADAM = 8  # AdamW's two moments, fp32
MASTER = 4  # an fp32 master copy
HEADROOM = 0.9  # the share of a GPU's memory training may use (CUDA context, allocator fragmentation)
BUCKET = 50_000_000  # ZeRO's reduce bucket, elements (configs/strategy/zero*.yaml)


@dataclass(frozen=True)
class Estimate:
    """Predicted bytes on one GPU of `world` ranks under `strategy`, and bytes it sends per step."""

    strategy: str
    world: int
    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    sent: float
    host: float = 0.0  # bytes kept in the node's memory instead (offload)

    @property
    def state(self) -> float:
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        return self.state + self.activations + self.buffers

    def fits(self, gpu_memory: float) -> bool:
        return self.total <= HEADROOM * gpu_memory


def tp_size(facts: ModelFacts, gpus_per_node: int) -> int:
    """FSDP2×TP's tensor-parallel size: the largest divisor of the heads that divides the GPUs of a node."""
    return max([t for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0 and facts.heads % t == 0] or [1])


def estimate(facts: ModelFacts, strategy: str, world: int, *, precision: str = "32-true",
             bucket: int = BUCKET, tp: int = 1, microbatches: int = MICROBATCHES, schedule: str = SCHEDULE) -> Estimate:
    """The memory and traffic of one rank of `world` training `facts`' model under `strategy` (`tp`: the
    tensor-parallel size of fsdp2_tp, which divides `world`; `microbatches` and `schedule`: the pipeline's, whose
    stages are the `world` ranks)."""
    if strategy not in STRATEGIES:
        raise InputError(f"strategy={strategy!r} is not one of {', '.join(STRATEGIES)}")
    P, T, W = facts.params, facts.trainable, world
    half = precision.startswith(("bf16", "16"))
    p = 2 if precision.endswith("-true") and half else 4  # Lightning's parameters (fp32 under autocast)
    d = 2 if half else 4  # DeepSpeed converts the module to bf16/fp16 when asked for either
    adam = ADAM // 2 if p == 2 else ADAM  # torch's AdamW keeps its moments in the parameters' dtype
    ring = (W - 1) / W
    act = facts.activations_fixed + facts.activations_per_sample * facts.batch_size
    act = act / 2 if half else act  # saved tensors are bf16 under autocast (model_facts)
    gathered = 2 * facts.largest_unit * (2 if half else p)  # the unit in use and the one prefetched
    if strategy == "ddp":
        return Estimate(strategy, W, P * p, T * p, T * adam, act, 0.0, 2 * ring * T * p)
    if strategy == "fsdp2_tp":
        D = max(world // tp, 1)
        local = facts.tp_split / tp + P - facts.tp_split  # elements of one tensor-parallel rank, before FSDP2
        local_t = facts.tp_split_trainable / tp + T - facts.tp_split_trainable
        block = facts.batch_size * facts.tokens * facts.embed_dim * (2 if half else 4)
        sent = ((D - 1) / D * (2 * local * (2 if half else p) + local_t * 4)
                + 4 * facts.blocks * 2 * (tp - 1) / tp * block)
        buffers = 2 * facts.largest_unit / tp * (2 if half else p) if D > 1 else 0.0
        return Estimate(strategy, W, local * p / D, local_t * p / D, local_t * adam / D, act, buffers, sent)
    if strategy == "pipeline":
        return _pipeline(facts, W, p=p, adam=adam, act=act, microbatches=microbatches, schedule=schedule, half=half)
    if strategy == "fsdp2":
        # eoscale.train.strategies.fsdp gathers bf16 parameters and reduces fp32 gradients under bf16 on GPUs
        sent = ring * (2 * P * (2 if half else p) + T * 4)
        return Estimate(strategy, W, P * p / W, T * p / W, T * adam / W, act, gathered if W > 1 else 0.0, sent)
    if strategy == "zero2":
        buffers = 2 * min(bucket, T) * d  # two reduce buckets (overlap_comm)
        return Estimate(strategy, W, P * d, T * d / W, T * (ADAM + MASTER) / W, act, buffers, ring * (T * d + P * d))
    buffers = min(bucket, T) * d + gathered
    sent = ring * (2 * P * d + T * d)
    if strategy == "zero3":  # eoscale.train.strategies.zero lets an fp32 partition be its own master copy
        master = MASTER if half else 0
        return Estimate(strategy, W, P * d / W, T * d / W, T * (ADAM + master) / W, act, buffers, sent)
    return Estimate(strategy, W, P * d / W, T * d / W, 0.0, act, buffers, sent, host=T * (ADAM + MASTER) / W)


def _pipeline(facts: ModelFacts, stages: int, *, p: int, adam: int, act: float, microbatches: int, schedule: str,
              half: bool) -> Estimate:
    from eoscale.train.strategies.pipeline import stage_bounds

    blocks = facts.pipeline_blocks
    if not blocks or stages > len(blocks):
        raise InputError(f"{facts.name}: {stages} pipeline stages need an MAE of at least as many blocks "
                         f"(this one has {len(blocks)})")
    bounds = stage_bounds(blocks, stages)
    heaviest = max(sum(blocks[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    share = max(b - a for a, b in zip(bounds, bounds[1:], strict=False)) / len(blocks)
    in_flight = min(microbatches, stages) if schedule == "1f1b" else microbatches
    samples = facts.batch_size / microbatches * in_flight
    saved = (facts.activations_fixed + facts.activations_per_sample * samples) * share * (0.5 if half else 1.0)
    tokens = facts.batch_size * facts.tokens * facts.embed_dim * (2 if half else 4)
    trainable = facts.trainable / facts.params
    return Estimate("pipeline", stages, heaviest * p, heaviest * trainable * p, heaviest * trainable * adam,
                    saved, 0.0, 2 * tokens if stages > 1 else 0.0)


def parse_bytes(text: str) -> float:
    """'40GB' -> 40e9, '80GiB' -> 80·2^30, '512MB' -> 512e6."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]i?B)\s*", text, flags=re.IGNORECASE)
    if not match:
        raise InputError(f"--gpu-memory {text!r} is not a size: give it as 40GB or 80GiB")
    unit = match.group(2).upper()
    base = 1024 if "I" in unit else 1000
    return float(match.group(1)) * base ** ("KMGT".index(unit[0]) + 1)


def parse_nodes(text: str) -> list[int]:
    try:
        nodes = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        nodes = []
    if not nodes or min(nodes) < 1:
        raise InputError(f"--nodes {text!r} is not a list of node counts: give it as 1,2,4,16")
    return nodes


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def table(facts: ModelFacts, *, nodes: list[int], gpus_per_node: int, gpu_memory: float, precision: str) -> str:
    """The plan as text: one row per node count and strategy."""
    lines = [
        f"{facts.name}: {facts.params / 1e6:.1f} M parameters ({facts.trainable / 1e6:.1f} M trainable), tile "
        f"{facts.tile}, batch {facts.batch_size} per GPU, {precision}; {gpu_memory / 1e9:.0f} GB per GPU "
        f"({HEADROOM:.0%} usable)",
        f"activations: {facts.activations_per_sample / 1e6:.1f} MB per sample"
        f"{f' of {facts.time_steps} dates' if facts.time_steps > 1 else ''} at fp32 (saved for the backward, "
        "measured on the meta device at batch 1 and 2)",
        "GB per GPU; sent = GB each rank sends per step",
        *([f"Pipeline: {SCHEDULE.upper()}, {MICROBATCHES} microbatches a step, one stage a GPU (the heaviest "
           "stage's figures)"] if facts.pipeline_blocks else []),
        *([f"FSDP2×TP: each block split over {tp_size(facts, gpus_per_node)} GPUs of a node ({facts.heads} heads), "
           "FSDP2 over the nodes' other ranks"] if facts.heads else []),
        "",
        f"{'nodes':>5} {'GPUs':>5}  {'strategy':<15}{'params':>8}{'grads':>8}{'optim':>8}{'activ':>8}{'buffers':>8}"
        f"{'total':>8}  {'fits':<5}{'sent':>8}",
    ]
    for n in nodes:
        world = n * gpus_per_node
        for strategy in STRATEGIES:
            if strategy == "fsdp2_tp" and not facts.heads:
                continue  # not a ViT: nothing to split
            if strategy == "pipeline" and world > len(facts.pipeline_blocks):
                if facts.pipeline_blocks:  # not MAE: no row
                    lines.append(f"{n:>5} {world:>5}  {LABELS[strategy]:<15}more GPUs than the "
                                 f"{len(facts.pipeline_blocks)} blocks to make stages of")
                continue
            e = estimate(facts, strategy, world, precision=precision, tp=tp_size(facts, gpus_per_node))
            fits = "yes" if e.fits(gpu_memory) else "no"
            host = f"  (+{_gb(e.host)} GB in host memory)" if e.host else ""
            lines.append(f"{n:>5} {world:>5}  {LABELS[strategy]:<15}{_gb(e.params):>8}{_gb(e.grads):>8}"
                         f"{_gb(e.optimizer):>8}{_gb(e.activations):>8}{_gb(e.buffers):>8}{_gb(e.total):>8}  "
                         f"{fits:<5}{_gb(e.sent):>8}{host}")
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action=AppendPaths, required=True, metavar="CONFIG",
                        help="the training config(s), as given to 'eoscale fit' (repeatable)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4: JUWELS Booster)")
    parser.add_argument("--gpu-memory", default="40GB", help="memory of one GPU (default 40GB: A100 40 GB)")
    parser.add_argument("--nodes", default="1,2,4,16", help="node counts to plan for, comma-separated")
    parser.add_argument("--precision", default=None,
                        help="training precision (default: the config's, else bf16-mixed as fit uses on GPUs)")
    parser.add_argument("--batch-size", type=int, default=None, help="per-GPU batch (default: the config's)")


def run(args: argparse.Namespace) -> int:
    from eoscale.train.planning.model_facts import facts_from_config

    nodes = parse_nodes(args.nodes)
    gpu_memory = parse_bytes(args.gpu_memory)
    if args.gpus_per_node < 1:
        raise InputError(f"--gpus-per-node must be at least 1, got {args.gpus_per_node}")
    if args.batch_size is not None and args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    facts = facts_from_config(args.config, batch_size=args.batch_size)
    precision = str(args.precision or facts.precision or "bf16-mixed")
    print(table(facts, nodes=nodes, gpus_per_node=args.gpus_per_node, gpu_memory=gpu_memory, precision=precision))
    return 0
