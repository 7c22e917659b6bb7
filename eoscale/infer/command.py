"""`eoscale predict`: land-cover maps of whole scenes from a checkpoint, or its accuracy on a tile store.

One process (GPU if there is one, else CPU)::

    eoscale predict --checkpoint runs/best.ckpt --input scenes/*.tif --output maps/
    eoscale predict --checkpoint runs/resnet18_seg/<experiment>/<run> --input scenes/*.tif --output maps/  # its best

Several processes on one machine (GPUs, or CPU processes), or under Slurm / torchrun (ranks from the
environment; scenes are dealt to processes, or a scene's rows split among them when there are fewer)::

    eoscale predict --checkpoint best.ckpt --input big.tif --output maps/ --devices 4
    srun -n 8 --gpus-per-task 1 eoscale predict --checkpoint best.ckpt --input scenes/*.tif --output maps/
    torchrun --nproc-per-node 4 -m eoscale predict --checkpoint best.ckpt --input big.tif --output maps/

Evaluation on a tile store's split (IoU per class, logged like `eoscale test`)::

    eoscale predict --checkpoint best.ckpt --store runs/tiles.zarr --split test --output eval/

Per scene it writes `<scene>_landcover.tif` (COG of class codes, colormap, class names and lineage in the
tags), optionally `<scene>_confidence.tif`, `<scene>_quicklook.png`, `<scene>_areas.csv/.json` and
`<scene>_item.json` (its STAC Item); the run goes to MLflow (experiment `eoscale-predict`), and its id into
each Item (`eoscale:predict_run`). `eoscale lineage MAP` checks a map's chain back to its scenes.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from eoscale.infer import config as options
from eoscale.track.store import default_tracking_uri


def configure(parser: argparse.ArgumentParser) -> None:
    """The options are the fields of `eoscale.infer.config` (flags, help and defaults come from there)."""
    parser.epilog = ("Memory does not grow with the scene: a scene is swept in column tiles of at most "
                     "--column-tile columns, and each column costs at most about 96 KB for 10 bands, 10 classes and "
                     "128-px windows at overlap 0.25 (~400 MB at the default; more with larger windows or overlaps: "
                     "eoscale.infer.predict.bytes_per_column), plus the model's own.")
    options.configure(parser)


def run(args: argparse.Namespace) -> int:
    config, run_options = options.from_args(args)
    options.check_config(config)
    if run_options.store is not None and config.server:
        raise options.InputError(f"{options.flag('store')} evaluates a checkpoint in this process: drop "
                                 f"{options.flag('server')} and give {options.flag('checkpoint')}")
    config = _staged_items(config, run_options)
    config = _resolve_checkpoint(config, run_options)
    if run_options.store is not None:
        return _evaluate(config, run_options)
    from eoscale.infer.run import predict

    result = predict(config)
    if result is None:  # another process coordinates this run
        return 0
    from eoscale.infer.summary import print_summary
    from eoscale.infer.tracking import log_prediction

    print_summary(result.scenes, Path(config.output), target=result.target)
    profile = _summarize_profile(Path(config.output)) if config.profile else []
    run_id = log_prediction(config, result, tracking_uri=run_options.tracking_uri, profile=profile)
    if run_id:
        print(f"MLflow run {run_id} (experiment 'eoscale-predict')")
        _note_run(result, run_id, run_options.tracking_uri or default_tracking_uri(Path(config.output)))
        if run_options.items:
            _log_staging(run_id, run_options, run_options.tracking_uri or default_tracking_uri(Path(config.output)))
    return 0


def _staged_items(config: options.PredictConfig, run_options: options.RunOptions) -> options.PredictConfig:
    """`--items LIST`: the scenes are the staged Items of the frozen list, read from the cache (offline)."""
    if run_options.cache and not run_options.items:
        raise options.InputError(f"{options.flag('cache')} is where {options.flag('items')} are staged: give "
                                 f"{options.flag('items')} LIST too")
    if not run_options.items:
        return config
    from dataclasses import replace

    from eoscale.acquire.cache import staged_items

    return replace(config, stac=staged_items(run_options.items, run_options.cache))


def _log_staging(run_id: str, run_options: options.RunOptions, tracking_uri: str) -> None:
    """`--items`: how the staged inputs came (`eoscale stage`'s log: fetched, damaged, retries, seconds waited,
    bytes) as the run's `stage/*` metrics."""
    from mlflow.tracking import MlflowClient

    from eoscale.acquire.cache import default_cache, stage_totals

    cache = Path(run_options.cache or default_cache(run_options.items))
    client = MlflowClient(tracking_uri)
    for key, value in stage_totals(cache).items():
        client.log_metric(run_id, f"stage/{key}", value)


def _summarize_profile(output: Path) -> list[Path]:
    """`--profile`: the summary of every process's trace; returns the traces and the summary files."""
    from eoscale.infer.run import PROFILE_DIR
    from eoscale.track.profiler import trace_files
    from eoscale.track.trace_summary import summarize

    folder = output / PROFILE_DIR
    traces = trace_files(folder)
    if not traces:
        return []
    files = summarize(folder, title="eoscale predict --profile")
    print(f"eoscale predict: profile in {folder} ({', '.join(p.name for p in [*traces, *files])})")
    return [*traces, *files]


def _resolve_checkpoint(config: options.PredictConfig, run_options: options.RunOptions) -> options.PredictConfig:
    """A registered model's checkpoint file (`models:/NAME/VERSION`, `models:/NAME@ALIAS`, from --tracking-uri or
    $MLFLOW_TRACKING_URI), a run folder's best checkpoint (`eoscale.models.checkpoint.run_checkpoint`); with
    --server and no --checkpoint, the served model's checkpoint (for the lineage)."""
    from dataclasses import replace

    if config.checkpoint:
        from eoscale.models.checkpoint import run_checkpoint
        from eoscale.track.registry import resolve_checkpoint

        path = resolve_checkpoint(config.checkpoint, tracking_uri=run_options.tracking_uri)
        path, chosen = run_checkpoint(path)  # a run's folder: its best checkpoint
        if chosen and os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0":  # said once, by rank 0
            print(f"eoscale predict: checkpoint {path} ({chosen})")
        return replace(config, checkpoint=str(path))
    from eoscale.infer.remote import RemoteNetwork, describe, served_model_name

    network = RemoteNetwork(config.server, served_model_name(config.model, config.adapter))
    try:
        path = (describe(network).about.get("checkpoint") or {}).get("path") or f"{config.server}/{network.model}"
    finally:
        network.close()
    return replace(config, checkpoint=path)


def _note_run(result, run_id: str, tracking_uri: str) -> None:
    """Name the predict run in each map's STAC Item (`eoscale:predict_run`; `eoscale assess` reads it), rewriting
    the Item atomically."""
    from eoscale.catalog.stac import PREDICT_RUN, update_properties

    for scene in result.scenes:
        item = scene.outputs.get("item")
        if item and Path(item).is_file():
            update_properties(Path(item), {PREDICT_RUN: {"run_id": run_id, "tracking_uri": tracking_uri}})


def _evaluate(config: options.PredictConfig, run_options: options.RunOptions) -> int:
    from rich.console import Console
    from rich.table import Table

    from eoscale.infer.evaluate import evaluate
    from eoscale.infer.model import load_model
    from eoscale.infer.run import pick_device
    from eoscale.infer.tracking import log_evaluation

    store, split = run_options.store, run_options.split
    model = load_model(config.checkpoint, adapter=config.adapter, device=pick_device(config.device, 0))
    metrics = evaluate(model, store, split=split, batch_size=config.batch_size, num_workers=run_options.num_workers)
    table = Table(title=f"{Path(config.checkpoint).name} on {store} ({split})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}")
    Console().print(table)
    params = {"checkpoint": str(Path(config.checkpoint).resolve()), "store": str(Path(store).resolve()),
              "split": split, "adapter": config.adapter or "", "batch_size": config.batch_size,
              "backbone": model.backbone}
    Path(config.output).mkdir(parents=True, exist_ok=True)
    run_id = log_evaluation(Path(config.output), run_options.tracking_uri, params, metrics)
    if run_id:
        print(f"MLflow run {run_id} (experiment 'eoscale-predict')")
    return 0
