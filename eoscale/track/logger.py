"""MLflow for every eoscale run, without the user doing anything: `MLflowLogger`.

Lightning's `MLFlowLogger` with eoscale's defaults and manners, shared by training (`eoscale fit`,
`eoscale pretrain`) and prediction (`eoscale predict`):

- the tracking URI is `MLFLOW_TRACKING_URI` if set, else an embedded SQLite store in the run directory,
  `sqlite:///<root_dir>/mlflow.db` (`eoscale.track.store`); a SQLite store keeps its artifacts in
  `mlartifacts/` beside the database file, whoever makes its experiments (a URI is always passed:
  Lightning's own default, `file:./mlruns`, raises in MLflow 3);
- a tracking store that fails (at the start or mid-run) costs one warning, not the run: logging stops
  (`failed` says so), the work goes on, and every metric is also appended to `metrics.csv` in the run's
  local folder (`<root_dir>/<experiment id>/<run id>/`, beside `checkpoints/`);
- a resumed run (`run_id`: a requeued Slurm job, `--ckpt_path`) is continued, not duplicated.
"""

from __future__ import annotations

import csv
import logging
import os
import time
import uuid
import warnings
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.loggers.logger import DummyExperiment
from lightning.pytorch.utilities import rank_zero_only

from eoscale.track.client_run import default_run_name, store_lock
from eoscale.track.client_run import guarded as _guarded
from eoscale.track.client_run import quiet_store_creation as quiet_mlflow_store_creation
from eoscale.track.store import artifact_location, client_policy, default_tracking_uri


class _DropCreating(logging.Filter):
    """Lightning's "Experiment with name … not found. Creating it.": eoscale makes its experiments on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not found. Creating it." not in str(record.getMessage())


def quiet_store_creation() -> None:
    """What a first run in a new store printed: MLflow's INFO lines about creating its tables (its own handler,
    so they reached the user's terminal) and Lightning's experiment line (idempotent)."""
    quiet_mlflow_store_creation()
    target = logging.getLogger("lightning.pytorch.loggers.mlflow")
    if not any(isinstance(f, _DropCreating) for f in target.filters):
        target.addFilter(_DropCreating())


LAUNCHER_ENV = "EOSCALE_LAUNCHER"  # set by a launcher eoscale cannot see from the environment (Ray: "ray")


def detect_launcher() -> str:
    """What started this process's ranks, for the `run/launcher` param: `$EOSCALE_LAUNCHER` if set (a launcher
    says so itself), else `torchrun` (TorchElastic's variables), `srun` (a Slurm job step's task), or `local`
    (one process, or Lightning's own launcher starting the ranks of one machine)."""
    named = os.environ.get(LAUNCHER_ENV, "").strip()
    if named:
        return named
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    if "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ:
        return "srun"
    return "local"


class MLflowLogger(MLFlowLogger):
    """Lightning's MLflow logger with eoscale's defaults (see the module docstring).

    Args:
        experiment_name: the MLflow experiment (created if needed).
        run_name: the run's name in the MLflow UI.
        tracking_uri: overrides `MLFLOW_TRACKING_URI` and the SQLite default.
        root_dir: the run directory that holds `mlflow.db`, `mlartifacts/` and the checkpoints
            (`eoscale fit` passes `trainer.default_root_dir`; default: the working directory).
        tags: extra MLflow tags.
        log_model: also upload checkpoints as artifacts (`True`: at the end, `"all"`: as they are written).
        local_metrics: also append every metric to `<root_dir>/<experiment>/<run>/metrics.csv` (training's
            copy for a tracking store that goes away; `eoscale predict` logs once and keeps its folder clean).
    """

    def __init__(
        self,
        experiment_name: str = "eoscale",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        root_dir: str | None = None,
        tags: dict[str, Any] | None = None,
        log_model: bool | str = False,
        run_id: str | None = None,
        local_metrics: bool = True,
    ) -> None:
        quiet_store_creation()
        self._run_root = Path(root_dir or ".").resolve()
        uri = tracking_uri or default_tracking_uri(self._run_root)
        artifacts = None
        if uri.startswith("sqlite:"):
            self._run_root.mkdir(parents=True, exist_ok=True)
            artifacts = artifact_location(uri)
        client_policy(uri)
        # MLflow's client creates (and migrates) a SQLite store on construction, on every rank: two ranks
        # doing it at once collide ("Does not validate against any of the Union subtypes", then a hang at the
        # first collective), so they take turns under a file lock next to the store (`store_lock`)
        if run_name is None and run_id is None:
            run_name = default_run_name()
        with store_lock(uri):
            super().__init__(
                experiment_name=experiment_name,
                run_name=run_name,
                tracking_uri=uri,
                tags=tags,
                save_dir=None,
                log_model=log_model,
                artifact_location=artifacts,
                run_id=run_id,
            )
        self._failed = False
        self._said_locked = False
        self._offline_id = f"offline-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self._resumed: dict[str, str] | None = None  # a resumed run's params as MLflow holds them
        self._changed: set[str] = set()  # and the ones this resumed part wanted to change
        self._local_metrics = local_metrics

    @property
    def failed(self) -> bool:
        """Whether the tracking store has failed: from then on nothing more is logged (see the warning)."""
        return self._failed

    @property
    def experiment(self):
        """MLflow's client, or a stand-in that does nothing once the tracking store has failed."""
        if not self._failed:
            try:
                if self._run_id is not None and not self._initialized:
                    self._resume()
                return super().experiment
            except Exception as err:  # Lightning touches this in setup: an unreachable server fails here first
                self._fail(err)
        return DummyExperiment()

    def _resume(self) -> None:
        """Continue run `run_id` (a resumed training: a requeued Slurm job, `--ckpt_path`) as RUNNING again, or,
        where this store does not have it, start a new run and say so."""
        from mlflow.exceptions import MlflowException

        try:
            run = self._mlflow_client.get_run(self._run_id)
        except MlflowException as err:
            if getattr(err, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                raise
            warnings.warn(f"MLflow run {self._run_id} of the checkpoint is not in {self._tracking_uri!r}: "
                          "logging to a new run", RuntimeWarning, stacklevel=4)
            self._run_id = None
            return
        self._resumed = dict(run.data.params)
        self._mlflow_client.update_run(self._run_id, status="RUNNING")

    def _fail(self, err: Exception) -> None:
        self._failed = True
        message = str(err).splitlines()[0] if str(err) else ""
        warnings.warn(
            f"MLflow tracking at {self._tracking_uri!r} failed ({type(err).__name__}: {message[:300]}); "
            f"training goes on, metrics stay in {self.local_dir / 'metrics.csv'}",
            RuntimeWarning,
            stacklevel=3,
        )

    # Lightning puts checkpoints under <default_root_dir>/<name>/<version>/checkpoints
    @property
    def name(self) -> str:
        return (None if self._failed else self._safe_experiment_id()) or "offline"

    @property
    def version(self) -> str:
        return (None if self._failed else self._safe_run_id()) or self._offline_id

    @property
    def save_dir(self) -> str:
        """The run directory (Lightning's `trainer.log_dir`; MLflow's own says None for non-file stores)."""
        return str(self._run_root)

    @_guarded
    def _safe_experiment_id(self) -> str | None:
        return self.experiment_id

    @_guarded
    def _safe_run_id(self) -> str | None:
        return self.run_id

    @property
    def local_dir(self) -> Path:
        """The run's local folder: `metrics.csv`, and Lightning's `checkpoints/`."""
        return self._run_root / str(self._experiment_id or "offline") / str(self._run_id or self._offline_id)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._append_csv(metrics, step)
        self._log_metrics(metrics, step)

    @_guarded
    def _log_metrics(self, metrics: Mapping[str, float], step: int | None) -> None:
        super().log_metrics(metrics, step)

    @rank_zero_only
    @_guarded
    def log_hyperparams(self, params: Any) -> None:
        _ = self.experiment  # a resumed run's params are known from here on
        if self._resumed is None:
            super().log_hyperparams(params)
            return
        # MLflow refuses to change a param: a resumed run logs only the new ones, and names the changed ones
        # (the resumed job's ckpt_path, its restart count) in a tag
        flat = flatten_params(params)
        new = {k: v for k, v in flat.items() if k not in self._resumed}
        changed = {k for k, v in flat.items() if k in self._resumed and str(v)[:250] != self._resumed[k]}
        if new:
            super().log_hyperparams(new)
            self._resumed.update({k: str(v)[:250] for k, v in new.items()})  # as Lightning cuts them
        if changed - self._changed:  # the tag names every change of the resumed run, over all calls
            self._changed |= changed
            self.experiment.set_tag(self.run_id, "eoscale.changed_on_resume", ",".join(sorted(self._changed))[:5000])

    @rank_zero_only
    @_guarded
    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self.experiment.log_artifact(self.run_id, str(path), artifact_path)

    @rank_zero_only
    @_guarded
    def log_dataset(self, name: str, source: str, *, digest: str | None = None, context: str = "training") -> None:
        """Log a dataset (a tile store) as an input of the run (`mlflow.data`), so that the MLflow UI shows what
        the model was trained on. `digest` is cut to the 36 characters MLflow's stores keep; without one, MLflow
        derives it from the name and source."""
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.sources import LocalArtifactDatasetSource
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        dataset = MetaDataset(LocalArtifactDatasetSource(source), name=name, digest=digest[:36] if digest else None)
        tags = [InputTag(key=MLFLOW_DATASET_CONTEXT, value=context)]
        self.experiment.log_inputs(self.run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])

    @rank_zero_only
    @_guarded
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.experiment.set_tag(self.run_id, key, str(value))

    @rank_zero_only
    @_guarded
    def finalize(self, status: str = "success") -> None:
        super().finalize(status)

    @_guarded
    def after_save_checkpoint(self, checkpoint_callback) -> None:
        super().after_save_checkpoint(checkpoint_callback)

    def _append_csv(self, metrics: Mapping[str, float], step: int | None) -> None:
        if not self._local_metrics:
            return
        path = self.local_dir / "metrics.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["time", "step", "metric", "value"])
            now = f"{time.time():.3f}"
            for key, value in metrics.items():
                writer.writerow([now, step, key, float(value)])


def flatten_params(params: Mapping[str, Any] | Namespace, prefix: str = "") -> dict[str, Any]:
    """Nested params as one level of `a/b` keys, as Lightning's MLflow logger names them."""
    if isinstance(params, Namespace):
        params = vars(params)
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, f"{name}/"))
        else:
            flat[name] = value
    return flat
