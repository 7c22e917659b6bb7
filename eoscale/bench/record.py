"""Recording benchmark figures with what they depend on: the machine, and the code and command that made them.

Every record appended by `record` carries, beside the figures, its `date`, its `machine` and its `provenance`:
the process's `argv`, the `command` as `eoscale bench NAME …`, the git `commit` of the eoscale source tree and
whether that tree was `dirty` (the files that differ, records under `benchmarks/` left out since writing them is
what a benchmark does), the versions of the libraries the figures depend on, and the benchmark's `seeds` (null
where it takes none). Records written before this carry what they had; nothing rewrites them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

import psutil

import eoscale

# the libraries whose versions the figures depend on (distribution names)
VERSIONED = ("torch", "torchvision", "timm", "lightning", "torchmetrics", "numpy", "zarr", "rasterio", "mlflow")
# keys `record` writes itself: a benchmark's figures may not use them
RESERVED = ("benchmark", "date", "machine", "provenance")
_DIRTY_PATHS_KEPT = 20

_command: ContextVar[list[str] | None] = ContextVar("eoscale_bench_command", default=None)


@contextlib.contextmanager
def invoked_as(command: list[str]) -> Iterator[None]:
    """Record `command` (`["eoscale", "bench", NAME, …]`) as the command line of records written inside: a
    benchmark run in-process (`eoscale.cli.main([...])`) has another program's `sys.argv`."""
    token = _command.set(list(command))
    try:
        yield
    finally:
        _command.reset(token)


def machine() -> dict:
    """What the figures depend on: CPU, cores, memory, GPU if any, and the versions of the stack."""
    import numpy
    import rasterio
    import zarr

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "host": socket.gethostname(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_1min_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "zarr": zarr.__version__,
        "rasterio": rasterio.__version__,
        "gdal": rasterio.__gdal_version__,
    }
    try:
        info["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                     text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def versions() -> dict:
    """python, eoscale and each of `VERSIONED` (None where it is not installed), read without importing them."""
    found: dict[str, str | None] = {"python": platform.python_version(), "eoscale": eoscale.__version__}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def source_tree() -> Path:
    """The folder that holds the `eoscale` package being run (a git checkout's root, or site-packages)."""
    return Path(eoscale.__file__).resolve().parent.parent


def git_state(root: Path | None = None) -> dict:
    """`commit` and `dirty` of the eoscale source tree at `root`, with `dirty_paths` (the first few), or both None
    and `git_unavailable` saying why (not a git checkout, no git): a record is still written."""
    root = source_tree() if root is None else root

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"git {argv[0]} failed")
        return done.stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        # a package installed into a venv that lies inside some checkout is not that checkout's code
        if top != root.resolve() or not (top / "eoscale" / "__init__.py").is_file():
            raise RuntimeError(f"{root} is not the root of a git checkout of eoscale")
        commit = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain=v1", "--", ".", ":(exclude)benchmarks").splitlines()]
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        return {"commit": None, "dirty": None, "git_unavailable": f"{type(error).__name__}: {error}"}
    return {"commit": commit, "dirty": bool(changed), "dirty_paths": changed[:_DIRTY_PATHS_KEPT]}


def command_line(name: str) -> str | None:
    """The command as `eoscale bench NAME …`: the one `eoscale bench` ran, else this process's own if it is
    eoscale's (`eoscale …` or `python -m eoscale …`), else None (another program called the benchmark)."""
    command = _command.get()
    if command is not None:
        return shlex.join(command)
    program = Path(sys.argv[0]).name if sys.argv else ""
    if program in ("eoscale", "__main__.py") and sys.argv[1:3] == ["bench", name]:
        return shlex.join(["eoscale", *sys.argv[1:]])
    return None


def provenance(name: str, seeds: dict | None = None) -> dict:
    """What ties a record to the code and the command that made it (see the module's docstring)."""
    return {"argv": list(sys.argv), "command": command_line(name), **git_state(), "versions": versions(),
            "seeds": seeds}


def record(name: str, figures: dict, *, directory: str | os.PathLike = "benchmarks", seeds: dict | None = None) -> Path:
    """Append one run's figures to `<directory>/<name>.json` (a list of runs, newest last), with the machine and
    the provenance; `seeds`: the seeds the run took, by what they seed (None: the benchmark takes none)."""
    clash = sorted(set(RESERVED) & set(figures))
    if clash:
        raise ValueError(f"figures of {name!r} use the record's own keys {clash}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append({"benchmark": name, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
                 "provenance": provenance(name, seeds), **figures})
    path.write_text(json.dumps(runs, indent=2) + "\n")
    return path
