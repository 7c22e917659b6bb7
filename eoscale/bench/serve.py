"""`eoscale bench serve`: a model behind Triton (`eoscale serve`) against the same model's forward in-process.

In one run, on one machine, with one checkpoint (the predict benchmark's: a timm backbone at the tile size, random
weights; speed does not depend on training) and the same random uint16 windows:

- baseline: the served computation in this process (`eoscale.serve.landcover.ServedModel`: normalise, forward,
  softmax, float16 probabilities) on batches of `--batch-size` windows;
- the server: the same batches as requests from one client (HTTP, `--in-flight` requests on their way), answered
  with float16 probabilities; the ratio server ÷ in-process is the cost of serving (goal ≥ 0.8 at batch 16);
- latency of 1-window requests, one at a time: p50 and p99;
- throughput with 1, 4 and 16 concurrent clients each sending 1-window requests one at a time (the dynamic
  batcher gathers them into larger forward passes).

The baseline and the server take turns (`--repeats`), medians count. On a small CPU machine the client, the
server's transport and the model share the cores, which the ratio shows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

CLIENTS = (1, 4, 16)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default="resnet18", help="timm backbone (default: %(default)s)")
    parser.add_argument("--tile", type=int, default=128, help="window size = the model's tile size (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per request and forward (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=12, help="batches per throughput run (default: %(default)s)")
    parser.add_argument("--in-flight", type=int, default=2, help="requests on their way from the client (default: %(default)s)")
    parser.add_argument("--latency-requests", type=int, default=100,
                        help="1-window requests for the latency figures (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="length of each concurrent-clients run (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="turns of baseline and server (default: %(default)s)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="(default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.predict import write_random_checkpoint
    from eoscale.bench.record import record
    from eoscale.serve.process import ServerProcess
    from eoscale.synth import synthesize

    with tempfile.TemporaryDirectory(prefix="eoscale-bench-serve-") as tmp:
        tmp = Path(tmp)
        scene = Path(synthesize(tmp / "synthetic", scenes=1, size=256).scene_paths[0])
        checkpoint = write_random_checkpoint(tmp / "model.ckpt", scene, backbone=args.backbone, tile=args.tile)
        print(f"starting eoscale serve ({args.backbone} at {args.tile} px, {args.device})")
        with ServerProcess(checkpoint, tmp / "serve.log", max_batch=max(args.batch_size, max(CLIENTS)),
                           device=args.device) as server:
            figures = bench_serve(checkpoint, server.http, server.grpc, args)
    figures["model"] = {"backbone": args.backbone, "tile": args.tile}
    base, served = figures["in_process"], figures["server"]
    print(f"batch {args.batch_size}, {args.device}: in-process {base['windows_per_s']:.1f} windows/s, server "
          f"{served['windows_per_s']:.1f} windows/s = {figures['ratio_server_vs_in_process']:.2f}× (goal ≥ 0.8)")
    lat = figures["latency_1_window_ms"]
    print(f"1-window requests: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms")
    for n, f in figures["concurrent_clients"].items():
        print(f"  {n:>2} client{'s' if n != '1' else ' '}: {f['windows_per_s']:.1f} windows/s "
              f"({f['requests']} requests, {f['errors']} errors)")
    if args.record:
        print(f"recorded in {record('serve', figures, directory=args.record, seeds={'windows': 0})}")
    return 0


def bench_serve(checkpoint: Path, url: str, grpc_url: str, args: argparse.Namespace) -> dict:
    import torch
    import tritonclient.http as http

    from eoscale.models.checkpoint import load_network
    from eoscale.serve.landcover import ServedModel

    trained = load_network(checkpoint)
    local = ServedModel("local", trained.network.to(args.device), trained.contract, {})
    bands, tile = len(trained.contract.bands), args.tile
    rng = np.random.default_rng(0)
    batches = [rng.integers(1, 10000, (args.batch_size, bands, tile, tile)).astype(np.uint16)
               for _ in range(args.batches)]
    address = url.removeprefix("http://")
    client = http.InferenceServerClient(address, concurrency=args.in_flight)

    def request(windows: np.ndarray):
        pixels = http.InferInput("windows", list(windows.shape), "UINT16")
        pixels.set_data_from_numpy(windows, binary_data=True)
        return [pixels], [http.InferRequestedOutput("probabilities", binary_data=True)]

    def in_process() -> float:
        started = time.perf_counter()
        for windows in batches:
            local.outputs(local.probabilities(local.normalise(windows, None)), ["probabilities"])
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def served() -> float:
        started = time.perf_counter()
        pending = []
        for windows in batches:
            inputs, outputs = request(windows)
            pending.append(client.async_infer("landcover", inputs, outputs=outputs))
            if len(pending) >= args.in_flight:
                pending.pop(0).get_result().as_numpy("probabilities")
        for answer in pending:
            answer.get_result().as_numpy("probabilities")
        return time.perf_counter() - started

    in_process(), served()  # warm-up: kernels, allocator, connections, the server's shared memory
    turns = [(in_process(), served()) for _ in range(max(args.repeats, 1))]
    base = statistics.median(t for t, _ in turns)
    remote = statistics.median(t for _, t in turns)
    windows = args.batches * args.batch_size

    one = rng.integers(1, 10000, (1, bands, tile, tile)).astype(np.uint16)
    latencies = []
    for _ in range(args.latency_requests):
        inputs, outputs = request(one)
        started = time.perf_counter()
        client.infer("landcover", inputs, outputs=outputs).as_numpy("probabilities")
        latencies.append((time.perf_counter() - started) * 1000)
    client.close()
    return {
        "device": args.device,
        "batch_size": args.batch_size,
        "in_flight": args.in_flight,
        "in_process": {"windows": windows, "seconds": base, "windows_per_s": windows / base},
        "server": {"windows": windows, "seconds": remote, "windows_per_s": windows / remote},
        "ratio_server_vs_in_process": base / remote,
        "turns": [{"in_process_s": a, "server_s": b} for a, b in turns],
        "latency_1_window_ms": {"requests": len(latencies), "p50": float(np.percentile(latencies, 50)),
                                "p99": float(np.percentile(latencies, 99)), "mean": statistics.fmean(latencies)},
        "concurrent_clients": {str(n): concurrent(grpc_url.removeprefix("grpc://"), n, one, args.seconds) for n in CLIENTS},
    }


def concurrent(address: str, clients: int, window: np.ndarray, seconds: float) -> dict:
    """`clients` threads, each with its own connection, sending 1-window requests one after the other for `seconds`."""
    import tritonclient.grpc as grpc

    counts, errors = [0] * clients, [0] * clients
    stop = time.perf_counter() + seconds
    def client_loop(i: int, url: str) -> None:
        connection = grpc.InferenceServerClient(url)
        pixels = grpc.InferInput("windows", list(window.shape), "UINT16")
        pixels.set_data_from_numpy(window)
        outputs = [grpc.InferRequestedOutput("probabilities")]
        while time.perf_counter() < stop:
            try:
                connection.infer("landcover", [pixels], outputs=outputs).as_numpy("probabilities")
                counts[i] += 1
            except Exception:  # counted and reported: a benchmark that hides errors measures nothing
                errors[i] += 1
        connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(i, address)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return {"clients": clients, "seconds": elapsed, "requests": sum(counts), "errors": sum(errors),
            "windows_per_s": sum(counts) / elapsed}

