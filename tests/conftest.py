"""Fixtures every test folder may use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import schedule
from tests.processes import ROOT
from tests.threads import single_thread

SLURM_CONF = Path(os.environ.get("EOSCALE_SLURM_DIR", "/tmp/eoscale-slurm")) / "slurm" / "slurm.conf"


_SESSION_TMP = "EOSCALE_TEST_TMPDIR"


def pytest_configure(config):
    """One temporary folder for the whole test session, TMPDIR for it and every process it starts (xdist workers,
    torchrun ranks, Ray workers, notebooks), removed when the session ends: multiprocessing's pymp-*, torchelastic's
    run folders and error files, and Ray Train's lightning_checkpoints-* were left in /tmp by every run (CI machines'
    disks fill). The xdist workers inherit the controller's folder; the process that made it removes it."""
    if os.environ.get(_SESSION_TMP):
        return
    root = tempfile.mkdtemp(prefix="eoscale-tests-")
    os.environ[_SESSION_TMP] = os.environ["TMPDIR"] = root
    # eoscale's cache (the empty MLflow schema new SQLite stores are copied from) in the session's folder, not ~
    os.environ.setdefault("EOSCALE_CACHE_DIR", os.path.join(root, "cache"))
    tempfile.tempdir = None
    config._eoscale_tmpdir = root
    if os.environ.get("EOSCALE_TEST_DURATIONS"):
        config.pluginmanager.register(schedule.DurationLog(os.environ["EOSCALE_TEST_DURATIONS"]), "eoscale-durations")


def pytest_unconfigure(config):
    root = getattr(config, "_eoscale_tmpdir", None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def pytest_xdist_make_scheduler(config, log):
    """Whole modules to each test process, the Slurm ones to one, the longest first (`tests/schedule.py`)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return schedule.make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    if config.getvalue("dist") == "loadfile" or os.environ.get("PYTEST_XDIST_WORKER"):
        schedule.order_longest_first(items, schedule.Groups(config.rootpath))


# The MLFLOW_TRACKING_URI this session started with (None: each command uses the store of its root dir).
_SESSION_TRACKING_URI = os.environ.get("MLFLOW_TRACKING_URI")


def _restore_tracking_uri() -> None:
    if _SESSION_TRACKING_URI is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = _SESSION_TRACKING_URI


@pytest.fixture(autouse=True)
def _tracking_uri_kept():
    """Each test runs with the session's MLFLOW_TRACKING_URI, set before and after it: MLflow's `set_tracking_uri`
    (called in this process by Lightning's MLFlowLogger, e.g. in an in-process fit of a module-scoped fixture,
    which runs before this fixture) also writes it into os.environ, and later tests' subprocesses and `compare`
    then read that test's store."""
    _restore_tracking_uri()
    yield
    if os.environ.get("MLFLOW_TRACKING_URI") != _SESSION_TRACKING_URI and os.environ.get("EOSCALE_TEST_REPORT_ENV"):
        print(f"\nMLFLOW_TRACKING_URI changed by this test: {os.environ.get('MLFLOW_TRACKING_URI')!r}", file=sys.stderr)
    _restore_tracking_uri()


@pytest.fixture
def one_thread():
    """One torch thread for the test: runs compared value for value do the same reductions in the same order."""
    with single_thread():
        yield


@pytest.fixture
def unexpanded(monkeypatch):
    """File options as given, their globs not expanded: for parsing commands whose files are not here (the docs'
    PARSE blocks, the commands a recording stand-in for eoscale was given)."""
    import eoscale.paths

    monkeypatch.setattr(eoscale.paths, "expand", lambda patterns, what: list(patterns))
    monkeypatch.setattr(eoscale.paths, "expand_one", lambda pattern, what: pattern)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> str:
    """JUPYTER_PATH with a kernelspec of this interpreter (`tests.notebooks.runner`)."""
    from tests.notebooks.runner import write_kernelspec

    return write_kernelspec(tmp_path_factory.mktemp("jupyter"))


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


def _slurm_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and any(s in done.stdout for s in ("idle", "mixed", "allocated"))


@pytest.fixture(scope="session")
def local_slurm() -> str:
    """The local Slurm cluster (scripts/local-slurm.sh), started if `sinfo` does not answer; SLURM_CONF is set."""
    if "SLURM_CONF" not in os.environ and SLURM_CONF.exists():
        os.environ["SLURM_CONF"] = str(SLURM_CONF)
    if not _slurm_answers():
        if shutil.which("slurmctld") is None and os.geteuid() != 0:
            pytest.skip("no Slurm here and not root: run 'bash scripts/local-slurm.sh start' as root")
        done = subprocess.run(["bash", str(ROOT / "scripts" / "local-slurm.sh"), "start"], capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"local-slurm.sh start failed:\n{done.stderr}"
        line = done.stdout.strip().splitlines()[-1]
        assert line.startswith("export SLURM_CONF="), done.stdout
        os.environ["SLURM_CONF"] = line.removeprefix("export SLURM_CONF=")
        assert _slurm_answers(), "the local Slurm cluster started but sinfo does not answer"
    return os.environ["SLURM_CONF"]
