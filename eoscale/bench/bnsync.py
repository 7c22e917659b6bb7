"""`eoscale bench bnsync`: how BatchNorm's running statistics are kept equal on the ranks of FSDP2, measured.

The choice behind `eoscale.train.strategies.buffers` (rank 0's buffers broadcast where they are read or saved),
against the alternatives, on 2 gloo CPU ranks with eoscale's resnet18 segmentation model, each rank its own batches
(of different statistics, so that unsynchronised replicas drift):

- `none`: plain FSDP2 (`fully_shard` shards parameters only; every rank keeps its own running statistics);
- `broadcast`: rank 0's buffers broadcast before each forward that follows a training one (what DDP does);
- `lazy`: rank 0's buffers broadcast once, before evaluating (eoscale's `ReplicatedBuffers`);
- `syncbn`: SyncBatchNorm's semantics (statistics of the global batch). torch's SyncBatchNorm has no CPU kernels
  (`batch_norm_stats`), so this is a CPU re-implementation with its collectives: an all_gather of (mean, var,
  count) a BatchNorm forward, an all_reduce of 2·C sums a backward.

Each variant trains `--rounds` rounds of `--steps` steps, the variants' order reversed every other round so that a
noisy neighbour slows all alike; the record holds the median step time of each, its ratio to `none`'s (median of
the ratios paired by round), and how far apart the two ranks' eval outputs and BatchNorm buffers end.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

VARIANTS = ("none", "broadcast", "lazy", "syncbn")


def _sync_bn_class():
    """A BatchNorm2d whose training forward normalises by the statistics of every rank's batch (SyncBatchNorm's
    semantics, CPU collectives); eval mode is BatchNorm2d's."""
    import torch
    import torch.distributed as dist
    from torch import nn

    class _SyncBN(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b, rm, rv, eps, momentum):
            c, dims = x.shape[1], [0, 2, 3]
            n = x.numel() // c
            stats = torch.cat([x.mean(dims), x.var(dims, unbiased=False), torch.tensor([float(n)])])
            parts = [torch.empty_like(stats) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, stats)
            s = torch.stack(parts)
            counts = s[:, -1:]
            total = counts.sum()
            mean = (s[:, :c] * counts).sum(0) / total
            var = ((s[:, c:2 * c] + s[:, :c] ** 2) * counts).sum(0) / total - mean ** 2
            with torch.no_grad():
                rm.mul_(1 - momentum).add_(momentum * mean)
                rv.mul_(1 - momentum).add_(momentum * var * total / (total - 1))
            invstd = (var + eps).rsqrt()
            xhat = (x - mean[None, :, None, None]) * invstd[None, :, None, None]
            ctx.save_for_backward(xhat, invstd, w, total)
            return xhat * w[None, :, None, None] + b[None, :, None, None]

        @staticmethod
        def backward(ctx, dy):
            xhat, invstd, w, total = ctx.saved_tensors
            c, dims = dy.shape[1], [0, 2, 3]
            local = torch.cat([dy.sum(dims), (dy * xhat).sum(dims)])
            dw, db = local[c:].clone(), local[:c].clone()
            dist.all_reduce(local)
            sdy, sdyx = local[:c], local[c:]
            dx = (w * invstd / total)[None, :, None, None] * (
                total * dy - sdy[None, :, None, None] - xhat * sdyx[None, :, None, None])
            return dx, dw, db, None, None, None, None

    class CPUSyncBatchNorm(nn.BatchNorm2d):
        def forward(self, x):
            if not self.training:
                return super().forward(x)
            self.num_batches_tracked.add_(1)
            return _SyncBN.apply(x, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                                 self.momentum)

    return CPUSyncBatchNorm


def _to_sync(module, cls) -> None:
    from torch import nn

    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            new = cls(child.num_features, child.eps, child.momentum)
            new.load_state_dict(child.state_dict())
            setattr(module, name, new)
        else:
            _to_sync(child, cls)


def _bn_buffers(module) -> list:
    from torch import nn

    return [b for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) for b in m.buffers()]


def _broadcast_before_forward(module, _args) -> None:
    """DDP's way: rank 0's buffers before any forward that follows a training forward."""
    from eoscale.train.strategies.buffers import broadcast_running_statistics

    if getattr(module, "_eoscale_dirty", True):
        broadcast_running_statistics(module)
    module._eoscale_dirty = module.training


def _rank(rank: int, world: int, port: int, out: str, options: dict) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh

    from eoscale.models import build_model
    from eoscale.train.strategies.buffers import broadcast_running_statistics
    from eoscale.train.strategies.fsdp import shard_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("data_parallel",))
        size, batch, bands, classes = options["size"], options["batch"], 10, 4
        models = {}
        for variant in VARIANTS:
            torch.manual_seed(0)
            model = build_model("resnet18", in_chans=bands, num_classes=classes, img_size=size)
            if variant == "syncbn":
                _to_sync(model, _sync_bn_class())
            shard_model(model, mesh)
            if variant == "broadcast":
                model.register_forward_pre_hook(_broadcast_before_forward)
            models[variant] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        draws = torch.Generator().manual_seed(100 + rank)  # each rank its own batches, of its own statistics

        def step(variant: str) -> None:
            model, optimizer = models[variant]
            model.train()
            x = torch.randn(batch, bands, size, size, generator=draws) * (1 + rank)
            y = torch.randint(0, classes, (batch, size, size), generator=draws)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()

        for variant in VARIANTS:  # warm-up
            step(variant)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(options["rounds"]):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                dist.barrier()
                started = time.perf_counter()
                for _ in range(options["steps"]):
                    step(variant)
                dist.barrier()
                times[variant].append((time.perf_counter() - started) / options["steps"])
        probe = torch.randn(2, bands, size, size, generator=torch.Generator().manual_seed(0))
        figures = {}
        for variant, (model, _) in models.items():
            model.eval()
            if variant == "lazy":  # once, before the eval forward (ReplicatedBuffers.sync_buffers)
                broadcast_running_statistics(model)
            with torch.no_grad():
                output = model(probe)
            outputs = [torch.empty_like(output) for _ in range(world)]
            dist.all_gather(outputs, output)
            buffers = torch.cat([b.float().reshape(-1) for b in _bn_buffers(model)])
            gathered = [torch.empty_like(buffers) for _ in range(world)]
            dist.all_gather(gathered, buffers)
            figures[variant] = {"step_s": times[variant],
                                "eval_output_gap": float((outputs[0] - outputs[1]).abs().max()),
                                "buffer_gap": float((gathered[0] - gathered[1]).abs().max())}
        if rank == 0:
            Path(out).write_text(json.dumps(figures))
    finally:
        dist.destroy_process_group()


def measure(*, rounds: int, steps: int, size: int, batch: int) -> dict:
    """Each variant's step times (one a round), eval-output and buffer gaps between the 2 ranks."""
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the gloo rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-bnsync-") as tmp:
        out = Path(tmp) / "figures.json"
        mp.start_processes(_rank, args=(2, port, str(out), {"rounds": rounds, "steps": steps, "size": size,
                                                            "batch": batch}),
                           nprocs=2, start_method="spawn")
        return json.loads(out.read_text())


def summarise(raw: dict) -> dict:
    """Median step time of each variant and its ratio to plain FSDP2's (median of the ratios paired by round)."""
    base = raw["none"]["step_s"]
    out = {}
    for variant, figures in raw.items():
        ratios = [t / b for t, b in zip(figures["step_s"], base, strict=True)]
        out[variant] = {**figures, "median_step_s": statistics.median(figures["step_s"]),
                        "x_none": statistics.median(ratios)}
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --steps steps a variant (default: 5)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps a round (default: 5)")
    parser.add_argument("--size", type=int, default=64, help="tile size in pixels (default: 64)")
    parser.add_argument("--batch-size", type=int, default=4, help="tiles a rank a step (default: 4)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.errors import InputError

    for name in ("rounds", "steps", "size", "batch_size"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} {getattr(args, name)}: give a positive number")
    print(f"FSDP2 on 2 gloo CPU ranks, resnet18, {args.rounds} rounds × {args.steps} steps a variant "
          f"({', '.join(VARIANTS)}) …")
    figures = summarise(measure(rounds=args.rounds, steps=args.steps, size=args.size, batch=args.batch_size))
    for variant, f in figures.items():
        print(f"{variant:9s} step median {f['median_step_s'] * 1e3:7.1f} ms ({f['x_none']:.2f}× none); "
              f"rank gap: eval outputs {f['eval_output_gap']:.2e}, BatchNorm buffers {f['buffer_gap']:.2e}")
    result = {"world_size": 2, "model": "resnet18", "tile": args.size, "batch_per_rank": args.batch_size,
              "rounds": args.rounds, "steps_per_round": args.steps, "variants": figures}
    if args.record:
        print(f"recorded in {record('bnsync', result, directory=args.record, seeds={'batches': [100, 101]})}")
    return 0
