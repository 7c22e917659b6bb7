"""One MLflow client policy for the whole process (eoscale.track.store.client_policy)."""

from __future__ import annotations

import re
from pathlib import Path

from eoscale.track import store

SOURCE = Path(store.__file__).resolve().parents[1]


def test_no_module_but_the_policy_sets_mlflow_client_variables():
    """Six modules used to set MLflow's retry/timeout variables with different values (the first caller won)."""
    setters = re.compile(r"environ(\.setdefault\(|\[)\s*['\"]MLFLOW_HTTP_")
    found = [str(p.relative_to(SOURCE.parent)) for p in SOURCE.rglob("*.py")
             if p != Path(store.__file__).resolve() and setters.search(p.read_text())]
    assert not found, f"MLflow client variables set outside eoscale/track/store.py: {found}"


def test_policy_for_servers_only_and_the_users_value_wins(monkeypatch):
    for name in store.HTTP_POLICY:
        monkeypatch.delenv(name, raising=False)
    store.client_policy("sqlite:///x/mlflow.db")
    assert not any(name in __import__("os").environ for name in store.HTTP_POLICY)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    store.client_policy("http://127.0.0.1:5000")
    import os

    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "5"  # exported by the user: kept
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == store.HTTP_POLICY["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == store.HTTP_POLICY["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"]
