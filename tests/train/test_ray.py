"""`eoscale fit --launcher ray`: the smoke config on 2 Ray Train workers (CPU, gloo) of one local Ray cluster that
the module's tests share; a worker SIGKILLed mid-run without retries; one-line refusals. (Training to the end, and
a killed worker replaced with --max-failures 1, run in the Slurm Ray job: tests/slurm/test_ray_job.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from eoscale.cli import main as eoscale_main
from tests.processes import INHERITED_NOT, ROOT, VENV, run_cli

CONFIGS = ROOT / "configs"
WORLD, BATCH = 2, 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """`ray start --head --block` (no dashboard), its address; stopped by its process group at the end."""
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([str(VENV / "bin" / "ray"), "start", "--head", "--block", f"--port={port}",
                             f"--ray-client-server-port={_free_port()}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp}", "--disable-usage-stats"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield f"127.0.0.1:{port}"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to 'ray start --block': it stops its processes
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.rmtree(temp, ignore_errors=True)


def _fit(store: Path, root: Path, address: str, *extra: str, steps: int, val_every: int) -> subprocess.CompletedProcess:
    root.mkdir(parents=True, exist_ok=True)
    return run_cli(["fit", "--launcher", "ray", "--workers", str(WORLD), "--address", address,
                    "--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
                    "--data.init_args.batch_size", str(BATCH), "--trainer.max_steps", str(steps),
                    "--trainer.val_check_interval", str(val_every), "--trainer.default_root_dir", str(root),
                    *extra], cwd=root)


@pytest.mark.slow
def test_a_killed_worker_without_retries_fails_in_one_line(ray_cluster, store, tmp_path):
    done = _fit(store, tmp_path, ray_cluster, "--trainer.callbacks+=tests.train.ray_helpers.KillOnce",
                f"--trainer.callbacks.folder={tmp_path}", "--trainer.callbacks.step=1", steps=4, val_every=2)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("eoscale fit: error: Ray Train worker rank 1 was lost"), done.stderr[-3000:]
    assert f"pid {(tmp_path / 'killed').read_text()}" in last and "--max-failures 0" in last
    own = [line for line in done.stderr.splitlines() if " pid=" not in line]  # not forwarded from a Ray process
    assert not any("Traceback" in line for line in own), own


@pytest.mark.timeout(60)  # Ray's own retries on an address where nothing listens take minutes
def test_an_unreachable_address_is_refused_in_one_line(capsys):
    port = _free_port()  # nothing listens there
    code = eoscale_main(["fit", "--launcher", "ray", "--workers", "2", "--address", f"127.0.0.1:{port}",
                         "--config", str(CONFIGS / "smoke.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"no Ray cluster answers at --address='127.0.0.1:{port}'" in err[0]


@pytest.mark.parametrize("args, message", [
    (["--workers", "2"], "--workers is a flag of the Ray launcher: add --launcher ray"),
    (["--launcher", "spark"], "--launcher='spark': choose one of lightning, ray"),
    (["--launcher", "ray", "--workers", "0"], "--workers='0': give an integer of at least 1"),
    (["--launcher", "ray", "--address", "nowhere"], "--address='nowhere': give the Ray head's HOST:PORT"),
])
def test_bad_launcher_flags_are_refused_in_one_line(args, message, capsys):
    assert eoscale_main(["fit", *args, "--config", str(CONFIGS / "smoke.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
