"""Recording benchmark figures with the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

import psutil


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
        "cores_available": len(os.sched_getaffinity(0)),
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


def record(name: str, figures: dict, *, directory: str | os.PathLike = "benchmarks") -> Path:
    """Append one run's figures to `<directory>/<name>.json` (a list of runs, newest last)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append({"benchmark": name, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(), **figures})
    path.write_text(json.dumps(runs, indent=2) + "\n")
    return path
