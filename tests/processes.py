"""The repository's paths, and `eoscale` run in a fresh process as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"


INHERITED_NOT = ("MLFLOW_TRACKING_URI", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                 "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID")


def run_module(module: str, args: list[str], cwd: Path, *, timeout: float = 600,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in a fresh process, with the environment a user's run has."""
    # no MLflow URI (the embedded default), and no rendezvous of another process group (a stale MASTER_PORT makes
    # rank 0 fail to bind it while rank 1 waits on whoever holds it)
    environ = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    environ.update({"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1",
                    "PYTHONWARNINGS": "ignore", **(env or {})})
    # its own session, so that on a timeout every rank it started is killed, not only the first
    with subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise AssertionError(f"{module} {' '.join(args[:1])} ran past {timeout:.0f} s:\n{stderr[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_cli(args: list[str], cwd: Path, *, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m eoscale ARGS` in a fresh process (Lightning's launcher reruns it once per rank)."""
    return run_module("eoscale", args, cwd, timeout=timeout, env=env)


def torchrun(module: str, args: list[str], cwd: Path, *, timeout: float = 600, ranks: int = 2
             ) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` on `ranks` local ranks under torchrun (standalone rendezvous, gloo on CPUs)."""
    return run_module("torch.distributed.run", ["--standalone", "--nproc-per-node", str(ranks), "-m", module, *args],
                      cwd, timeout=timeout)
