"""`--set nsys=true`: each rank of a training job runs under `nsys profile`, with its own report file and the
capture range of `eoscale.train.callbacks.steptime`. The rendered script runs here with stand-ins: an `srun` that starts
its command once per task (SLURM_PROCID 0 and 1) and an `nsys` that records what it was given."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from eoscale.errors import InputError
from eoscale.slurm import render
from eoscale.train.callbacks.steptime import CAPTURE_RANGE
from tests.processes import VENV

SRUN = """#!/usr/bin/env python3
import os, subprocess, sys
words = sys.argv[1:]
while words and words[0].startswith("--"):
    words.pop(0)
for rank in range(2):
    subprocess.run(words, env={**os.environ, "SLURM_PROCID": str(rank)}, check=True)
"""
NSYS = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["NSYS_RECORD"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "rank": os.environ["SLURM_PROCID"],
                        "register_only": os.environ.get("NSYS_NVTX_PROFILER_REGISTER_ONLY")}) + "\\n")
"""


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("nsys", NSYS), ("module", "#!/bin/sh\n"),
                       ("scontrol", "#!/bin/sh\nprintf 'node1\\n'\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_each_rank_runs_under_nsys_with_its_own_report(stand_ins: Path, tmp_path: Path):
    script = render("local", "fit", {"config": ["configs/smoke.yaml"], "nsys": "true", "nsys_start": "20",
                                     "nsys_steps": "3", "venv": str(VENV)})
    record = tmp_path / "nsys.jsonl"
    env = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node1", "NSYS_RECORD": str(record)}
    env.pop("SLURM_CONF", None)
    done = subprocess.run(["bash"], input=script, text=True, capture_output=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["rank"] for c in calls] == ["0", "1"]
    for call in calls:
        argv = call["argv"]
        assert argv[0] == "profile" and call["register_only"] == "0"
        assert f"--nvtx-capture={CAPTURE_RANGE}" in argv and "--capture-range=nvtx" in argv
        # nsys itself expands %q{VAR} per process: one report per rank and job
        assert "--output=logs/nsys/%q{SLURM_JOB_ID}-rank%q{SLURM_PROCID}" in argv
        command = argv[argv.index("eoscale"):]
        assert command[:2] == ["eoscale", "fit"]
        assert "--steptime.capture_start=20" in command and "--steptime.capture_steps=3" in command
    assert (tmp_path / "logs" / "nsys").is_dir()


def test_without_nsys_the_command_is_unwrapped():
    script = render("local", "fit", {"config": ["configs/smoke.yaml"]})
    assert "nsys" not in script and "capture_start" not in script


def test_a_bad_nsys_value_is_one_line():
    with pytest.raises(InputError, match="bad value for nsys: expected true or false"):
        render("local", "fit", {"config": ["configs/smoke.yaml"], "nsys": "maybe"})
    with pytest.raises(InputError, match="does not apply to template 'predict'"):
        render("local", "predict", {"checkpoint": "m.ckpt", "scenes": "s.txt", "output": "maps", "nsys": "true"})
