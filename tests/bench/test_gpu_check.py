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


# an `eoscale` that records each command line and runs nothing: what the script would run at a GPU's size
FAKE_EOSCALE = "#!/usr/bin/env bash\n{ printf '%s\\t' \"$@\"; echo; } >> \"$EOSCALE_CALLS\"\n"


def _parse(argv: list[str]):
    """One `eoscale …` command line through the command's own parser (an unknown option exits 2)."""
    import argparse
    import importlib

    from eoscale.bench.command import BENCHMARKS
    from eoscale.cli import COMMANDS

    name, rest = argv[0], argv[1:]
    module = COMMANDS[name][0]
    if name == "bench":
        module, rest = BENCHMARKS[rest[0]][0], rest[1:]
    parser = argparse.ArgumentParser(prog=f"eoscale {name}")
    importlib.import_module(module).configure(parser)
    if name == "bench":
        parser.add_argument("--record")  # as eoscale.bench.command adds it to every benchmark
    return parser.parse_args(rest)


def test_adapters_only_runs_the_decisive_experiment_at_the_gpu_budget(tmp_path: Path, unexpanded):
    """Step 6's wiring: what the script runs, through each command's own parser. (Running it at --size tiny on the
    CPU, a minute of the suite, repeated what tests/bench/test_bench_adapters.py runs: `bench adapters` end to end on
    tiny stores, MAE, LoRA fits, the held-out scores and the record.)"""
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"  # a checkout without .venv: the recording eoscale is found
    (repo / "scripts").mkdir(parents=True)
    bin_.mkdir()
    (repo / "scripts" / "gpu-check.sh").write_text((ROOT / "scripts" / "gpu-check.sh").read_text())
    (bin_ / "eoscale").write_text(FAKE_EOSCALE)
    (bin_ / "eoscale").chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(PATH=f"{bin_}:{env['PATH']}", EOSCALE_CALLS=str(calls))
    done = subprocess.run(["bash", str(repo / "scripts" / "gpu-check.sh"), "--adapters-only", "--out", "check"],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "gpu-check: done: figures in benchmarks/adapters.json" in done.stdout
    argvs = [line.split("\t")[:-1] for line in calls.read_text().splitlines()]
    assert [a[0] for a in argvs] == ["synth"] * 3 + ["ingest"] * 3 + ["bench"]  # steps 1-5 not run
    # the recording eoscale made no files: the file options' globs are parsed as given (the `unexpanded` fixture)
    synth, ingest, (bench,) = [_parse(a) for a in argvs[:3]], [_parse(a) for a in argvs[3:6]], [_parse(a) for a in argvs[6:]]
    assert sorted((s.scenes, s.seed, s.size) for s in synth) == [(3, 300, 640), (10, 200, 640), (30, 100, 640)]
    unlabelled, labelled, heldout = ingest
    assert unlabelled.labels is None and labelled.labels and heldout.labels
    assert heldout.split == (0.0, 0.0, 1.0) and {i.tile_size for i in ingest} == {64}
    assert (bench.mae_steps, bench.mae_batch_size, bench.steps) == (3000, 128, 300)
    assert sorted(bench.methods) == ["full", "linear", "lora", "scratch"] and bench.fractions == [1, 0.1, 0.01]
    assert (bench.pretrain_store, bench.heldout, bench.store) == ("check/unlab.zarr", "check/held.zarr", "check/lab.zarr")
    assert bench.record == "benchmarks" and bench.threads == 0
