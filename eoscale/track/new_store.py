"""A new SQLite tracking store made from a copy of an empty one: MLflow makes a new SQLite store by running every
one of its schema migrations (Alembic, dozens of table rebuilds), which took 2-3 s of CPU a store here (7 s on a loaded
login node), and eoscale makes one for every output folder a command is given without a tracking URI (predict,
assess, fit's root dir). The empty schema is made once per MLflow version, by MLflow itself, in a cache folder
(`$EOSCALE_CACHE_DIR`, else `$XDG_CACHE_HOME/eoscale`, else `~/.cache/eoscale`); a new store is a copy of it.

The copy holds MLflow's tables at its schema head and no experiment, which is what MLflow's own creation leaves
before it adds its "Default" experiment: opening the copy, MLflow checks the schema and adds that experiment itself,
with the artifact location it would have given it. Nothing is replaced: a store that exists (or appears meanwhile,
from another rank) is left as it is. Where the cache cannot be written or read, MLflow makes the store as before.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path

CACHE_ENV = "EOSCALE_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eoscale"


def empty_schema() -> Path:
    """The cached empty store of this MLflow version, made by MLflow the first time (atomically: concurrent
    processes each make one and the last rename wins, all equal)."""
    import mlflow

    target = cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"
    if target.is_file() and _is_empty_schema(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".schema-") as work:
        made = Path(work) / "empty.db"
        _make_with_mlflow(made)
        with sqlite3.connect(made) as con:  # MLflow's "Default" experiment: opening a copy makes its own
            con.execute("DELETE FROM experiments")
        os.replace(made, target)
    return target


def _is_empty_schema(path: Path) -> bool:
    """Whether `path` is an MLflow store with its schema version and no experiment (not a damaged cache file)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            (version,) = con.execute("SELECT version_num FROM alembic_version").fetchone()
            (experiments,) = con.execute("SELECT count(*) FROM experiments").fetchone()
    except (sqlite3.Error, TypeError, ValueError):
        return False
    return bool(version) and experiments == 0


def _make_with_mlflow(path: Path) -> None:
    import logging

    from mlflow import MlflowClient

    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # its "Creating initial tables" lines
    MlflowClient(f"sqlite:///{path}").search_experiments()


def seed_sqlite_store(database: Path) -> bool:
    """Make the SQLite store `database` from the cached empty schema if it does not exist yet; True if made here.
    Never replaces a file: the copy is linked into place, which fails if something is there by then."""
    if database.exists():
        return False
    try:
        schema = empty_schema()
        database.parent.mkdir(parents=True, exist_ok=True)
        part = database.with_name(f".{database.name}.{uuid.uuid4().hex[:8]}.part")
        try:
            shutil.copyfile(schema, part)
            os.link(part, database)
        finally:
            part.unlink(missing_ok=True)
    except FileExistsError:
        return False  # another process made it meanwhile
    except (OSError, sqlite3.Error, ImportError):
        return False  # MLflow makes it as it always did
    return True
