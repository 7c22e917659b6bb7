"""Where MLflow keeps eoscale's runs: the tracking URI rule, the artifact folder of a SQLite store, what a
store says of one run (`describe_run`, for `eoscale lineage`), and the one client policy (`client_policy`) every
eoscale command follows when it talks to a tracking server.

Light on purpose (no torch, no Lightning): `eoscale fit`, `eoscale predict`, `eoscale compare` and
`eoscale lineage` all follow these rules, and `compare` must start fast.
"""

from __future__ import annotations

import os
from pathlib import Path

# MLflow's own defaults (7 retries, backoff factor 2, 120 s a request) keep a command waiting for minutes on a
# tracking server that is gone. One policy for every eoscale command in a process (fit, predict, assess, compare,
# lineage, the registry): up to 2 retries about 1 and 2 s apart, 20 s a request. Set before the first MLflow
# request; a value the user exported wins (setdefault), and so the process never sees two policies.
HTTP_POLICY = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


def client_policy(uri: str) -> None:
    """Apply `HTTP_POLICY` before talking to the tracking store at `uri`; a SQLite store that does not exist yet is
    made from the cached empty schema (`eoscale.track.new_store`: seconds less than MLflow's migrations)."""
    if uri.startswith(("http:", "https:")):
        for name, value in HTTP_POLICY.items():
            os.environ.setdefault(name, value)
    elif uri.startswith("sqlite:///") and "?" not in uri and sqlite_path(uri).name not in ("", ":memory:"):
        from eoscale.track.new_store import seed_sqlite_store

        seed_sqlite_store(sqlite_path(uri).resolve())


def default_tracking_uri(root_dir: str | os.PathLike | None = None) -> str:
    """`MLFLOW_TRACKING_URI`, else the SQLite store `<root_dir or cwd>/mlflow.db` (what `eoscale fit` writes)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(root_dir or '.').resolve() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path:
    """The database file of a `sqlite:///relative` or `sqlite:////absolute` URI."""
    return Path(uri.split(":///", 1)[-1])


def artifact_location(uri: str) -> str | None:
    """The artifact root for a new experiment in the store at `uri`: `mlartifacts/` beside a SQLite database
    file, so that one store shared by several runs keeps its artifacts in one place (MLflow's own default,
    `./mlartifacts` of whatever the working directory was, scatters them); None (the server decides) else."""
    if not uri.startswith("sqlite:"):
        return None
    return (sqlite_path(uri).resolve().parent / "mlartifacts").as_uri()


def describe_run(uri: str, run_id: str) -> dict:
    """What the tracking store at `uri` holds of run `run_id`, without creating anything:
    `{"found": True, "experiment", "status", "name", "datasets": [{name, digest, context}]}`, or
    `{"found": False, "reason"}` (no such run, no store file at a SQLite URI, or a store that does not answer)."""
    if uri.startswith("sqlite:") and not sqlite_path(uri).is_file():
        return {"found": False, "reason": f"no tracking store at {str(sqlite_path(uri))!r}"}
    client_policy(uri)
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        client = MlflowClient(uri)
        run = client.get_run(run_id)
        experiment = client.get_experiment(run.info.experiment_id)
    except MlflowException as err:
        if getattr(err, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return {"found": False, "reason": f"no run {run_id} in {uri}"}
        return {"found": False, "reason": f"{uri} did not answer ({str(err).splitlines()[0][:160]})"}
    except Exception as err:  # a dead server, an unreadable database: lineage reports it, it does not crash
        return {"found": False, "reason": f"{uri} did not answer ({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''})"}
    datasets = []
    for entry in (run.inputs.dataset_inputs if run.inputs else []):
        context = next((t.value for t in entry.tags if t.key == "mlflow.data.context"), None)
        datasets.append({"name": entry.dataset.name, "digest": entry.dataset.digest, "context": context})
    return {"found": True, "experiment": experiment.name if experiment else None, "status": run.info.status,
            "name": run.info.run_name, "datasets": datasets}
