"""`scripts/gpu-check.sh` at a tiny size on the CPU: every step runs, and the JSON it records has the figures
and the machine. (On a GPU node the same script measures; see docs/how-to/profiling.md.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.processes import ROOT


def _check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=600)


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_at_a_tiny_size(tmp_path: Path):
    out, record = tmp_path / "check", tmp_path / "benchmarks"
    done = _check("--device", "cpu", "--size", "tiny", "--out", str(out), "--record", str(record), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "gpu-check: done" in done.stdout
    (gpu,) = json.loads((record / "gpu-cpu.json").read_text())
    assert gpu["machine"]["cores_available"] >= 1 and gpu["device"] == "cpu" and gpu["size"] == "tiny"
    memory, loader, fsdp = gpu["train_in_memory"], gpu["train_from_loader"], gpu["fsdp2_world_1"]
    assert memory["samples_per_s"] > 0 and memory["flops_per_step"] > 0 and memory["mfu"] is None  # no known peak
    assert 0 <= loader["data_wait_share"] <= 1 and loader["x_in_memory"] > 0
    assert fsdp["samples_per_s"] > 0
    (predict,) = json.loads((record / "predict.json").read_text())
    assert predict["machine"]["cores_available"] >= 1
    (summary,) = (out / "fit" / "profile").glob("*/summary.md")
    assert "Top CPU ops by self time" in summary.read_text()


def test_gpu_check_refuses_a_bad_argument_in_one_line(tmp_path: Path):
    done = _check("--device", "tpu", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "gpu-check.sh: error: --device 'tpu': give cuda or cpu"
    done = _check("--frobnicate", cwd=tmp_path)
    assert done.returncode == 2 and "unknown argument '--frobnicate'" in done.stderr


def test_bench_gpu_without_cuda_is_one_line(tmp_path: Path, capsys):
    from eoscale.cli import main

    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench", "gpu", str(tmp_path), "--device", "cuda"]) == 2
    assert "--device cuda: no CUDA device is visible" in capsys.readouterr().err
