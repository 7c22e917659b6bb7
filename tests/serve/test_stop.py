"""SIGTERM and SIGINT stop `eoscale serve` cleanly: exit 0, and nothing it started (tritonserver, the Python
backend's stubs) left running. Each test starts a server of its own (the shared one is stopped by SIGTERM
at the end of the session too)."""

from __future__ import annotations

import signal

import psutil
import pytest

from tests.serve.conftest import start_server, stop_group


def _serve_process(server) -> psutil.Process:
    """The `eoscale serve` process itself (under `bash -c '… &'`, the shell's child)."""
    top = psutil.Process(server.process.pid)
    if "bash" in top.name():
        return next(p for p in top.children() if "bash" not in p.name())
    return top


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT in the background"])
def test_a_signal_stops_the_server_and_everything_it_started(how, served_checkpoint, tmp_path):
    server = start_server(served_checkpoint, tmp_path / "serve.log", shell_background=how != "SIGTERM")
    try:
        serve = _serve_process(server)
        started = serve.children(recursive=True)
        assert any("tritonserver" in p.name() for p in started), [p.name() for p in started]
        serve.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        assert server.process.wait(timeout=120) == 0, server.log.read_text()[-2000:]
        _, alive = psutil.wait_procs(started, timeout=30)
        assert not alive, [p.name() for p in alive]
        log = server.log.read_text()
        assert "eoscale serve: stopped" in log
        assert "Traceback" not in log
    finally:
        stop_group(server.process)
