"""`eoscale predict`: land-cover maps of whole scenes from a checkpoint, or its accuracy on a tile store.

One process (GPU if there is one, else CPU)::

    eoscale predict --checkpoint runs/best.ckpt --input scenes/*.tif --output maps/

Several processes on one machine (GPUs, or CPU processes), or under Slurm / torchrun (ranks from the
environment; scenes are dealt to processes, or a scene's rows split among them when there are fewer)::

    eoscale predict --checkpoint best.ckpt --input big.tif --output maps/ --devices 4
    srun -n 8 --gpus-per-task 1 eoscale predict --checkpoint best.ckpt --input scenes/*.tif --output maps/
    torchrun --nproc-per-node 4 -m eoscale predict --checkpoint best.ckpt --input big.tif --output maps/

Evaluation on a tile store's split (IoU per class, logged like `eoscale test`)::

    eoscale predict --checkpoint best.ckpt --store runs/tiles.zarr --split test --output eval/

Per scene it writes `<scene>_landcover.tif` (COG of class codes, colormap, class names in the tags),
optionally `<scene>_confidence.tif`, `<scene>_quicklook.png` and `<scene>_areas.csv/.json`; the run goes
to MLflow (experiment `eoscale-predict`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eoscale.errors import InputError

COLUMN_TILE = 4096  # eoscale.infer.predict.COLUMN_TILE, without importing torch for --help


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Memory does not grow with the scene: a scene is swept in column tiles of at most "
                     "--column-tile columns, and each column costs at most about 96 KB for 10 bands, 10 classes and "
                     "128-px windows at overlap 0.25 (~400 MB at the default; more with larger windows or overlaps: "
                     "eoscale.infer.predict.bytes_per_column), plus the model's own.")
    parser.add_argument("--checkpoint", required=True, help="an eoscale checkpoint file (from 'eoscale fit')")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", nargs="+", metavar="SCENE",
                        help="scenes: multi-band GeoTIFFs or folders of one file per band (globs allowed)")
    source.add_argument("--store", help="a tile store: evaluate on its --split instead of mapping scenes")
    parser.add_argument("--output", required=True, help="folder for the maps, area tables and mlflow.db")
    parser.add_argument("--adapter", metavar="NAME", help="a LoRA adapter written by a LoRA fit: adapters/NAME in the "
                        "checkpoint's folder or one of the three above it (its run's root)")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"),
                        help="with --store: the split to evaluate on (default: %(default)s)")
    parser.add_argument("--window", type=int, metavar="PX", help="window size (default: the checkpoint's tile size)")
    parser.add_argument("--overlap", type=float, default=0.25,
                        help="overlap of neighbouring windows, a fraction of the window (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="windows per forward pass, at most: a row of windows is split into equal batches "
                             "(default: %(default)s)")
    parser.add_argument("--column-tile", type=int, default=COLUMN_TILE, metavar="PX",
                        help="widest sweep over a scene, in columns, halo included: bounds memory; the map is the "
                             "same whatever it is (default: %(default)s)")
    parser.add_argument("--readers", type=int, metavar="N",
                        help="threads reading each process's scene strips (default: 1 beside a CPU model, which needs "
                             "the cores; beside a GPU up to 8, leaving 2 of the process's cores free)")
    parser.add_argument("--devices", type=int, default=1,
                        help="processes to start (one per GPU, or CPU processes); ignored under srun/torchrun")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where the model runs (default: %(default)s: CUDA if available, with bf16 autocast)")
    parser.add_argument("--confidence", action="store_true",
                        help="also write <scene>_confidence.tif: the mapped class's probability, 0-100")
    parser.add_argument("--band-names", metavar="B02,B03,...",
                        help="names of a multi-band file's bands, in file order, when its bands have no descriptions")
    parser.add_argument("--overwrite", action="store_true", help="replace the maps of scenes already predicted")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                        "sqlite:///<output>/mlflow.db)")
    parser.add_argument("--num-workers", type=int, default=0, help="with --store: data-loading workers")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.store is not None:
        return _evaluate(args)
    from eoscale.infer.run import PredictConfig, predict

    config = PredictConfig(
        checkpoint=args.checkpoint, inputs=list(args.input), output=args.output, adapter=args.adapter,
        window=args.window, overlap=args.overlap, batch_size=args.batch_size, column_tile=args.column_tile,
        readers=args.readers, devices=args.devices,
        device=args.device, confidence=args.confidence, overwrite=args.overwrite,
        band_names=_band_names(args.band_names), progress=not args.no_progress,
    )
    result = predict(config)
    if result is None:  # another process coordinates this run
        return 0
    from eoscale.infer.summary import print_summary
    from eoscale.infer.tracking import log_prediction

    print_summary(result.scenes, Path(args.output))
    run_id = log_prediction(config, result, tracking_uri=args.tracking_uri)
    if run_id:
        print(f"MLflow run {run_id} (experiment 'eoscale-predict')")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from eoscale.infer.evaluate import evaluate
    from eoscale.infer.model import load_model
    from eoscale.infer.run import pick_device
    from eoscale.infer.tracking import log_evaluation

    if args.batch_size < 1:
        raise InputError(f"--batch-size {args.batch_size}: give at least 1")
    model = load_model(args.checkpoint, adapter=args.adapter, device=pick_device(args.device, 0))
    metrics = evaluate(model, args.store, split=args.split, batch_size=args.batch_size, num_workers=args.num_workers)
    table = Table(title=f"{Path(args.checkpoint).name} on {args.store} ({args.split})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}")
    Console().print(table)
    params = {"checkpoint": str(Path(args.checkpoint).resolve()), "store": str(Path(args.store).resolve()),
              "split": args.split, "adapter": args.adapter or "", "batch_size": args.batch_size,
              "backbone": model.backbone}
    Path(args.output).mkdir(parents=True, exist_ok=True)
    run_id = log_evaluation(Path(args.output), args.tracking_uri, params, metrics)
    if run_id:
        print(f"MLflow run {run_id} (experiment 'eoscale-predict')")
    return 0


def _band_names(text: str | None) -> list[str] | None:
    return None if text is None else [b.strip() for b in text.split(",") if b.strip()]
