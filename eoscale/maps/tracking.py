"""An assessment in MLflow: on the map's own predict run where it is known, else on a new run of experiment
`eoscale-assess` that names the map.

The predict run is known from the map's STAC Item, `<scene>_item.json` beside `<scene>_landcover.tif`, whose
properties may carry `"eoscale:predict_run": {"run_id": …, "tracking_uri": …}`. The tracking URI is
`--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the item's, else `sqlite:///<output>/mlflow.db`. MLflow's
client is used directly (no Lightning: `assess` needs no torch). A tracking store that fails costs a warning,
not the report, as for `eoscale predict` (`eoscale.infer.tracking`).

Metrics: `overall_accuracy`, `users_accuracy/<class>`, `producers_accuracy/<class>`, `f1/<class>`,
`area_ha_adjusted/<class>` and `area_ha_ci95/<class>`. The adjusted area is not logged as `area_ha/<class>`
because a predict run already logs the map's pixel-count areas under that name; the two must not mix.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path

from eoscale.catalog.stac import PREDICT_RUN
from eoscale.maps.lineage import item_path
from eoscale.track.store import artifact_location, client_policy

EXPERIMENT = "eoscale-assess"


def predict_run(map_path: Path) -> dict | None:
    """`{"run_id", "tracking_uri"}` of the run that made the map, from its item; None if unknown."""
    item = item_path(Path(map_path))
    if not item.is_file():
        return None
    try:
        run = json.loads(item.read_text()).get("properties", {}).get(PREDICT_RUN)
    except (OSError, ValueError, AttributeError):
        warnings.warn(f"STAC item {str(item)!r} is not readable JSON: the assessment goes to a new MLflow run",
                      RuntimeWarning, stacklevel=2)
        return None
    return run if isinstance(run, dict) and run.get("run_id") else None


def tracking_uri(given: str | None, run: dict | None, output: Path) -> str:
    """The rule of the module docstring."""
    return (given or os.environ.get("MLFLOW_TRACKING_URI") or (run or {}).get("tracking_uri")
            or f"sqlite:///{Path(output).resolve() / 'mlflow.db'}")


def metric_key(prefix: str, name: str) -> str:
    """`prefix/name` with the characters MLflow refuses in a key replaced by `_`."""
    return f"{prefix}/" + re.sub(r"[^A-Za-z0-9_\-. /]", "_", name)


def metrics_of(report: dict) -> dict[str, float]:
    metrics: dict[str, float] = {}
    if report.get("target") == "values":  # a value map's assessment (`eoscale.maps.value_report`)
        return {k: s["estimate"] for k, s in report["statistics"].items() if s["estimate"] is not None}
    if report["overall_accuracy"]["estimate"] is not None:
        metrics["overall_accuracy"] = report["overall_accuracy"]["estimate"]
    for c in report["classes"]:
        for prefix, key in (("users_accuracy", "users_accuracy"), ("producers_accuracy", "producers_accuracy"),
                            ("f1", "f1"), ("area_ha_adjusted", "area_ha"), ("area_ha_ci95", "area_ha_ci95")):
            if c[key] is not None:
                metrics[metric_key(prefix, c["name"])] = c[key]
    return metrics


def log_assessment(report: dict, files: list[Path], *, map_path: Path, output: Path,
                   tracking_uri_given: str | None) -> tuple[str, str] | None:
    """Log the report's metrics and files; returns (run id, where it went) or None (and a warning) on failure."""
    run = predict_run(map_path)
    uri = tracking_uri(tracking_uri_given, run, output)
    try:
        with warnings.catch_warnings():
            # MLflow's own SQLAlchemy mappers use `noload`; SQLAlchemy 2.1 says so on every first connection
            warnings.filterwarnings("ignore", message=r"The ``noload`` loader strategy is deprecated")
            return _log(report, files, map_path=map_path, uri=uri, run=run)
    except Exception as err:  # an unreachable server, a locked or damaged store: the report is written already
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        warnings.warn(f"MLflow tracking at {uri!r} failed ({type(err).__name__}: {first[:300]}); the assessment "
                      f"is in {str(output)!r} but not logged", RuntimeWarning, stacklevel=2)
        return None


def _log(report: dict, files: list[Path], *, map_path: Path, uri: str, run: dict | None) -> tuple[str, str]:
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:"):
        Path(uri.split(":///", 1)[-1]).parent.mkdir(parents=True, exist_ok=True)
    client_policy(uri)
    client = MlflowClient(tracking_uri=uri)
    run_id = None
    if run is not None:
        try:
            run_id = client.get_run(run["run_id"]).info.run_id
            where = "the map's predict run"
        except MlflowException:
            warnings.warn(f"the map's predict run {run['run_id']} is not in {uri!r}: logging to a new run of "
                          f"experiment {EXPERIMENT!r}", RuntimeWarning, stacklevel=3)
    if run_id is None:
        experiment = client.get_experiment_by_name(EXPERIMENT)
        experiment_id = (experiment.experiment_id if experiment else
                         client.create_experiment(EXPERIMENT, artifact_location=artifact_location(uri)))
        created = client.create_run(experiment_id, run_name=f"assess-{Path(map_path).stem}",
                                    tags={"eoscale.assess.map": str(Path(map_path).resolve())})
        run_id = created.info.run_id
        client.log_param(run_id, "map", str(Path(map_path).resolve())[:500])
        client.log_param(run_id, "reference", report["reference"][:500])
        client.log_param(run_id, "kind", report["kind"])
        where = f"a new run of experiment {EXPERIMENT!r}"
    else:
        client.set_tag(run_id, "eoscale.assess.reference", report["reference"][:5000])
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics_of(report).items()])
    client.set_tag(run_id, "eoscale.assess.kind", report["kind"])
    for path in files:
        client.log_artifact(run_id, str(path), "assessment")
    if run_id != (run or {}).get("run_id"):
        client.set_terminated(run_id, "FINISHED")
    return run_id, where
