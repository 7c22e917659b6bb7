"""`eoscale serve` as a child process: started on free ports, ready when Triton says so, stopped by SIGTERM.

    with ServerProcess(checkpoint, adapters=["alps"]) as server:
        RemoteNetwork(server.http, "landcover") …

For the benchmark and for scripts that need a server for a while; it runs in a session of its own, so that
stopping it (SIGTERM, then the whole group if it outlives `stop_timeout`) reaches tritonserver and its stubs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

READY_LINE = "eoscale serve: serving"


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` TCP ports nobody listens on now (the OS's choice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class ServerProcess:
    """A running `eoscale serve`; `http`/`grpc` are its URLs, `log` its output."""

    def __init__(self, checkpoint: str | Path, log: str | Path, *, adapters: list[str] = (), max_batch: int = 64,
                 device: str = "cpu", extra: list[str] = (), start_timeout: float = 300.0,
                 stop_timeout: float = 60.0, env: dict[str, str] | None = None) -> None:
        http, grpc, metrics = free_ports(3)
        self.http, self.grpc = f"http://127.0.0.1:{http}", f"grpc://127.0.0.1:{grpc}"
        self.log, self.stop_timeout = Path(log), stop_timeout
        command = [sys.executable, "-m", "eoscale", "serve", "--checkpoint", str(checkpoint), "--host", "127.0.0.1",
                   "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                   "--max-batch", str(max_batch), "--device", device, *extra]
        for name in adapters:
            command += ["--adapter", name]
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        deadline = time.monotonic() + start_timeout
        while READY_LINE not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"eoscale serve did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> int:
        """SIGTERM, as Slurm stops a job; the exit code (the group is killed if it outlives `stop_timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=self.stop_timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """Whatever is left of the server's process group."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *_) -> None:
        self.stop()
