"""One real `eoscale serve` (Triton Inference Server through PyTriton) for every serving test of the session.

Started as a user starts it, `eoscale serve` in a process of its own session, on free ports of 127.0.0.1, with
a ViT checkpoint and a LoRA adapter ('alps'), so both `landcover` and `landcover-alps` are served. Starting
takes ~15 s on 2 cores (torch, the models, tritonserver), so it starts once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from eoscale.serve.process import READY_LINE, free_ports
from tests import checkpoints
from tests.rasters import write_scene

START_TIMEOUT_S = 180


@dataclass
class Server:
    process: subprocess.Popen
    http: str
    grpc: str
    log: Path
    checkpoint: Path


def start_server(checkpoint: Path, log: Path, *extra: str, shell_background: bool = False) -> Server:
    """`eoscale serve` on free ports; returns once it says it is serving (fails with its output if it does not)."""
    http, grpc, metrics = free_ports(3)
    command = [str(Path(sys.executable).with_name("eoscale")), "serve", "--checkpoint", str(checkpoint),
               "--host", "127.0.0.1", "--http-port", str(http), "--grpc-port", str(grpc),
               "--metrics-port", str(metrics), "--device", "cpu", "--max-batch", "16", *extra]
    if shell_background:
        # as `eoscale serve … &` in a script: a non-interactive shell starts it with SIGINT ignored
        import shlex

        command = ["bash", "-c", f"{shlex.join(command)} & wait $!"]
    out = open(log, "w")
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while READY_LINE not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_group(process)
            pytest.fail(f"eoscale serve did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)
    return Server(process, f"http://127.0.0.1:{http}", f"grpc://127.0.0.1:{grpc}", log, checkpoint)


def stop_server(started: Server) -> None:
    """Stop a fixture's server as a user does (SIGTERM: it drains and exits), and whatever is left of its group."""
    started.process.send_signal(signal.SIGTERM)
    try:
        started.process.wait(timeout=60)
    finally:
        stop_group(started.process)


def stop_group(process: subprocess.Popen) -> None:
    """Kill what is left of a server's process group (the tests' cleanup after a failure)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def make_adapted_checkpoint(root: Path) -> Path:
    """A ViT checkpoint with LoRA adapter 'alps' beside it (`tests.checkpoints.make_adapted_checkpoint`)."""
    return checkpoints.make_adapted_checkpoint(root)[0]


@pytest.fixture(scope="session")
def served_checkpoint(tmp_path_factory) -> Path:
    return make_adapted_checkpoint(tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="session")
def server(served_checkpoint, tmp_path_factory):
    """The shared server: models `landcover` and `landcover-alps`."""
    started = start_server(served_checkpoint, tmp_path_factory.mktemp("server") / "serve.log", "--adapter", "alps")
    yield started
    stop_server(started)


@pytest.fixture(scope="session")
def served_scene(tmp_path_factory) -> Path:
    """A small odd-sized scene with a nodata box (windows of 32 px: a few hundred of them)."""
    path = tmp_path_factory.mktemp("served-scene") / "served.tif"
    write_scene(path, height=150, width=173, seed=5, nodata_box=(slice(20, 60), slice(0, 40)))
    return path


RAW_INPUTS = {"windows": "UINT16", "valid": "UINT8", "dates": "INT32", "missing_sensor": "UINT8"}  # Triton's types


def raw_request(server, **inputs):
    """The served "landcover" model's `probabilities_fp32` for the named raw request inputs (`RAW_INPUTS`; an input
    given as None is left out of the request), sent by Triton's own HTTP client as any client would."""
    import tritonclient.http as client

    raw = client.InferenceServerClient(url=server.http.removeprefix("http://"))
    tensors = []
    for name, array in inputs.items():
        if array is not None:
            tensor = client.InferInput(name, list(array.shape), RAW_INPUTS[name])
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
    answer = raw.infer("landcover", tensors, outputs=[client.InferRequestedOutput("probabilities_fp32")])
    return answer.as_numpy("probabilities_fp32")
