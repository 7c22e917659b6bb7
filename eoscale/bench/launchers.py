"""`eoscale bench launchers`: the same config on 2 workers under torchrun and under Ray Train (goal ≥ 0.9×).

Both sides run `eoscale fit` with the same config, store, batch and steps, 1 thread a process, DDP over gloo:

- torchrun: `python -m torch.distributed.run --standalone --nproc-per-node 2 -m eoscale fit … --trainer.devices 2`
  (Lightning reads the ranks from torchrun's environment);
- Ray: `python -m eoscale fit --launcher ray --workers 2 …`, a local Ray cluster started and stopped by the run
  (no `--address`), Ray's checkpoint report at every epoch's end included: what a user gets on one machine.

A `LaunchTimer` callback in every run times the steps after `--warmup` up to the last one (whose validation and
checkpoint it leaves out) and notes when the first training batch started: start-up overhead is that moment less
the moment the command was started. The sides run in turns `--repeats` times (Ray first in odd repeats) and the
medians are compared, so a neighbour's load slows both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from eoscale.paths import Paths

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "smoke.yaml"
DDP = ROOT / "configs" / "strategy" / "ddp.yaml"


class LaunchTimer(Callback):
    """Rank 0 writes `output` (JSON): when the first training batch started (epoch seconds), and samples/s over
    the steps from `warmup` to the one before the last."""

    def __init__(self, output: str, warmup: int = 5) -> None:
        self.output, self.warmup = output, warmup
        self.first_batch_at: float | None = None
        self.started: float | None = None
        self.seconds = 0.0
        self.steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.first_batch_at is None:
            self.first_batch_at = time.time()
        if trainer.global_step == self.warmup and self.started is None:
            self.started = time.perf_counter()
        if trainer.global_step == trainer.max_steps - 1 and self.started is not None and not self.steps:
            self.seconds = time.perf_counter() - self.started
            self.steps = trainer.global_step - self.warmup

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_rank != 0:
            return
        batch = trainer.datamodule.batch_size
        Path(self.output).write_text(json.dumps({
            "world_size": trainer.world_size, "first_batch_at": self.first_batch_at, "steps_timed": self.steps,
            "seconds": self.seconds, "samples_per_s": self.steps * batch * trainer.world_size / max(self.seconds, 1e-9),
        }))


def run_side(side: str, store: str, work: Path, *, steps: int, batch: int, warmup: int, tag: str) -> dict:
    """One `eoscale fit` on 2 workers under `side` ('torchrun' or 'ray'); its timer's figures and the overhead."""
    root = work / f"{side}-{tag}"
    root.mkdir(parents=True)
    out = root / "timer.json"
    fit = ["fit", "--config", str(CONFIG), "--config", str(DDP), "--data.init_args.store", str(store),
           "--data.init_args.batch_size", str(batch), "--trainer.max_steps", str(steps),
           "--trainer.val_check_interval", str(steps), "--trainer.default_root_dir", str(root),
           "--trainer.callbacks+=eoscale.bench.launchers.LaunchTimer", f"--trainer.callbacks.output={out}",
           f"--trainer.callbacks.warmup={warmup}"]
    if side == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   "-m", "eoscale", *fit, "--trainer.devices", "2"]
    else:
        command = [sys.executable, "-m", "eoscale", "fit", "--launcher", "ray", "--workers", "2", *fit[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    launched = time.time()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    wall = time.time() - launched
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"{side} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures = json.loads(out.read_text())
    figures.update(startup_s=figures.pop("first_batch_at") - launched, wall_s=wall)
    return figures


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store (e.g. runs/quickstart/tiles.zarr)")
    parser.add_argument("--steps", type=int, default=40, help="training steps per run (default: 40)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timing starts (default: 5)")
    parser.add_argument("--batch-size", type=int, default=8, help="per-worker batch size (default: 8, smoke's)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="the two sides run in turns this many times; medians are compared (default: 3)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.data import read_store_attrs
    from eoscale.errors import InputError

    read_store_attrs(args.store)  # a clear error before any subprocess starts
    if args.steps < args.warmup + 3:
        raise InputError(f"--steps={args.steps}: give at least --warmup + 3 ({args.warmup + 3})")
    runs: dict[str, list[dict]] = {"torchrun": [], "ray": []}
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-launchers-") as tmp:
        for repeat in range(args.repeats):
            order = ("ray", "torchrun") if repeat % 2 == 0 else ("torchrun", "ray")
            for side in order:
                print(f"{side}: eoscale fit on 2 workers ({repeat + 1}/{args.repeats}) …", flush=True)
                runs[side].append(run_side(side, args.store, Path(tmp), steps=args.steps, batch=args.batch_size,
                                           warmup=args.warmup, tag=str(repeat)))
    median = {side: {key: statistics.median(r[key] for r in rs) for key in ("samples_per_s", "startup_s", "wall_s")}
              for side, rs in runs.items()}
    ratio = median["ray"]["samples_per_s"] / median["torchrun"]["samples_per_s"]
    overhead = median["ray"]["startup_s"] - median["torchrun"]["startup_s"]
    figures = {
        "config": "configs/smoke.yaml + configs/strategy/ddp.yaml", "store": str(args.store), "workers": 2,
        "threads_per_worker": 1, "batch_per_worker": args.batch_size, "steps": args.steps, "warmup_steps": args.warmup,
        "repeats": args.repeats, "median": median, "each_repeat": runs,
        "ratio_ray_vs_torchrun_samples_per_s": ratio, "ray_extra_startup_s": overhead,
        "goals": {"ray_vs_torchrun_samples_per_s": ">= 0.9"},
    }
    print(f"2 workers × 1 thread, batch {args.batch_size}, {args.steps - args.warmup - 1} timed steps, "
          f"medians of {args.repeats}:\n"
          f"  torchrun {median['torchrun']['samples_per_s']:.1f} samples/s, start-up {median['torchrun']['startup_s']:.1f} s\n"
          f"  Ray      {median['ray']['samples_per_s']:.1f} samples/s, start-up {median['ray']['startup_s']:.1f} s\n"
          f"  Ray ÷ torchrun: {ratio:.2f}× steady-state samples/s (goal ≥ 0.9), {overhead:+.1f} s start-up")
    if args.record:
        print(f"recorded in {record('launchers', figures, directory=args.record)}")
    return 0
