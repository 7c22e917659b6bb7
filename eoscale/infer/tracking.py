"""Prediction runs in MLflow: experiment `eoscale-predict`, through MLflow's client (`eoscale.track.client_run`: the
run Lightning's logger would write, without importing Lightning).

The tracking URI is `--tracking-uri`, else `MLFLOW_TRACKING_URI`, else `sqlite:///<output>/mlflow.db`
(`eoscale.track.store.default_tracking_uri`); a tracking store that fails costs a warning, not the maps.
"""

from __future__ import annotations

import warnings
from pathlib import Path

EXPERIMENT = "eoscale-predict"
MAX_PARAM = 500  # MLflow caps a parameter's value; a long list of inputs is cut


def open_run(output: Path, tracking_uri: str | None, *, run_name: str | None = None, experiment: str = EXPERIMENT):
    """An MLflow run in `experiment` (`eoscale-predict`), or None (and a warning) if the tracking store refuses."""
    from eoscale.track.client_run import ClientRun
    from eoscale.track.store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri(Path(output).resolve())
    try:
        return ClientRun(experiment, uri, run_name=run_name)
    except Exception as err:  # an unusable URI: the maps are written already, keep them and say so
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        warnings.warn(f"MLflow tracking at {tracking_uri!r} failed ({type(err).__name__}: {first}); "
                      "the run is not logged", RuntimeWarning, stacklevel=2)
        return None


def log_prediction(config, result, *, tracking_uri: str | None = None, profile: list[Path] = ()) -> str | None:
    """Log a finished prediction run (`eoscale.infer.run.RunResult`), with the `--profile` files if any; returns
    the MLflow run id, None if tracking failed."""
    results, seconds = result.scenes, result.seconds
    logger = open_run(Path(config.output), tracking_uri)
    if logger is None:
        return None
    inputs = ",".join([*config.inputs, *(config.stac or [])])
    logger.log_hyperparams({
        "inputs": inputs if len(inputs) <= MAX_PARAM else inputs[: MAX_PARAM - 3] + "...",
        "scenes": len(results),
        "checkpoint": str(Path(config.checkpoint).resolve()),
        "adapter": config.adapter or "",
        "backbone": result.backbone,
        "window": config.window or "checkpoint tile size",
        "overlap": config.overlap,
        "batch_size": config.batch_size,
        "readers": config.readers or "auto",  # auto: eoscale.infer.predict.reading_threads
        "devices": result.processes,
        "device": config.device,
    })
    windows = sum(r.windows for r in results)
    km2 = sum(r.km2 for r in results)
    metrics = {"windows_per_s": windows / max(seconds, 1e-9), "km2_per_s": km2 / max(seconds, 1e-9),
               "seconds": seconds, "km2": km2}
    for r in results:
        for c in r.areas.get("classes", []):  # a class model's area table (the output writer's summary)
            key = f"area_ha/{c['name']}"
            metrics[key] = metrics.get(key, 0.0) + c["hectares"]
    logger.log_metrics(metrics, step=0)
    for r in results:
        for key, folder in (("quicklook", "quicklook"), ("areas_csv", "areas"), ("areas_json", "areas")):
            if r.outputs.get(key):  # as its output writer names them
                logger.log_artifact(r.outputs[key], folder)
    for path in profile:
        logger.log_artifact(path, "profile")
    logger.finalize("success")
    return None if logger.failed else logger.run_id


def log_evaluation(output: Path, tracking_uri: str | None, params: dict, metrics: dict[str, float], *,
                   experiment: str = EXPERIMENT, run_name: str | None = None) -> str | None:
    """Log an evaluation over a tile store's split (metrics named like `eoscale test`'s; `eoscale calibrate`'s
    fit in its own experiment)."""
    logger = open_run(output, tracking_uri, run_name=run_name or f"evaluate-{params.get('split', '')}",
                      experiment=experiment)
    if logger is None:
        return None
    logger.log_hyperparams(params)
    logger.log_metrics(metrics, step=0)
    logger.finalize("success")
    return None if logger.failed else logger.run_id
