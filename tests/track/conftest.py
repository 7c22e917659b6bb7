"""The track tests' SQLite MLflow store, a fixture over `tests.mlflow_runs.log_known_runs`."""

from __future__ import annotations

import pytest

from tests.mlflow_runs import log_known_runs


@pytest.fixture(scope="session")
def sqlite_runs(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """A SQLite store like the one `eoscale fit` writes in its run directory, with the known runs and an empty
    experiment 'empty'. Shared by the tests (creating a store takes seconds): they only add experiments."""
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow-sqlite")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ids = log_known_runs(uri, artifacts=folder / "mlartifacts")
    MlflowClient(tracking_uri=uri).create_experiment("empty", artifact_location=(folder / "mlartifacts").as_uri())
    return uri, ids
