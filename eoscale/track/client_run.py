"""One MLflow run written through MLflow's own client, without Lightning: `ClientRun`, for the commands that log a
run once, at their end (`eoscale predict`'s map and evaluation runs, `eoscale calibrate`'s fit).

Training logs through Lightning's logger (`eoscale.track.logger.MLflowLogger`); these commands need no Trainer,
and importing Lightning costs each of them about 2 CPU seconds (Lightning imports torchmetrics, which imports
scipy.signal, transformers and torchvision's models) — on every rank of every predict job of a Slurm array. The
run they write is the one Lightning's logger wrote (the same experiment rule, run name, tags, parameters cut to
250 characters, metric names, status), and the manners are the same: the SQLite store made from the cached
schema under a file lock, a locked store retried with back-off, any other failure one warning and no more logging.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
import warnings
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from filelock import FileLock

from eoscale.track.store import artifact_location, client_policy, sqlite_path

LOCKED_RETRIES = (0.2, 0.5, 1.0, 2.0, 4.0)  # seconds between tries while SQLite says "database is locked"
PARAM_CHARS = 250  # what Lightning's MLflow logger keeps of a parameter's value; runs of both read alike


def is_transient(err: BaseException) -> bool:
    """A SQLite store busy with another writer (another rank, a predict run beside a fit): worth a retry."""
    text = f"{err} {err.__cause__ or ''} {err.__context__ or ''}".lower()
    return "database is locked" in text or "database table is locked" in text


def guarded(method):
    """Run a logging method unless the tracking store has failed (`self._failed`). A transient lock of a SQLite
    store is retried with back-off (said once per run); on any other failure, or a lock that outlasts the
    retries, `self._fail(err)` warns once and logging stops."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._failed:
            return None
        for pause in (*LOCKED_RETRIES, None):
            try:
                return method(self, *args, **kwargs)
            except Exception as err:  # a dead server, a locked database, a full disk: none may cost the work
                if pause is None or not is_transient(err):
                    self._fail(err)
                    return None
                if not self._said_locked:
                    self._said_locked = True
                    warnings.warn(f"MLflow store {self._tracking_uri!r} is locked by another writer: retrying "
                                  f"for up to {sum(LOCKED_RETRIES):.0f} s", RuntimeWarning, stacklevel=2)
                time.sleep(pause)
        return None

    return wrapper


def quiet_store_creation() -> None:
    """MLflow's INFO lines about creating a new store's tables (its own handler: they reached the terminal)."""
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)


def store_lock(uri: str):
    """A file lock beside a SQLite store, for making its client: MLflow's client creates (and migrates) a new
    store on construction, and two processes doing it at once collide; a no-op context for other stores."""
    if not uri.startswith("sqlite:"):
        return nullcontext()
    database = sqlite_path(uri).resolve()
    database.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(database.with_name(database.name + ".lock")))


def default_run_name() -> str:
    """A time and a few random hex digits: MLflow draws its own names from Python's `random`, which
    `seed_everything` seeds, so every run of a seed would get the same name."""
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


class ClientRun:
    """A new run of `experiment_name` in the store at `tracking_uri` (created with the experiment if needed).

    Raises where the store cannot be opened or the run not created (the caller warns and goes on without it);
    afterwards every method is guarded (`guarded`): `failed` says whether logging stopped."""

    def __init__(self, experiment_name: str, tracking_uri: str, *, run_name: str | None = None,
                 tags: Mapping[str, str] | None = None) -> None:
        from mlflow.tracking import MlflowClient
        from mlflow.tracking.context.registry import resolve_tags
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

        quiet_store_creation()
        self._tracking_uri = tracking_uri
        self._failed = False
        self._said_locked = False
        if tracking_uri.startswith("sqlite:"):
            sqlite_path(tracking_uri).resolve().parent.mkdir(parents=True, exist_ok=True)
        client_policy(tracking_uri)
        with store_lock(tracking_uri):
            self._client = MlflowClient(tracking_uri=tracking_uri)
        found = self._client.get_experiment_by_name(experiment_name)
        if found is not None and found.lifecycle_stage != "deleted":
            experiment_id = found.experiment_id
        else:
            experiment_id = self._client.create_experiment(experiment_name,
                                                           artifact_location=artifact_location(tracking_uri))
        run = self._client.create_run(experiment_id, tags=resolve_tags(
            {**(tags or {}), MLFLOW_RUN_NAME: run_name or default_run_name()}))
        self.run_id: str = run.info.run_id
        self.experiment_id: str = experiment_id

    @property
    def failed(self) -> bool:
        """Whether the tracking store has failed: from then on nothing more is logged (see the warning)."""
        return self._failed

    def _fail(self, err: Exception) -> None:
        self._failed = True
        message = str(err).splitlines()[0] if str(err) else ""
        warnings.warn(f"MLflow tracking at {self._tracking_uri!r} failed ({type(err).__name__}: {message[:300]}); "
                      "the run is not logged further", RuntimeWarning, stacklevel=3)

    @guarded
    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:PARAM_CHARS]) for key, value in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self._client.log_batch(self.run_id, params=items[start:start + 100])

    @guarded
    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        # the characters MLflow allows in a metric name, as Lightning's logger keeps them
        items = [Metric(re.sub("[^a-zA-Z0-9_/. -]+", "", key), float(value), now, step)
                 for key, value in metrics.items() if not isinstance(value, str)]
        self._client.log_batch(self.run_id, metrics=items)

    @guarded
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._client.log_artifact(self.run_id, str(path), artifact_path)

    @guarded
    def finalize(self, status: str = "success") -> None:
        """End the run: `success` → FINISHED, `failed` → FAILED (Lightning's words), or an MLflow status."""
        self._client.set_terminated(self.run_id, {"success": "FINISHED", "failed": "FAILED"}.get(status, status))
