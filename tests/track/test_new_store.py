"""A new SQLite tracking store made from the cached empty schema (`eoscale.track.new_store`) is the store MLflow
makes itself: the same tables, the Default experiment MLflow adds on opening, runs logged; nothing is replaced."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from eoscale.track.new_store import CACHE_ENV, empty_schema, seed_sqlite_store
from eoscale.track.store import client_policy


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")  # one cached schema for the module: making one is MLflow's seconds


@pytest.fixture
def cache(cache_dir, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(cache_dir))
    return cache_dir


def _schema(database: Path) -> dict[tuple, list[str]]:
    """Each table's and index's definition as its sorted lines: MLflow's own migrations write a table's constraints
    in an order that differs from one store to the next (two stores it makes in one process differ so)."""
    with sqlite3.connect(database) as con:
        rows = con.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return {(kind, name): sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())
            for kind, name, sql in rows}


def _experiments(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as con:
        return con.execute("SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments").fetchall()


def test_a_seeded_store_is_the_store_mlflow_makes(cache, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)  # MLflow's Default experiment's artifact location is the working folder's mlruns/
    fresh, seeded = tmp_path / "fresh" / "mlflow.db", tmp_path / "seeded" / "mlflow.db"
    fresh.parent.mkdir()
    MlflowClient(f"sqlite:///{fresh}").search_experiments()
    client_policy(f"sqlite:///{seeded}")
    assert seeded.is_file() and _experiments(seeded) == []  # the copy: tables, no experiment yet
    client = MlflowClient(f"sqlite:///{seeded}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert _schema(seeded) == _schema(fresh)
    assert [row[1:] for row in _experiments(seeded)] == [row[1:] for row in _experiments(fresh)]
    run = client.create_run(client.create_experiment("eoscale"))
    client.log_metric(run.info.run_id, "val_miou", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"val_miou": 0.5}
    assert list(cache.glob("mlflow-*-empty.db"))  # made once, for the next store


def test_an_existing_file_is_never_replaced(cache, tmp_path):
    mine = tmp_path / "mlflow.db"
    mine.write_bytes(b"not a database of eoscale's")
    assert seed_sqlite_store(mine) is False
    assert mine.read_bytes() == b"not a database of eoscale's"
    assert not list(tmp_path.glob(".mlflow.db.*"))  # no part file left


def test_a_damaged_cached_schema_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    schema = empty_schema()
    schema.write_bytes(b"half a file")
    assert seed_sqlite_store(tmp_path / "a" / "mlflow.db")
    assert _experiments(tmp_path / "a" / "mlflow.db") == [] and schema.stat().st_size > 1000


def test_without_a_writable_cache_mlflow_makes_the_store(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv(CACHE_ENV, str(blocked / "cache"))
    database = tmp_path / "mlflow.db"
    assert seed_sqlite_store(database) is False and not database.exists()
    client_policy(f"sqlite:///{database}")  # the same, quietly
    assert [e.name for e in MlflowClient(f"sqlite:///{database}").search_experiments()] == ["Default"]


def test_memory_and_query_uris_are_left_to_mlflow(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client_policy("sqlite:///:memory:")
    client_policy("sqlite:///x.db?timeout=30")
    assert list(tmp_path.iterdir()) == []
