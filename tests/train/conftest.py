"""Tiny seeded tile stores for the training tests, made by the real `eoscale ingest`.

`make_store` writes two small 10-band Sentinel-2-like scenes (UTM 32N, class regions visible in the pixels,
a nodata corner) with EPSG:3035 label rasters, and ingests them at tile 32 in shards of 8 tiles.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rasters import CLASSES_CSV, write_labels, write_scene

ROOT = Path(__file__).resolve().parents[2]
TILE = 32


def make_store(folder: Path, *, band_names: list[str] | None = None, size: int = 160, seed: int = 0) -> Path:
    """Ingest two `size`×`size` scenes into `folder/tiles.zarr` and return the store's path."""
    from eoscale.ingest import ingest

    folder.mkdir(parents=True, exist_ok=True)
    scenes, labels = [], []
    for i in range(2):
        scene = folder / f"scene{i}.tif"
        classes = write_scene(scene, height=size, width=size, seed=seed + i, band_names=band_names,
                              origin=(310_000.0 + 4_000 * i, 5_650_000.0), nodata_box=(slice(0, 20), slice(0, 30)))
        write_labels(folder / f"labels{i}.tif", scene, classes)
        scenes.append(str(scene))
        labels.append(str(folder / f"labels{i}.tif"))
    (folder / "classes.csv").write_text(CLASSES_CSV)
    out = folder / "tiles.zarr"
    ingest(scenes, out, labels=labels, classes=str(folder / "classes.csv"), tile_size=TILE, shard_tiles=8,
           split_block=1, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="session")
def other_store(tmp_path_factory) -> Path:
    """A store of the same shape whose band contract differs (other band names)."""
    names = [f"X{i}" for i in range(10)]
    return make_store(tmp_path_factory.mktemp("other"), band_names=names)


INHERITED_NOT = ("MLFLOW_TRACKING_URI", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                 "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID")


def run_cli(args: list[str], cwd: Path, *, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m eoscale ARGS` in a fresh process (Lightning's launcher reruns it once per rank)."""
    # no MLflow URI (the embedded default), and no rendezvous of another process group (a stale MASTER_PORT makes
    # rank 0 fail to bind it while rank 1 waits on whoever holds it)
    environ = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    environ.update({"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1",
                    "PYTHONWARNINGS": "ignore", **(env or {})})
    # its own session, so that on a timeout every rank it started is killed, not only the first
    with subprocess.Popen([sys.executable, "-m", "eoscale", *args], cwd=cwd, env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise AssertionError(f"eoscale {' '.join(args[:1])} ran past {timeout:.0f} s:\n{stderr[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (SQLite backend, proxied artifacts) on 127.0.0.1, once per test session.

    It takes 20–35 s to answer /health on these machines, so only tests marked slow should use it.
    """
    import socket
    import time
    import urllib.request

    root = tmp_path_factory.mktemp("mlflow-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--serve-artifacts", "--artifacts-destination", str(root / "artifacts")],
        stdout=open(root / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield uri
    import signal

    os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers: the session this fixture started
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
