"""Training runs from MLflow side by side: throughput, scaling efficiency, time and cost to a target mIoU.

Everything comes from what `eoscale fit` logs (`eoscale.train.callbacks.monitor`): the `run/*` and `data/*` params
(strategy, world size, nodes, devices per node, precision, global batch, Slurm job, band contract) and
the metrics `throughput/samples_per_s`, `throughput/samples_per_s_device`, `time/epoch_s`,
`memory/peak_mb`, `steptime/data_wait_share` (the share of a step spent waiting for the loader: near 1, the run
is input-bound) and `val_miou` (with its history and timestamps). Nothing here depends on the machine a
run came from, so runs of different Slurm jobs or clusters synced into one store compare together.

Scaling efficiency compares a run with the run(s) of the fewest devices of the same model and data
(`group`): efficiency = (throughput_N / N) / (throughput_1 / n_1), the per-device throughput kept.
"""

from __future__ import annotations

import csv
import hashlib
import os
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from eoscale.errors import InputError, InputNotFoundError
from eoscale.track.store import artifact_location, client_policy, default_tracking_uri, sqlite_path

EXPERIMENT = "eoscale"  # where `eoscale fit` logs (eoscale.track.logger.MLflowLogger's default)
COMPARE_EXPERIMENT = "eoscale-compare"
MIOU = "val_miou"
THROUGHPUT = "throughput/samples_per_s"
THROUGHPUT_DEVICE = "throughput/samples_per_s_device"
EPOCH_TIME = "time/epoch_s"
PEAK_MEMORY = "memory/peak_mb"
DATA_WAIT = "steptime/data_wait_share"  # the share of a step blocked on the loader (eoscale.train.callbacks.steptime)
EFFICIENCY = "compare/efficiency"  # written back to each compared run, for MLflow's own compare view
# what identifies "the same model and data" for the efficiency baseline: no paths, which differ by machine
GROUP_PARAMS = ("run/model", "run/backbone", "data/bands", "data/tile_size", "data/classes")
MISSING = "–"


@dataclass
class RunRow:
    """One run's line of the comparison; None where the run did not log what the column needs."""

    run_name: str
    run_id: str
    model: str | None
    strategy: str | None
    nodes: int | None
    devices_per_node: int | None
    devices: int | None
    global_batch: int | None
    precision: str | None
    samples_per_s: float | None
    samples_per_s_device: float | None
    efficiency: float | None
    data_wait_share: float | None
    epoch_s: float | None
    target_miou: float | None
    time_to_target_s: float | None
    device_hours_to_target: float | None
    best_val_miou: float | None
    peak_memory_mb: float | None
    wall_s: float | None
    device_hours: float | None
    slurm_job_id: str | None
    baseline_run_id: str | None
    group: str


COLUMNS = tuple(f.name for f in fields(RunRow))


@dataclass
class Comparison:
    """The rows, and each run's val_miou history as (seconds since the run started, value) pairs."""

    rows: list[RunRow]
    miou_curves: dict[str, list[tuple[float, float]]]
    target_miou: float | None
    tracking_uri: str


# -- reading MLflow --------------------------------------------------------------------------------------
def connect(tracking_uri: str):
    """An `MlflowClient` for `tracking_uri`, or an InputError if there is no store or it cannot be reached."""
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("sqlite:"):
        path = sqlite_path(tracking_uri)
        if not path.is_file():  # MLflow would create an empty store here instead of saying so
            raise InputNotFoundError(
                f"no MLflow store at '{path}': run 'eoscale fit' first, or give --tracking-uri or --root-dir")
    client_policy(tracking_uri)
    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as err:
        raise InputError(f"cannot read MLflow at {tracking_uri!r}: {_first_line(err)}") from err
    return client


def find_runs(client, *, experiment: str = EXPERIMENT, run_ids: Sequence[str] | None = None) -> list:
    """The runs named by id (in that order), else the training runs of `experiment`, oldest first."""
    from mlflow.exceptions import MlflowException

    if run_ids:
        runs = []
        for run_id in run_ids:
            try:
                runs.append(client.get_run(run_id))
            except MlflowException as err:
                raise InputError(f"no MLflow run {run_id!r} at {client.tracking_uri!r}: {_first_line(err)}") from err
        return runs
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise InputError(f"no experiment {experiment!r} at {client.tracking_uri!r}; experiments there: "
                         f"{', '.join(names) or 'none'}")
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"], max_results=5000)
    # validate/test runs of a checkpoint live in the same experiment; only training runs scale
    runs = [r for r in runs if _is_training(r.data.tags.get("eoscale.command"))]
    if not runs:
        raise InputError(f"experiment {experiment!r} at {client.tracking_uri!r} has no training runs")
    return runs


def _is_training(command: str | None) -> bool:
    """A run of `eoscale fit` (or untagged): Lightning's TrainerFn is 'fit', written 'TrainerFn.FITTING' by str()."""
    return command is None or command.rsplit(".", 1)[-1].lower() in ("fit", "fitting")


# -- the comparison ----------------------------------------------------------------------------------------
def compare_runs(client, runs: Sequence, *, target_miou: float | None = None) -> Comparison:
    """Rows for `runs`; `target_miou` None: the lowest best val mIoU of the runs (one every run reached)."""
    facts = [_run_facts(client, run) for run in runs]
    if target_miou is None:
        bests = [f["best_val_miou"] for f in facts if f["best_val_miou"] is not None]
        target_miou = min(bests) if bests else None
    baselines = _baselines(facts)
    rows = []
    for f in facts:
        base = baselines.get(f["group"])
        efficiency = None
        if base is not None and f["samples_per_s_device"] is not None:
            efficiency = f["samples_per_s_device"] / base[1]
        seconds = _time_to(f["curve"], target_miou) if target_miou is not None else None
        devices = f["devices"]
        rows.append(RunRow(
            run_name=f["run_name"], run_id=f["run_id"], model=f["model"], strategy=f["strategy"], nodes=f["nodes"],
            devices_per_node=f["devices_per_node"], devices=devices, global_batch=f["global_batch"],
            precision=f["precision"], samples_per_s=f["samples_per_s"], samples_per_s_device=f["samples_per_s_device"],
            efficiency=efficiency, data_wait_share=f["data_wait_share"], epoch_s=f["epoch_s"], target_miou=target_miou, time_to_target_s=seconds,
            device_hours_to_target=seconds * devices / 3600 if seconds is not None and devices else None,
            best_val_miou=f["best_val_miou"], peak_memory_mb=f["peak_memory_mb"], wall_s=f["wall_s"],
            device_hours=f["wall_s"] * devices / 3600 if f["wall_s"] is not None and devices else None,
            slurm_job_id=f["slurm_job_id"], baseline_run_id=base[0] if base else None, group=f["group"],
        ))
    return Comparison(rows=rows, miou_curves={f["run_id"]: f["curve"] for f in facts}, target_miou=target_miou,
                      tracking_uri=client.tracking_uri)


def _run_facts(client, run) -> dict[str, Any]:
    params, info = run.data.params, run.info
    history = {name: client.get_metric_history(info.run_id, name)
               for name in (MIOU, THROUGHPUT, THROUGHPUT_DEVICE, EPOCH_TIME, PEAK_MEMORY, DATA_WAIT)}
    nodes, per_node = _int(params.get("run/num_nodes")), _int(params.get("run/devices_per_node"))
    devices = _int(params.get("run/world_size")) or (nodes * per_node if nodes and per_node else None)
    total, per_device = _steady(history[THROUGHPUT]), _steady(history[THROUGHPUT_DEVICE])
    if per_device is None and total is not None and devices:
        per_device = total / devices
    if total is None and per_device is not None and devices:
        total = per_device * devices
    start = info.start_time
    curve = sorted(((m.timestamp - start) / 1000, m.value) for m in history[MIOU]) if start else []
    end = info.end_time or max((m.timestamp for ms in history.values() for m in ms), default=None)
    peaks = [m.value for m in history[PEAK_MEMORY]]
    model = params.get("run/backbone") or params.get("run/model")
    return {
        "run_id": info.run_id,
        "run_name": info.run_name or info.run_id[:8],
        "model": model,
        "strategy": params.get("run/strategy"),
        "nodes": nodes,
        "devices_per_node": per_node,
        "devices": devices,
        "global_batch": _int(params.get("run/global_batch_size")),
        "precision": params.get("run/precision"),
        "samples_per_s": total,
        "samples_per_s_device": per_device,
        "epoch_s": _steady(history[EPOCH_TIME]),
        "data_wait_share": _steady(history[DATA_WAIT]),
        "best_val_miou": max((v for _, v in curve), default=run.data.metrics.get(MIOU)),
        "peak_memory_mb": max(peaks) if peaks else None,
        "wall_s": (end - start) / 1000 if start and end and end >= start else None,
        "slurm_job_id": params.get("run/slurm_job_id"),
        "curve": curve,
        "group": " | ".join(params.get(k, "?") for k in GROUP_PARAMS[:2]) + _data_key(params),
    }


def _data_key(params: dict[str, str]) -> str:
    data = [params.get(k) or "" for k in GROUP_PARAMS[2:]]
    # a digest, not hash(): that differs between processes
    return "" if not any(data) else " | data " + hashlib.sha1("\n".join(data).encode()).hexdigest()[:8]


def _baselines(facts: list[dict]) -> dict[str, tuple[str, float]]:
    """Per group: (baseline run id, per-device throughput) of the runs with the fewest devices (mean if several)."""
    out = {}
    for group in {f["group"] for f in facts}:
        members = [f for f in facts if f["group"] == group and f["devices"] and f["samples_per_s_device"]]
        if not members:
            continue
        fewest = min(f["devices"] for f in members)
        base = [f for f in members if f["devices"] == fewest]
        out[group] = (base[0]["run_id"], statistics.fmean(f["samples_per_s_device"] for f in base))
    return out


def _steady(metrics: Sequence) -> float | None:
    """The steady-state value of a per-epoch metric: the median after the first epoch (warm-up), if there are more."""
    values = [m.value for m in sorted(metrics, key=lambda m: (m.step, m.timestamp))]
    if not values:
        return None
    return statistics.median(values[1:] if len(values) > 1 else values)


def _time_to(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    return next((seconds for seconds, value in curve if value >= target - 1e-12), None)


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


# -- outputs -----------------------------------------------------------------------------------------------
def format_value(name: str, value: Any) -> str:
    """A cell as people read it: '–' for missing, rounded numbers."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        if name == "data_wait_share":
            return f"{value:.0%}"
        if name in ("efficiency", "best_val_miou", "target_miou"):
            return f"{value:.3f}"
        if name in ("device_hours", "device_hours_to_target"):
            return f"{value:.4g}"
        return f"{value:,.1f}"
    return str(value)


def write_csv(rows: Sequence[RunRow], path: Path) -> Path:
    """All columns; a missing value is an empty cell, so the numbers stay numbers for pandas or a spreadsheet."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})
    return path


TABLE_COLUMNS = {  # the columns people read (terminal, Markdown): column -> header
    "run_name": "run", "model": "model", "strategy": "strategy", "nodes": "nodes", "devices_per_node": "dev/node",
    "global_batch": "global batch", "precision": "precision", "samples_per_s": "samples/s",
    "samples_per_s_device": "samples/s/dev", "efficiency": "efficiency", "data_wait_share": "data wait", "epoch_s": "epoch s",
    "time_to_target_s": "s to target", "best_val_miou": "best val mIoU", "peak_memory_mb": "peak MB",
    "device_hours": "device-h",
}


def write_markdown(comparison: Comparison, path: Path) -> Path:
    header = list(TABLE_COLUMNS.values())
    lines = [
        "# eoscale compare",
        "",
        f"Tracking store: `{comparison.tracking_uri}`. Target mIoU: "
        f"{format_value('target_miou', comparison.target_miou)}. Efficiency: per-device throughput against "
        "the run with the fewest devices of the same model and data. Data wait: the share of a training step "
        "spent waiting for the loader (steady state; near 100 % a run is input-bound).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in comparison.rows:
        values = asdict(row)
        lines.append("| " + " | ".join(format_value(k, values[k]) for k in TABLE_COLUMNS) + " |")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_outputs(comparison: Comparison, output: str | os.PathLike) -> list[Path]:
    """`comparison.csv`, `comparison.md` and the plots (`eoscale.track.plots`) into `output`."""
    from eoscale.track.plots import plot_all

    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    return [
        write_csv(comparison.rows, folder / "comparison.csv"),
        write_markdown(comparison, folder / "comparison.md"),
        *plot_all(comparison, folder),
    ]


def log_comparison(client, comparison: Comparison, files: Sequence[Path]) -> str | None:
    """A run in experiment `eoscale-compare` holding `files` as artifacts, tagged with the compared run ids.

    Returns its id; a store that refuses costs a warning (the files are written already).
    """
    try:
        experiment = client.get_experiment_by_name(COMPARE_EXPERIMENT)
        if experiment is None:
            location = artifact_location(comparison.tracking_uri)  # beside a SQLite store, like `eoscale fit`
            experiment_id = client.create_experiment(COMPARE_EXPERIMENT, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        ids = [row.run_id for row in comparison.rows]
        run = client.create_run(experiment_id, tags={
            "eoscale.command": "compare", "eoscale.compared_runs": ",".join(ids)[:5000],
            "mlflow.runName": f"compare-{len(ids)}-runs",
        })
        run_id = run.info.run_id
        if comparison.target_miou is not None:
            client.log_param(run_id, "target_miou", comparison.target_miou)
        client.log_param(run_id, "runs", len(ids))
        for path in files:
            client.log_artifact(run_id, str(path), "plots" if path.suffix == ".png" else None)
        for row in comparison.rows:  # MLflow's own compare view then shows efficiency beside throughput
            if row.efficiency is not None:
                client.log_metric(row.run_id, EFFICIENCY, row.efficiency)
        client.set_terminated(run_id)
        return run_id
    except Exception as err:  # noqa: BLE001 - a refusing store must not lose the written tables
        warnings.warn(f"logging the comparison to {comparison.tracking_uri!r} failed: {_first_line(err)}",
                      RuntimeWarning, stacklevel=2)
        return None


__all__ = ["COLUMNS", "Comparison", "RunRow", "compare_runs", "connect", "default_tracking_uri", "find_runs",
           "log_comparison", "write_outputs"]
