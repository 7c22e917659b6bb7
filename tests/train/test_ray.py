"""`eoscale fit --launcher ray`: the smoke config on 2 Ray Train workers (CPU, gloo) of one local Ray cluster that
the module's tests share; a worker SIGKILLed mid-run with and without retries; one-line refusals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import torch

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
                    "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={root / 'report'}",
                    *extra], cwd=root)


def _reports(root: Path) -> dict:
    report = root / "report"
    return {f"{tag}{r}": torch.load(report / f"{tag}rank{r}.pt", weights_only=True) for r in range(WORLD)
            for tag in ("", "start")}


def _runs(root: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])


def _per_rank(store: Path) -> tuple[int, int, int]:
    """(first, end) of the store's training tiles and the tiles a rank gets an epoch (eoscale.data.partition)."""
    from eoscale.data import read_store_attrs

    start, stop = read_store_attrs(store)["splits"]["train"]
    per_rank = (stop - start) // WORLD
    return start, stop, per_rank - (1 if per_rank % BATCH == 1 and per_rank > BATCH else 0)


@pytest.mark.slow
def test_two_ray_workers_train_and_a_killed_worker_is_replaced(ray_cluster, store: Path, tmp_path: Path):
    """The smoke config on 2 workers, rank 1 SIGKILLed at step 3 with --max-failures 1: Ray starts both workers
    again from the checkpoint of step 2, and the run ends at the planned step, in one MLflow run. (The kill comes
    right after the step-2 report: before the workers waited for Ray to take their reports, a loaded machine's
    controller had not polled them yet and Ray restarted from step 0.)"""
    start, stop, per_rank = _per_rank(store)
    epoch = -(-per_rank // BATCH)  # steps an epoch
    done = _fit(store, tmp_path, ray_cluster, "--max-failures", "1",
                "--trainer.callbacks+=tests.train.ray_helpers.KillOnce", f"--trainer.callbacks.folder={tmp_path}",
                "--trainer.callbacks.step=3", "--trainer.callbacks+=tests.train.ray_helpers.TileLog",
                f"--trainer.callbacks.folder={tmp_path / 'tiles'}", steps=2 * epoch, val_every=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "killed").exists()  # rank 1 did SIGKILL itself
    # (the workers' own "Ray restarted the workers: resuming from …" line is forwarded by Ray and may not reach the
    # driver before Ray stops, so the restart is judged by where training started again)
    ranks = _reports(tmp_path)  # the second attempt's
    assert ranks["start0"]["step"] == ranks["start1"]["step"] == 2  # from the last checkpoint, not from 0
    assert ranks["0"]["world_size"] == WORLD and ranks["0"]["step"] == ranks["1"]["step"] == 2 * epoch
    for name, value in ranks["0"]["local"].items():  # DDP over Ray's process group keeps the workers equal
        torch.testing.assert_close(value, ranks["1"]["local"][name], rtol=0, atol=0, msg=name)
    (last,) = tmp_path.rglob("last.ckpt")
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 2 * epoch and saved["eoscale"]["tile_size"] == 32
    assert saved["eoscale"]["bands"][0] == "B02"  # the band contract
    (run,) = _runs(tmp_path)  # one MLflow run over both attempts
    assert run.info.status == "FINISHED", run.info.status
    assert run.data.params["run/launcher"] == "ray" and run.data.params["run/world_size"] == str(WORLD)
    assert run.data.params["run/strategy"] == "RayDDPStrategy"
    from mlflow import MlflowClient

    history = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(run.info.run_id, "val_miou")
    assert {1, 2 * epoch - 1} <= {m.step for m in history}  # before the kill and after the restart (MLflow: step - 1)

    # each rank streamed its own shards: the second epoch's training tiles each on one rank once, as under torchrun
    logs = [json.loads((tmp_path / "tiles" / f"tiles{r}.json").read_text())["1"] for r in range(WORLD)]
    tiles = [t for log in logs for t in log]
    assert len(tiles) == len(set(tiles)) == WORLD * per_rank and set(tiles) <= set(range(start, stop))
    assert len(logs[0]) == len(logs[1]) == per_rank


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
