"""`eoscale fit|pretrain --launcher ray`: the same LightningCLI config on N Ray Train workers.

On this machine, a Ray cluster for the run alone (started here, stopped at the end; no dashboard)::

    eoscale fit --launcher ray --workers 2 --config configs/smoke.yaml --data.init_args.store runs/smoke/tiles.zarr

On a running Ray cluster (`ray start --head` on one node, `ray start --address HEAD:6379` on the others; under
Slurm `slurm/ray.sbatch.j2` does this), one worker per GPU::

    eoscale fit --launcher ray --address HEAD:6379 --workers 8 --gpus-per-worker 1 --cpus-per-worker 8 \\
        --max-failures 2 --config configs/vit_s16_seg.yaml

A `TorchTrainer` runs `eoscale.train.launch.ray_worker.train_loop` in every worker. Ray's checkpoints are written to
`<trainer.default_root_dir>/ray/` (a shared file system on a multi-node cluster); with `--max-failures K`, a lost
worker (a killed process, a dead node) makes Ray start the group again from the last checkpoint, up to K times,
and the run ends at the step it planned, in the same MLflow run.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

from eoscale._compat.ray import import_ray_train
from eoscale.errors import InputError, UserError
from eoscale.train.launch.options import LauncherOptions

CONNECT_SECONDS = 5.0  # how long an --address may take to accept a connection before it counts as unreachable

# the worker environment that Ray's processes do not inherit from this one on a cluster started elsewhere
FORWARDED_ENV = ("PYTHONPATH", "MLFLOW_TRACKING_URI", "OMP_NUM_THREADS", "PYTHONWARNINGS", "HF_HUB_OFFLINE",
                 "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


class RayTrainingError(UserError):
    """Ray Train gave up on the run: a worker was lost more often than `--max-failures` allows. Said in one line
    like a user's mistake (which worker, how, the retries used), with exit code 1: the input was not wrong."""

    exit_code = 1


def _ray_quiet() -> None:
    """Ray's own start-up chatter off (the workers' output still comes through, prefixed by Ray)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Ray 2.60 otherwise wants a token for a local cluster
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # each worker's lines, not "[repeated 2x across cluster]"
    os.environ.setdefault("RAY_TRAIN_ENABLE_STATE_TRACKING", "0")
    warnings.filterwarnings("ignore", module=r"ray\..*")


def check_address(address: str) -> None:
    """Refuse, within seconds, an `--address` where nothing accepts a connection (`ray.init` would retry for
    minutes). `auto` (the cluster `ray start` made on this node) and `ray://` clients are left to Ray."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"--address={address!r}: give the Ray head's HOST:PORT (e.g. 10.0.0.1:6379), or leave it "
                         f"out to start a Ray cluster on this machine")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS):
            pass
    except OSError as err:
        raise InputError(f"no Ray cluster answers at --address={address!r} ({err.strerror or err}): start one with "
                         f"'ray start --head --port {port}', or leave out --address to start one here") from None


def default_root_dir(args: list[str]) -> Path:
    """`trainer.default_root_dir` as LightningCLI will resolve it (the last of the flags and the `--config` files
    that set it, else the working directory): where Ray keeps its checkpoints, beside the run's own."""
    found: str | None = None
    words = list(args)
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
        if flag == "--config":
            try:
                loaded = yaml.safe_load(Path(value).read_text()) or {}
            except (OSError, yaml.YAMLError):
                continue  # LightningCLI reports a config it cannot read, in its own words
            root = (loaded.get("trainer") or {}).get("default_root_dir") if isinstance(loaded, dict) else None
            found = str(root) if root else found
        elif flag == "--trainer.default_root_dir":
            found = value
    return Path(found or os.getcwd()).resolve()


def launch(options: LauncherOptions, args: list[str]) -> None:
    """Run LightningCLI `args` (`fit …`) on `options.workers` Ray Train workers; raise on failure."""
    _ray_quiet()
    if options.address:
        check_address(options.address)
    import_ray_train()  # the extra eoscale[ray], or one line saying to install it
    import ray
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from eoscale.train.launch.ray_worker import LAUNCHER_ENV, train_loop

    root = default_root_dir(args)
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    env[LAUNCHER_ENV] = "ray"
    env.setdefault("OMP_NUM_THREADS", str(max(int(options.cpus_per_worker), 1)))
    repo = str(Path(__file__).resolve().parents[3])  # a source checkout run without installing (python -m eoscale)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), repo) if p)
    init: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True,
                            "runtime_env": {"env_vars": env}}
    if options.address:
        init["address"] = options.address
    else:
        # a cluster for this run only: as many CPUs as the workers ask for, even on a smaller machine
        needed = options.workers * options.cpus_per_worker
        init.update(num_cpus=max(os.cpu_count() or 1, int(needed + 0.999)),
                    num_gpus=int(options.workers * options.gpus_per_worker + 0.999))
    started = time.perf_counter()
    ray.init(**init)
    try:
        where = options.address or "a local Ray cluster"
        print(f"eoscale: {args[0]} on {options.workers} Ray Train worker(s) on {where} "
              f"(up in {time.perf_counter() - started:.0f} s), checkpoints in {root / 'ray'}", flush=True)
        use_gpu = options.gpus_per_worker > 0
        resources = {"CPU": options.cpus_per_worker} | ({"GPU": options.gpus_per_worker} if use_gpu else {})
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"args": args, "cwd": os.getcwd(), "accelerator": "gpu" if use_gpu else "cpu"},
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(num_workers=options.workers, use_gpu=use_gpu, resources_per_worker=resources),
            run_config=RunConfig(
                name=f"eoscale-{args[0]}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                storage_path=str(root / "ray"),
                failure_config=FailureConfig(max_failures=options.max_failures),
                checkpoint_config=CheckpointConfig(num_to_keep=2),
                worker_runtime_env={"env_vars": env},
                # Ray Train's own progress lines off; its placement-group watcher, which asks the state API (that
                # is, the dashboard: none here), would warn every few seconds
                logging_config=LoggingConfig(log_level="ERROR"),
            ),
        )
        _fit(trainer, options)
        print(f"eoscale: {args[0]} finished on {options.workers} Ray Train worker(s)", flush=True)
    finally:
        ray.shutdown()  # a cluster started here stops with it; a joined one keeps running


def _fit(trainer: Any, options: LauncherOptions) -> None:
    from ray.train import TrainingFailedError

    try:
        trainer.fit()
    except TrainingFailedError as err:
        user = _user_error(err)
        if user is not None:
            raise user from None
        raise RayTrainingError(failure_line(err, options.max_failures)) from None


def _user_error(err: BaseException) -> InputError | None:
    """A user's mistake inside a worker (a bad value, a missing store), as the one line it would be without Ray."""
    failures = getattr(err, "worker_failures", None) or {}
    for failure in failures.values():
        cause = getattr(failure, "cause", None) or failure
        for candidate in (failure, cause, getattr(cause, "__cause__", None)):
            if isinstance(candidate, UserError):
                return candidate  # type: ignore[return-value]
    return None


def failure_line(err: BaseException, max_failures: int) -> str:
    """One line: which worker was lost (rank, pid, node) and how, and the retries that were allowed."""
    failures = getattr(err, "worker_failures", None) or {}
    retries = f"--max-failures {max_failures} used up" if max_failures else "no retries (--max-failures 0)"
    if not failures:
        first = str(err).strip().splitlines()
        return f"Ray Train failed: {first[-1] if first else type(err).__name__}; {retries}"
    # the lost worker's failure (its actor died) before the others' (a collective whose peer went away)
    rank, failure = min(failures.items(), key=lambda item: (not _is_death(item[1]), item[0]))
    text = " ".join(str(failure).split())
    if not _is_death(failure):  # an exception in the worker (its traceback is above, from Ray)
        last = str(failure).strip().splitlines()
        return f"Ray Train worker rank {rank} failed: {last[-1][:300] if last else type(failure).__name__}; {retries}"
    return f"Ray Train worker rank {rank} was lost ({_death_detail(text) or text[:300]}); {retries}"


def _is_death(failure: BaseException) -> bool:
    from ray.exceptions import RayActorError

    inner = getattr(failure, "health_check_failure", None)  # Ray Train's health check found the actor dead
    return isinstance(failure, RayActorError) or isinstance(inner, RayActorError) or "died" in str(failure).lower()


def _death_detail(text: str) -> str | None:
    """pid, node and cause out of Ray's actor-death message (it names them as `pid=N`, `ip=A`, and a cause)."""
    import re

    pid = re.search(r"\bpid[=:]\s*(\d+)", text)
    ip = re.search(r"\bip[=:]\s*([0-9.]+)", text)
    cause = re.search(r"(killed by (?:a )?signal[^.;]*|SIGKILL|exit(?:ed)? (?:with )?code -?\d+|"
                      r"worker (?:process )?(?:unexpectedly )?(?:died|exited)[^.;]*|connection error[^.;]*|"
                      r"OOM[^.;]*|out of memory[^.;]*)", text, re.IGNORECASE)
    parts = [f"pid {pid.group(1)}" if pid else None, f"node {ip.group(1)}" if ip else None,
             cause.group(1).strip() if cause else None]
    parts = [p for p in parts if p]
    return ", ".join(parts) if parts else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as 'eoscale fit --launcher ray …'")
