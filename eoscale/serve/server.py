"""`eoscale serve`'s recipe: load the checkpoint's networks, bind one Triton model each, serve until a signal.

    serve(ServeOptions(checkpoint="best.ckpt", adapters=["forest"]))   # models landcover, landcover-forest

Triton Inference Server comes from PyTriton (`nvidia-pytriton`, which bundles `tritonserver` and its Python
backend): PyTriton starts `tritonserver` as a child process, loads each model with a small proxy that forwards
Triton's batched requests to the callables here (`eoscale.serve.landcover.ServedModel`) over shared memory, and
answers Triton's standard endpoints (`/v2/health/live`, `/v2/health/ready`, `/v2/models/NAME/ready`, config,
metadata, infer) over HTTP and gRPC. Dynamic batching gathers concurrent requests into batches of at most
`max_batch` windows (waiting at most `queue_delay_us` for more).

Stopping. SIGTERM (Slurm's, `kill`) and SIGINT (Ctrl-C, `kill -INT`) both end the wait; PyTriton then stops
`tritonserver` with SIGINT and waits for it and its backend stubs, and removes its workspace. A process started in
the background by a shell (`eoscale serve … &`) inherits SIGINT *ignored*, and so would `tritonserver` (an
ignored signal stays ignored across exec): it would sit out PyTriton's SIGINT until PyTriton kills it after a
timeout. Installing Python's handler first (`signal.default_int_handler`) makes the signal's disposition
"handled", which exec resets to the default for the child, so `tritonserver` stops at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from eoscale._compat import require_extra
from eoscale.errors import InputError
from eoscale.inputs.missing import check_missing

MONITOR_SECONDS = 1.0  # how often the main thread checks that tritonserver and the proxies are alive
QUEUE_DELAY_US = 2000  # the dynamic batcher's wait for more requests before it runs a smaller batch


@dataclass
class ServeOptions:
    checkpoint: str
    adapters: list[str] = field(default_factory=list)
    name: str = "landcover"
    host: str = "0.0.0.0"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_batch: int = 64
    device: str = "auto"
    log_file: str | None = None
    missing_sensor: str = "refuse"  # a request lacking one of a model's sensors: refuse, or dropout (inputs.missing)


def model_names(name: str, adapters: list[str]) -> list[str]:
    """The Triton model names: `name` for the checkpoint, `name-ADAPTER` for each adapter."""
    return [name, *(f"{name}-{a}" for a in adapters)]


def check_options(options: ServeOptions) -> None:
    for flag, port in (("--http-port", options.http_port), ("--grpc-port", options.grpc_port),
                       ("--metrics-port", options.metrics_port)):
        if not 1 <= port <= 65535:
            raise InputError(f"{flag} {port}: give a TCP port in 1..65535")
    ports = [options.http_port, options.grpc_port, options.metrics_port]
    if len(set(ports)) != len(ports):
        raise InputError(f"--http-port, --grpc-port and --metrics-port must differ (given {ports})")
    if options.max_batch < 1:
        raise InputError(f"--max-batch {options.max_batch}: give at least 1 window")
    if len(set(options.adapters)) != len(options.adapters):
        raise InputError(f"--adapter names one adapter twice: {options.adapters}")
    check_missing(options.missing_sensor)


def load_models(options: ServeOptions, checkpoint: Path) -> list:
    """The served networks, on the serving device: the checkpoint's own, then one per adapter."""
    import torch

    from eoscale.catalog.digest import file_record
    from eoscale.models.checkpoint import load_network
    from eoscale.serve.landcover import ServedModel

    if options.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible to this process")
    use_cuda = options.device == "cuda" or (options.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    served, record = [], None
    for name, adapter in zip(model_names(options.name, options.adapters), [None, *options.adapters], strict=True):
        trained = load_network(checkpoint, adapter=adapter)  # first: a missing or foreign file is one line
        record = record or file_record(checkpoint)
        about = {"checkpoint": record, "adapter": adapter, "backbone": trained.spec["args"]["backbone"],
                 "lineage": trained.lineage}
        served.append(ServedModel(name, trained.network.to(device), trained.contract, about,
                                  missing=options.missing_sensor))
    return served


def serve(options: ServeOptions, *, checkpoint: Path | None = None) -> int:
    """Serve until SIGTERM or SIGINT (or tritonserver's end); 0 after a clean stop."""
    check_options(options)
    stop = threading.Event()
    # Python's handler for SIGINT even if it was ignored (started with '&'): see the module docstring
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    require_extra("serve")
    served = load_models(options, checkpoint or Path(options.checkpoint))
    from pytriton.model_config import DynamicBatcher, ModelConfig
    from pytriton.triton import Triton, TritonConfig

    from eoscale._compat.pytriton import stub_library_path, use_dlpack_proxy

    stub_library_path(os.environ)  # tritonserver and the backend stubs inherit it (eoscale._compat.pytriton)

    for name in ("pytriton", "sh", "tritonclient"):
        logging.getLogger(name).setLevel(logging.WARNING)  # PyTriton's progress lines: eoscale says what matters
    with tempfile.TemporaryDirectory(prefix="eoscale-serve-") as workspace:
        log_file = Path(options.log_file) if options.log_file else Path(workspace) / "tritonserver.log"
        config = TritonConfig(http_address=options.host, http_port=options.http_port, grpc_address=options.host,
                              grpc_port=options.grpc_port, metrics_address=options.host,
                              metrics_port=options.metrics_port, log_file=log_file, log_verbose=0,
                              exit_on_error=True)
        triton = Triton(config=config, workspace=Path(workspace) / "pytriton")
        _quiet_stdout(triton)
        try:
            for model in served:
                inputs, outputs = model.tensors()
                triton.bind(model.name, model, inputs=inputs, outputs=outputs,
                            config=ModelConfig(max_batch_size=options.max_batch, batcher=DynamicBatcher(
                                max_queue_delay_microseconds=QUEUE_DELAY_US)))
                bound = triton._model_manager.models  # the Model objects PyTriton just made (0.7.0)
                model_object = next(m for m in bound if m.model_name == model.name)
                use_dlpack_proxy(model_object)
                model_object._get_triton_model_config().backend_parameters.update(model.parameters([m.name for m in served]))
            if not stop.is_set():
                _start(triton, log_file)
            if not stop.is_set():
                print(ready_message(options, [m.name for m in served]), flush=True)
            while not stop.is_set() and triton.is_alive():
                stop.wait(MONITOR_SECONDS)
            if not stop.is_set():
                print(f"eoscale serve: tritonserver stopped on its own; its log: {log_file}", file=sys.stderr)
                return 1
        finally:
            triton.stop()
    print("eoscale serve: stopped", flush=True)
    return 0


def _quiet_stdout(triton) -> None:
    """tritonserver's log goes to `log_file`; what it still prints on stdout (a missing NVML on a CPU machine, …)
    PyTriton echoes unless its server is not verbose (PyTriton 0.7.0 makes it when the server starts)."""
    initialize = triton._initialize_server

    def quiet() -> None:
        initialize()
        triton._triton_server._verbose = False

    triton._initialize_server = quiet


def _start(triton, log_file: Path) -> None:
    try:
        triton.run()
    except Exception as err:  # a port in use, a model that does not load: the server's log says which
        tail = log_file.read_text(errors="replace").strip().splitlines()[-3:] if log_file.exists() else []
        detail = "; ".join(line.strip() for line in tail if line.strip())
        raise InputError(f"Triton Inference Server did not start ({type(err).__name__}: {err}){': ' + detail if detail else ''}"
                         " — is a --http-port/--grpc-port/--metrics-port in use?") from None


def ready_message(options: ServeOptions, names: list[str]) -> str:
    host = socket.gethostname() if options.host in ("0.0.0.0", "::") else options.host
    return (f"eoscale serve: serving {', '.join(names)} at http://{host}:{options.http_port} "
            f"(gRPC {host}:{options.grpc_port}, metrics :{options.metrics_port}); SIGTERM or Ctrl-C stops it")
