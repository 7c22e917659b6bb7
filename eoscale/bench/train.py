"""`eoscale bench train`: training throughput and memory, each against a baseline from the same run.

1. `eoscale fit` (one process, one thread) against a plain PyTorch loop with the same model, batch size and
   in-memory tiles (goal ≥ 0.95×): what Lightning, the streaming loader and the tracking cost.
2. DDP with 2 processes × 1 thread against 1 process × 1 thread (goal ≥ 1.8× samples/s), beside the same ratio
   for plain PyTorch DDP (no Lightning, loader or tracking): what the machine itself allows, since on a CPU the
   gloo all-reduce of the gradients takes CPU time from the ranks. The loops and fits run in turns `--repeats`
   times and the medians are compared: on a shared machine a neighbour's load comes and goes within a minute,
   and one pair of runs can differ a lot (`samples_per_s_each_repeat` in benchmarks/train.json).
3. Per-rank memory of parameters + gradients + optimizer state under FSDP2 against DDP at W=2 (goal ≤ 0.6×).

The fits run as `python -m eoscale fit` subprocesses with a `StepTimer` callback added on the command line;
it times steps after a warm-up and measures the tensors each rank holds, and rank 0 writes them to JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from eoscale.paths import Paths

WARMUP_STEPS = 5


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # FSDP2 holds DTensor shards
    return local.numel() * local.element_size()


def training_state_bytes(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """This rank's bytes of parameters, gradients and optimizer state (shards only, under FSDP2); call it where
    gradients exist, before the optimizer step (`on_before_optimizer_step`)."""
    params = sum(_local_bytes(p) for p in module.parameters())
    grads = sum(_local_bytes(p.grad) for p in module.parameters() if p.grad is not None)
    state = sum(_local_bytes(v) for s in optimizer.state.values() for v in s.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0)
    return params + grads + state


class StepTimer(Callback):
    """Times training steps after `WARMUP_STEPS` and, at the end, the bytes of parameters, gradients and
    optimizer state this rank holds; rank 0 writes both to `$EOSCALE_BENCH_OUT`."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.steps = 0
        self.state_bytes = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == WARMUP_STEPS and self.started is None:
            self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.started is not None:
            self.steps += 1

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # gradients exist here and optimizer state from the second step on: measure at the last step
        if trainer.global_step + 1 == trainer.max_steps:
            self.state_bytes = training_state_bytes(pl_module, optimizer)

    def on_train_end(self, trainer, pl_module) -> None:
        seconds = time.perf_counter() - (self.started or time.perf_counter())
        if trainer.global_rank == 0 and os.environ.get("EOSCALE_BENCH_OUT"):
            batch = trainer.datamodule.batch_size
            Path(os.environ["EOSCALE_BENCH_OUT"]).write_text(json.dumps({
                "world_size": trainer.world_size, "steps_timed": self.steps, "seconds": seconds,
                "samples_per_s": self.steps * batch * trainer.world_size / max(seconds, 1e-9),
                "state_bytes_rank0": self.state_bytes,
            }))


def run_fit(store: str, work: Path, *, devices: int, strategy: str | None, steps: int, batch: int,
            backbone: str) -> dict:
    out = work / f"fit-{devices}-{strategy or 'single'}.json"
    argv = [sys.executable, "-m", "eoscale", "fit", "--config", "configs/smoke.yaml"]
    if strategy:
        argv += ["--config", f"configs/strategy/{strategy}.yaml"]
    argv += ["--data.init_args.store", store, "--data.init_args.batch_size", str(batch),
             "--data.init_args.num_workers", "0", "--model.init_args.backbone", backbone,
             "--trainer.devices", str(devices), "--trainer.max_steps", str(steps),
             "--trainer.limit_val_batches", "0", "--trainer.default_root_dir", str(work / "runs"),
             "--trainer.callbacks+=eoscale.bench.train.StepTimer"]
    env = {**os.environ, "EOSCALE_BENCH_OUT": str(out), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise RuntimeError(f"eoscale fit failed ({' '.join(argv[3:])}):\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def plain_loop(store: str, *, steps: int, batch: int, backbone: str, rank: int = 0, world: int = 1) -> dict:
    """The same model, loss and optimizer in a bare loop over tiles already in memory, one thread; with
    `world` > 1, one rank of plain `DistributedDataParallel` over gloo (the process group must exist)."""
    from eoscale.data import open_store
    from eoscale.models import build_model
    from eoscale.train.tasks.segmentation import SegmentationLoss

    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP expects
    ds = open_store(store)
    start, stop = ds.attrs["splits"]["train"]
    n = min(stop - start, batch * 8 * world)
    mean = torch.tensor(ds.attrs["statistics"]["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(ds.attrs["statistics"]["std"]).view(1, -1, 1, 1)
    images = (torch.from_numpy(ds["images"][start : start + n].isel(time=0).values.astype("float32")) - mean) / std
    labels = torch.from_numpy(ds["labels"][start : start + n].values.astype("int64"))
    images, labels = images[rank::world], labels[rank::world]
    n = len(labels)
    model = build_model(backbone, in_chans=images.shape[1], num_classes=len(ds.attrs["classes"]), decoder_channels=64)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    loss_fn = SegmentationLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    started = None
    for step in range(steps):
        if step == WARMUP_STEPS:
            started = time.perf_counter()
        i = (step * batch) % (n - batch + 1)
        loss = loss_fn(model(images[i : i + batch]), labels[i : i + batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    return {"world_size": world, "steps_timed": steps - WARMUP_STEPS, "seconds": seconds,
            "samples_per_s": (steps - WARMUP_STEPS) * batch * world / seconds}


def _plain_ddp_rank(rank: int, world: int, port: int, out: str, kwargs: dict) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        figures = plain_loop(**kwargs, rank=rank, world=world)
        if rank == 0:
            Path(out).write_text(json.dumps(figures))
    finally:
        dist.destroy_process_group()


def plain_ddp(store: str, work: Path, *, steps: int, batch: int, backbone: str) -> dict:
    """`plain_loop` as plain PyTorch DDP on 2 processes × 1 thread: what this machine gives DDP without Lightning,
    the streaming loader or tracking (the reference for how far the 2×1 ratio can go here)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the gloo rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = work / "plain-ddp.json"
    mp.start_processes(_plain_ddp_rank, args=(2, port, str(out), {"store": store, "steps": steps, "batch": batch,
                                                                    "backbone": backbone}),
                       nprocs=2, start_method="spawn")
    return json.loads(out.read_text())


def median_run(runs: list[dict]) -> dict:
    """The run with the median samples/s (the lower middle one for an even count)."""
    return sorted(runs, key=lambda r: r["samples_per_s"])[(len(runs) - 1) // 2]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store (e.g. runs/quickstart/tiles.zarr)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per measurement (default: 30)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per-process batch size (default: 32, configs/resnet18_seg.yaml's)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="single-process and DDP fits are run alternately this many times and the medians "
                             "compared, so a noisy neighbour slows both alike (default: 3)")
    parser.add_argument("--backbone", default="resnet18", help="timm backbone (default: resnet18)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs

    read_store_attrs(args.store)  # a clear error before any subprocess starts
    steps, batch = args.steps, args.batch_size
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-train-") as tmp:
        work = Path(tmp)
        plains, singles, ddps, plain_ddps = [], [], [], []
        for repeat in range(args.repeats):
            print(f"plain PyTorch loop, 1 process × 1 thread ({repeat + 1}/{args.repeats}) …")
            plains.append(plain_loop(args.store, steps=steps, batch=batch, backbone=args.backbone))
            print(f"plain PyTorch DDP, 2 processes × 1 thread ({repeat + 1}/{args.repeats}) …")
            plain_ddps.append(plain_ddp(args.store, work, steps=steps, batch=batch, backbone=args.backbone))
            print(f"eoscale fit, 1 process × 1 thread ({repeat + 1}/{args.repeats}) …")
            singles.append(run_fit(args.store, work, devices=1, strategy=None, steps=steps, batch=batch,
                                   backbone=args.backbone))
            print(f"eoscale fit, DDP 2 processes × 1 thread ({repeat + 1}/{args.repeats}) …")
            ddps.append(run_fit(args.store, work, devices=2, strategy="ddp", steps=steps, batch=batch,
                                backbone=args.backbone))
        plain, plain2 = median_run(plains), median_run(plain_ddps)
        single, ddp = median_run(singles), median_run(ddps)
        print("eoscale fit, FSDP2 2 processes × 1 thread …")
        fsdp = run_fit(args.store, work, devices=2, strategy="fsdp", steps=steps, batch=batch, backbone=args.backbone)
    figures = {
        "backbone": args.backbone, "batch_per_process": batch, "steps": steps, "warmup_steps": WARMUP_STEPS,
        "repeats": args.repeats, "plain_loop": plain, "fit_single": single, "fit_ddp2": ddp, "fit_fsdp2": fsdp,
        "plain_ddp2": plain2,
        "samples_per_s_each_repeat": {"plain_loop": [r["samples_per_s"] for r in plains],
                                      "fit_single": [r["samples_per_s"] for r in singles],
                                      "fit_ddp2": [r["samples_per_s"] for r in ddps],
                                      "plain_ddp2": [r["samples_per_s"] for r in plain_ddps]},
        "ratio_fit_vs_plain": single["samples_per_s"] / plain["samples_per_s"],
        "ratio_ddp2_vs_single": ddp["samples_per_s"] / single["samples_per_s"],
        "ratio_plain_ddp2_vs_plain": plain2["samples_per_s"] / plain["samples_per_s"],
        "ratio_fsdp_vs_ddp_state_bytes": fsdp["state_bytes_rank0"] / max(ddp["state_bytes_rank0"], 1),
        "goals": {"fit_vs_plain": ">= 0.95", "ddp2_vs_single": ">= 1.8", "fsdp_vs_ddp_state_bytes": "<= 0.6"},
    }
    print(
        f"{args.backbone}, batch {batch} per process, {steps - WARMUP_STEPS} timed steps:\n"
        f"  plain loop {plain['samples_per_s']:.1f} samples/s; eoscale fit {single['samples_per_s']:.1f} samples/s "
        f"= {figures['ratio_fit_vs_plain']:.2f}× (goal ≥ 0.95)\n"
        f"  DDP 2×1 {ddp['samples_per_s']:.1f} samples/s = {figures['ratio_ddp2_vs_single']:.2f}× one process (goal ≥ 1.8); "
        f"plain PyTorch DDP here: {plain2['samples_per_s']:.1f} = {figures['ratio_plain_ddp2_vs_plain']:.2f}× the plain loop\n"
        f"  per-rank params+grads+optimizer state: DDP {ddp['state_bytes_rank0'] / 2**20:.1f} MiB, "
        f"FSDP2 {fsdp['state_bytes_rank0'] / 2**20:.1f} MiB = {figures['ratio_fsdp_vs_ddp_state_bytes']:.2f}× (goal ≤ 0.6)"
    )
    if args.record:
        print(f"recorded in {record('train', figures, directory=args.record, seeds={'plain loop initial weights': 0})}")
    return 0
