"""`eoscale bench gpu`: what one accelerator gives eoscale's training; the Python half of `scripts/gpu-check.sh`.

1. Training throughput of a segmentation ViT-B/16 (bf16 autocast on CUDA) on in-memory tiles, and its MFU:
   the model's FLOPs per step counted by `torch.utils.flop_counter` (forward + backward) × steps/s, over the
   device's peak dense bf16 FLOP/s (`PEAK_TFLOPS` by device name, or `--peak-tflops`).
2. The same training step fed by the tile store's loader (`TileDataModule`): the data-wait share, the part
   of each step spent blocked on the loader at that speed (0: the loader keeps up; near 1: input-bound), and
   the samples/s against step 1's (the baseline measured in the same run).
3. One FSDP2 (`fully_shard`) training step on a world of one (NCCL on CUDA, gloo on CPUs): that the sharded
   path runs on this device, its samples/s against step 1's, and its peak memory.

Figures go to `<record>/gpu-<device>.json` with the machine. `--size tiny` (a 2-block ViT on 32-px tiles,
a few steps) is for checking the program itself on a CPU; `full` is the measurement (224-px tiles, ViT-B/16).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from eoscale.errors import InputError
from eoscale.paths import Paths

# dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from the vendors' data sheets
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "A40": 150.0}
SIZES = {
    # backbone, tile px, batch, timed steps, repeats
    "full": ("vit_base_patch16_224", 224, 64, 30, 3),
    "tiny": ("vit_tiny_patch16_224", 32, 4, 3, 2),
}
WARMUP = 3


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store (scripts/gpu-check.sh makes one with eoscale synth + ingest)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="(default: %(default)s)")
    parser.add_argument("--size", default="full", choices=SIZES, help="full: ViT-B/16 at 224 px; tiny: a check of "
                        "this program on a CPU (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, help="tiles per step (default: 64 full, 4 tiny)")
    parser.add_argument("--steps", type=int, help="timed steps per measurement (default: 30 full, 3 tiny)")
    parser.add_argument("--workers", type=int, default=min(8, max(1, len(os.sched_getaffinity(0)) - 2)),
                        help="loader workers for step 2 (default: %(default)s)")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak dense bf16 TFLOP/s, for the MFU "
                        "(default: known by device name: " + ", ".join(f"{k} {v:g}" for k, v in PEAK_TFLOPS.items()) + ")")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible to this process; use --device cpu to check the program")
    if not Path(args.store).is_dir():
        raise InputError(f"no tile store at {args.store!r}: make one with 'eoscale synth' and 'eoscale ingest'")
    backbone, tile, batch, steps, repeats = SIZES[args.size]
    batch, steps = args.batch_size or batch, args.steps or steps
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    dm = _datamodule(args.store, batch, args.workers, tile)
    bands, classes = dm.num_bands, dm.num_classes
    model = _model(backbone, bands, classes, tile, args.size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randn(batch, bands, tile, tile, device=device)
    y = torch.randint(0, classes, (batch, tile, tile), device=device)
    flops = _step_flops(model, x, y, device)

    memory = _bench(model, optimizer, x, y, device, steps, repeats)
    loader = _bench_loader(model, optimizer, dm, device, steps, repeats)
    fsdp = _fsdp_step(backbone, bands, classes, tile, args.size, x, y, device, steps)
    step_s = memory["step_s"]
    figures = {
        "device": args.device, "device_name": name, "size": args.size, "backbone": backbone, "tile": tile,
        "batch_size": batch, "steps": steps, "repeats": repeats, "precision": "bf16-mixed" if device.type == "cuda" else "32-true",
        "train_in_memory": {"samples_per_s": batch / step_s, "step_s": step_s, "step_s_each_repeat": memory["each"],
                            "flops_per_step": flops, "tflops_per_s": flops / step_s / 1e12,
                            "peak_tflops": peak, "mfu": flops / step_s / (peak * 1e12) if peak else None,
                            "peak_memory_mb": memory["peak_mb"]},
        "train_from_loader": {**loader, "samples_per_s": batch / loader["step_s"],
                              "x_in_memory": step_s / loader["step_s"]},
        "fsdp2_world_1": {**fsdp, "samples_per_s": batch / fsdp["step_s"], "x_in_memory": step_s / fsdp["step_s"]},
    }
    _print(figures)
    if args.record:
        path = record(f"gpu-{args.device}", figures, directory=args.record)
        print(f"recorded in {path}")
    return 0


def _datamodule(store: str, batch: int, workers: int, tile: int):
    from eoscale.data.datamodule import TileDataModule

    dm = TileDataModule(store, batch_size=batch, num_workers=workers)
    dm.setup("fit")
    if dm.tile_size != tile:
        raise InputError(f"the store {store!r} has {dm.tile_size}-px tiles; this size needs {tile}-px tiles "
                         f"(eoscale ingest --tile-size {tile})")
    return dm


def _model(backbone: str, bands: int, classes: int, tile: int, size: str) -> torch.nn.Module:
    from eoscale.models.factory import build_model

    extra = {"depth": 2} if size == "tiny" else {}  # the tiny check: two blocks are enough to run every path
    return build_model(backbone, in_chans=bands, num_classes=classes, img_size=tile, **extra)


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def _train_step(model, optimizer, x, y, device) -> None:
    with _autocast(device):
        loss = torch.nn.functional.cross_entropy(model(x), y, ignore_index=255)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step_flops(model, x, y, device) -> int:
    """FLOPs of one forward + backward (torch.utils.flop_counter counts matmuls and convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, _autocast(device):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    with counter:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def _bench(model, optimizer, x, y, device, steps: int, repeats: int) -> dict:
    model.train()
    for _ in range(WARMUP):
        _train_step(model, optimizer, x, y, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    each = []
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        for _ in range(steps):
            _train_step(model, optimizer, x, y, device)
        _sync(device)
        each.append((time.perf_counter() - started) / steps)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"step_s": statistics.median(each), "each": each, "peak_mb": peak}


def _bench_loader(model, optimizer, dm, device, steps: int, repeats: int) -> dict:
    """Training steps on the loader's batches: time blocked in `next()` (the data wait) against the step."""
    shares, step_times = [], []
    for _ in range(repeats):
        with dm.train_dataloader() as loader:  # one loader a repeat: its workers stop at the end of it
            batches = iter(loader)
            waited, started, done = 0.0, None, 0
            while done < WARMUP + steps:
                t0 = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    batches = iter(loader)
                    continue
                batch = dm.normalise({k: v.to(device, non_blocking=True) for k, v in batch.items()})
                _sync(device)
                if done == WARMUP:
                    started, waited = t0, 0.0
                waited += time.perf_counter() - t0
                _train_step(model, optimizer, batch["image"], batch["label"], device)
                _sync(device)
                done += 1
            total = time.perf_counter() - started
        shares.append(waited / total)
        step_times.append(total / steps)
    return {"step_s": statistics.median(step_times), "data_wait_share": statistics.median(shares),
            "data_wait_share_each_repeat": shares, "workers": dm.num_workers}


def _fsdp_step(backbone, bands, classes, tile, size, x, y, device, steps: int) -> dict:
    """FSDP2 on a world of one: the sharded training path (`eoscale.train.strategies.fsdp.shard_model`) on this device."""
    import torch.distributed as dist

    from eoscale.train.strategies.fsdp import shard_model

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{tmp}/rendezvous",
                                rank=0, world_size=1)
        try:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(device.type, (1,))
            model = _model(backbone, bands, classes, tile, size).to(device)
            model = shard_model(model, mesh, precision="bf16-mixed" if device.type == "cuda" else None)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            timed = _bench(model, optimizer, x, y, device, steps, 1)
        finally:
            dist.destroy_process_group()
    return {"step_s": timed["step_s"], "peak_memory_mb": timed["peak_mb"]}


def _print(f: dict) -> None:
    mem, load, fsdp = f["train_in_memory"], f["train_from_loader"], f["fsdp2_world_1"]
    mfu = f"{mem['mfu']:.1%}" if mem["mfu"] is not None else "– (no known peak for this device: --peak-tflops)"
    print(f"{f['backbone']} at {f['tile']} px, batch {f['batch_size']}, {f['precision']} on {f['device_name']}")
    print(f"  training, in-memory tiles : {mem['samples_per_s']:,.1f} samples/s, {mem['tflops_per_s']:,.2f} TFLOP/s, MFU {mfu}")
    print(f"  training, from the loader : {load['samples_per_s']:,.1f} samples/s ({load['x_in_memory']:.2f}× in-memory), "
          f"data wait {load['data_wait_share']:.0%} of a step ({load['workers']} workers)")
    print(f"  FSDP2 step, world of one  : {fsdp['samples_per_s']:,.1f} samples/s ({fsdp['x_in_memory']:.2f}× in-memory)")
