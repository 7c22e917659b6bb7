"""The Slurm `serve` template: one node, one GPU where the profile has GPUs, the time limit, the address printed,
and `eoscale serve` with exactly the words given (run here with `srun` and `module` stubbed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from eoscale.errors import InputError
from eoscale.slurm import load_profile, render
from tests.slurm.test_render import sbatch_lines


@pytest.mark.parametrize("profile", ["juwels-booster", "jureca-dc", "local"])
def test_the_serve_job_is_one_node_with_a_time_limit(profile):
    script = render(profile, "serve", {"checkpoint": "models:/landcover@champion", "account": "proj42",
                                       "time": "04:00:00", "adapters": "alps forest"})
    options = sbatch_lines(script)
    assert options["--nodes"] == "1" and options["--ntasks"] == "1" and options["--time"] == "04:00:00"
    assert ("--gres" in options) == bool(load_profile(profile).defaults["gpus_per_node"])
    if "--gres" in options:
        assert options["--gres"] == "gpu:1"
    assert "--checkpoint models:/landcover@champion --http-port 8000 --grpc-port 8001" in script
    assert "--adapter alps --adapter forest" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_serve_job_prints_its_address_and_runs_serve(tmp_path):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$STUB_OUT"\n')
    (stubs / "module").write_text("#!/usr/bin/env bash\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").write_text("")
    script = render("local", "serve", {"checkpoint": "best model.ckpt", "http_port": "9000", "grpc_port": "9001",
                                       "venv": str(tmp_path / "venv"), "workdir": str(tmp_path),
                                       "args": "--name lc"})
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "STUB_OUT": str(tmp_path / "srun.txt"),
           "SLURM_JOB_ID": "42"}
    done = subprocess.run(["bash"], input=script, text=True, capture_output=True, env=env, check=True)
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    assert f"eoscale serve: job 42 serves at http://{host}:9000 (gRPC {host}:9001)" in done.stdout
    words = Path(tmp_path / "srun.txt").read_text().splitlines()
    assert words == ["--ntasks=1", "eoscale", "serve", "--checkpoint", "best model.ckpt", "--http-port", "9000",
                     "--grpc-port", "9001", "--metrics-port", "8002", "--max-batch", "64", "--name", "lc"]


def test_bad_serve_settings_are_one_line():
    with pytest.raises(InputError, match="template 'serve' needs checkpoint"):
        render("local", "serve", {})
    with pytest.raises(InputError, match="bad value for http_port"):
        render("local", "serve", {"checkpoint": "m.ckpt", "http_port": "80"})
    with pytest.raises(InputError, match="does not apply to template 'serve'"):
        render("local", "serve", {"checkpoint": "m.ckpt", "scenes": "x.txt"})
