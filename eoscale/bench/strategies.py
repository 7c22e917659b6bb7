"""`eoscale bench strategies`: DDP, FSDP2, ZeRO-2 and ZeRO-3 on the same model at W=2, and `eoscale plan` beside them.

One torchrun of two CPU ranks (gloo, one thread each) fits the ViT-S of `configs/vit_s16_seg.yaml` on the given tile
store (its tile size; fp32) under each strategy's fragment in `configs/strategy/`, in turns: the order alternates
between repeats (DDP, FSDP2, ZeRO-2, ZeRO-3, then backwards), so a neighbour's load falls on every strategy alike.
A callback (`Probe`) times each step after a warm-up and measures, at step 2, the bytes of parameters, gradients and
optimizer state each rank holds (`eoscale.train.planning.state`). Figures, each ÷ DDP's from the same run:

- per-rank state bytes (goals: ZeRO-3 and FSDP2 ≤ 0.6×, ZeRO-2 ≤ 0.75×) with the planner's prediction
  (`eoscale.train.planning.plan.estimate`) and its error;
- step time: the median step of each fit, the median over repeats, ÷ DDP's.

    eoscale bench strategies runs/quickstart/tiles.zarr --repeats 3 --record benchmarks
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

from eoscale.errors import InputError, InputNotFoundError
from eoscale.paths import Paths

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "vit_s16_seg.yaml"
STRATEGIES = {"ddp": "ddp", "fsdp": "fsdp2", "zero2": "zero2", "zero3": "zero3"}  # fragment: planner's name
GOALS = {"fsdp": 0.6, "zero2": 0.75, "zero3": 0.6}  # state ÷ DDP's
STATE_STEP = 2  # gradients and optimizer state both exist from here on


class Probe(Callback):
    """Each step's seconds and, at `STATE_STEP`, this rank's state bytes; written to `<folder>/rank<r>.json`."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.seconds: list[float] = []
        self.state: dict | None = None
        self._started = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seconds.append(time.perf_counter() - self._started)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == STATE_STEP:
            from eoscale.train.planning.state import measure_state

            self.state = measure_state(pl_module, optimizer).to_dict()

    def on_train_end(self, trainer, pl_module) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"rank{trainer.global_rank}.json").write_text(
            json.dumps({"seconds": self.seconds, "state": self.state, "world_size": trainer.world_size}))


def _overlay(work: Path, store: str, batch: int, depth: int | None) -> Path:
    """The store, batch and (for a quick run) depth on top of the ViT-S config, as fit and plan both read it."""
    path = work / "overlay.yaml"
    kwargs = f"\n    backbone_kwargs: {{depth: {depth}}}" if depth else ""
    path.write_text(f"model:\n  init_args:\n    drop_path_rate: 0.0{kwargs}\n"
                    f"data:\n  init_args:\n    store: {store}\n    batch_size: {batch}\n    num_workers: 0\n"
                    "    augment: false\n")
    return path


def _fit_args(work: Path, overlay: Path, strategy: str, repeat: int, steps: int) -> list[str]:
    folder = work / f"{strategy}-{repeat}"
    return ["fit", "--config", str(CONFIG), "--config", str(overlay),
            "--config", str(ROOT / "configs" / "strategy" / f"{strategy}.yaml"),
            "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.precision", "32-true",
            "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "0",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--trainer.logger", "false",
            "--checkpoint.save_top_k", "0", "--checkpoint.save_last", "false",
            "--trainer.default_root_dir", str(folder / "run"),
            "--trainer.callbacks+=eoscale.bench.strategies.Probe", f"--trainer.callbacks.folder={folder / 'probe'}"]


def _worker(argv: list[str]) -> None:
    """One rank of the torchrun: every strategy, `repeats` times, alternating the order."""
    from eoscale.train.launch.main import main as fit

    work, overlay, steps, repeats, *strategies = Path(argv[0]), Path(argv[1]), int(argv[2]), int(argv[3]), *argv[4:]
    for repeat in range(repeats):
        for strategy in (strategies if repeat % 2 == 0 else strategies[::-1]):
            fit(_fit_args(work, overlay, strategy, repeat, steps))


def measure(store: str, *, steps: int, repeats: int, batch: int, warmup: int, depth: int | None,
            strategies: list[str]) -> dict:
    """Run the fits of `strategies` (DDP first) and the planner; the figures `run` prints and records."""
    from eoscale.train.planning.model_facts import facts_from_config
    from eoscale.train.planning.plan import estimate

    with tempfile.TemporaryDirectory(prefix="eoscale-bench-strategies-") as tmp:
        work = Path(tmp)
        overlay = _overlay(work, store, batch, depth)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               "-m", "eoscale.bench.strategies", str(work), str(overlay), str(steps), str(repeats),
                               *strategies],
                              cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the strategies' torchrun failed:\n{done.stderr[-4000:]}")
        wall = time.perf_counter() - started
        reports = {s: [[json.loads((work / f"{s}-{r}" / "probe" / f"rank{k}.json").read_text()) for k in (0, 1)]
                       for r in range(repeats)] for s in strategies}
        facts = facts_from_config([str(CONFIG), str(overlay)])
    figures: dict = {"model": facts.name, "params": facts.params, "tile": facts.tile, "batch_per_rank": batch,
                     "world_size": 2, "precision": "32-true", "steps": steps, "warmup_steps": warmup,
                     "repeats": repeats, "wall_s": round(wall, 1), "strategies": {}}
    step = {s: [statistics.median(rank0["seconds"][warmup:]) for rank0, _ in reports[s]] for s in strategies}
    for s in strategies:
        planned = STRATEGIES[s]
        state = max(rank["state"]["total"] for rank in reports[s][0])  # the larger rank (FSDP2's halves differ)
        predicted = estimate(facts, planned, 2, precision="32-true").state
        figures["strategies"][s] = {
            "state_bytes_per_rank": state, "state_parts_rank0": reports[s][0][0]["state"],
            "planned_state_bytes": round(predicted), "planner_error": round(predicted / state - 1, 4),
            "step_s_each_repeat": [round(v, 4) for v in step[s]], "step_s": round(statistics.median(step[s]), 4)}
    ddp = figures["strategies"]["ddp"]
    for s, row in figures["strategies"].items():
        row["state_vs_ddp"] = round(row["state_bytes_per_rank"] / ddp["state_bytes_per_rank"], 4)
        row["step_vs_ddp"] = round(row["step_s"] / ddp["step_s"], 3)
        if s in GOALS:
            row["state_goal"] = GOALS[s]
            row["state_goal_met"] = row["state_vs_ddp"] <= GOALS[s]
    figures["planner_within_10_percent"] = all(abs(r["planner_error"]) <= 0.10 for r in figures["strategies"].values())
    return figures


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store (its tile size is the model's; e.g. the quick start's)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per fit (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the step time (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="turns of all four strategies (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="tiles per rank and step (default: %(default)s)")
    parser.add_argument("--depth", type=int, default=None, help="ViT blocks (default: the config's 12; fewer for a quick run)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help="fragments of configs/strategy/ to compare with DDP (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    if not Path(args.store).exists():
        raise InputNotFoundError(f"no tile store at {args.store!r}: run 'eoscale ingest' first")
    if args.steps < max(args.warmup, STATE_STEP) + 2 or args.repeats < 1 or args.batch < 1:
        raise InputError(f"--steps {args.steps} leaves fewer than 2 timed steps after --warmup {args.warmup} and the "
                         f"state measurement at step {STATE_STEP} (or --repeats/--batch below 1): give more steps")
    strategies = ["ddp", *(s for s in args.strategies.split(",") if s and s != "ddp")]  # DDP: the baseline
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise InputError(f"--strategies {args.strategies!r}: {unknown[0]!r} is not one of {', '.join(STRATEGIES)}")
    figures = measure(str(Path(args.store).resolve()), steps=args.steps, repeats=args.repeats, batch=args.batch,
                      warmup=args.warmup, depth=args.depth, strategies=strategies)
    print(f"{figures['model']} ({figures['params'] / 1e6:.2f} M parameters), tile {figures['tile']}, batch "
          f"{figures['batch_per_rank']} a rank, W=2, fp32, {figures['repeats']} repeats of {figures['steps']} steps")
    print(f"{'strategy':<8} {'state/rank':>12} {'÷ DDP':>7} {'goal':>6} {'planned':>12} {'error':>7} {'step s':>8} {'÷ DDP':>7}")
    for s, row in figures["strategies"].items():
        goal = f"≤{row['state_goal']:.2f}" if "state_goal" in row else ""
        print(f"{s:<8} {row['state_bytes_per_rank'] / 1e6:>10.2f}MB {row['state_vs_ddp']:>7.3f} {goal:>6} "
              f"{row['planned_state_bytes'] / 1e6:>10.2f}MB {row['planner_error']:>+7.1%} {row['step_s']:>8.3f} "
              f"{row['step_vs_ddp']:>7.2f}")
    if args.record:
        from eoscale.bench.record import record

        print(f"recorded in {record('strategies', figures, directory=args.record)}")
    return 0


if __name__ == "__main__":  # a rank of the torchrun that `measure` starts
    _worker(sys.argv[1:])
