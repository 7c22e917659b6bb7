"""Where MLflow keeps eoscale's runs: the tracking URI rule and the artifact folder of a SQLite store.

Light on purpose (no torch, no Lightning): `eoscale fit`, `eoscale predict` and `eoscale compare` all follow
these rules, and `compare` must start fast.
"""

from __future__ import annotations

import os
from pathlib import Path


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
