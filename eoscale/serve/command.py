"""`eoscale serve`: a checkpoint (and its LoRA adapters) behind Triton Inference Server, until SIGTERM or Ctrl-C.

    eoscale serve --checkpoint runs/best.ckpt --adapter forest --http-port 8000 --grpc-port 8001
    eoscale serve --checkpoint models:/landcover@champion          # from the MLflow Model Registry
    eoscale serve --checkpoint fused.ckpt --missing-sensor dropout  # a request without one of its sensors maps
    eoscale predict --server http://HOST:8000 --input scene.tif --output maps/     # a client

Models: `landcover` (the checkpoint) and `landcover-ADAPTER` per `--adapter`; inputs and outputs in
`eoscale.serve.landcover`. Health: `curl HOST:8000/v2/health/ready`.
"""

from __future__ import annotations

import argparse

from eoscale.inputs.missing import MISSING_SENSOR
from eoscale.paths import Paths
from eoscale.serve.server import ServeOptions, serve

DEFAULTS = ServeOptions(checkpoint="")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, action=Paths, metavar="CKPT",
                        help="an eoscale checkpoint file, or a registered model: models:/NAME/VERSION or models:/NAME@ALIAS")
    parser.add_argument("--adapter", action="append", default=[], metavar="NAME", dest="adapters",
                        help="also serve LoRA adapter NAME (adapters/NAME beside the checkpoint) as model "
                             "<name>-NAME; repeat for more")
    parser.add_argument("--name", default=DEFAULTS.name, help="the checkpoint's model name (default: %(default)s)")
    parser.add_argument("--host", default=DEFAULTS.host,
                        help="address to listen on (default: %(default)s, every interface; 127.0.0.1: this machine only)")
    parser.add_argument("--http-port", type=int, default=DEFAULTS.http_port, help="(default: %(default)s)")
    parser.add_argument("--grpc-port", type=int, default=DEFAULTS.grpc_port, help="(default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=DEFAULTS.metrics_port,
                        help="Prometheus metrics (default: %(default)s)")
    parser.add_argument("--max-batch", type=int, default=DEFAULTS.max_batch,
                        help="most windows the dynamic batcher puts in one forward pass (default: %(default)s)")
    parser.add_argument("--device", default=DEFAULTS.device, choices=("auto", "cpu", "cuda"),
                        help="where the networks run (auto: CUDA if available, with bf16 autocast)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking store for models:/ checkpoints (default: $MLFLOW_TRACKING_URI, else "
                             "sqlite:///./mlflow.db)")
    parser.add_argument("--missing-sensor", default=DEFAULTS.missing_sensor, choices=MISSING_SENSOR,
                        help="a model of several sensors, a request whose windows hold no data of one of them: refuse "
                             "(one line), or dropout (that sensor's channels read 0, as in training with sensor "
                             "dropout); as eoscale predict --missing-sensor (default: %(default)s)")
    parser.add_argument("--log-file", default=None, help="write tritonserver's own log here (default: a temporary file)")


def run(args: argparse.Namespace) -> int:
    from eoscale.track.registry import resolve_checkpoint

    options = ServeOptions(checkpoint=args.checkpoint, adapters=args.adapters, name=args.name, host=args.host,
                           http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                           max_batch=args.max_batch, device=args.device, log_file=args.log_file,
                           missing_sensor=args.missing_sensor)
    from eoscale.serve.server import check_options

    check_options(options)
    return serve(options, checkpoint=resolve_checkpoint(args.checkpoint, tracking_uri=args.tracking_uri))
