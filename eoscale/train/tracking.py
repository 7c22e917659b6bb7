"""MLflow for every training run, without the user doing anything.

`MLflowLogger` is Lightning's `MLFlowLogger` with eoscale's defaults and manners:

- the tracking URI is `MLFLOW_TRACKING_URI` if set, else an embedded SQLite store in the run directory,
  `sqlite:///<root_dir>/mlflow.db`; a SQLite store keeps its artifacts in `mlartifacts/` beside the database
  file, whoever makes its experiments (a URI is always passed:
  Lightning's own default, `file:./mlruns`, raises in MLflow 3);
- a tracking server that fails (at the start or mid-run) costs one warning, not the run: logging stops,
  training goes on, and every metric is also appended to `metrics.csv` in the run's local folder
  (`<root_dir>/<experiment id>/<run id>/`, beside `checkpoints/`).

`TrainingMonitor` is the callback that logs what the LightningModule does not: the run's facts (strategy,
world size, nodes, devices, precision, global batch, git commit, Slurm job), throughput per device and in
total, epoch time, peak memory, the confusion matrix and a few image/label/prediction panels as PNGs,
and the path of the best checkpoint. Everything is logged from rank 0 only; the reductions that feed it
run on every rank.
"""

from __future__ import annotations

import csv
import functools
import os
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from lightning import Callback, LightningModule, Trainer
from lightning.fabric.loggers.logger import _DummyExperiment
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only

from eoscale.track.store import artifact_location, default_tracking_uri, sqlite_path

HTTP_RETRIES = "2"  # MLflow's default retries with backoff for minutes before giving up on a dead server
HTTP_TIMEOUT = "20"


def _guarded(method):
    """Run a logger method unless the tracking store has failed; on the first failure, warn and stop."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._failed:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as err:  # a dead server, a locked database, a full disk: none may kill training
            self._fail(err)
            return None

    return wrapper


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
        self._run_root = Path(root_dir or ".").resolve()
        uri = tracking_uri or default_tracking_uri(self._run_root)
        artifacts = None
        if uri.startswith("sqlite:"):
            self._run_root.mkdir(parents=True, exist_ok=True)
            artifacts = artifact_location(uri)
        elif uri.startswith(("http:", "https:")):
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_RETRIES)
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT)
        # MLflow's client creates (and migrates) a SQLite store on construction, on every rank: two ranks
        # doing it at once collide ("Does not validate against any of the Union subtypes", then a hang at the
        # first collective), so they take turns under a file lock next to the store
        if uri.startswith("sqlite:"):
            database = sqlite_path(uri).resolve()
            database.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(database.with_name(database.name + ".lock")))
        else:
            lock = nullcontext()
        with lock:
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
        self._offline_id = f"offline-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self._resumed: dict[str, str] | None = None  # a resumed run's params as MLflow holds them
        self._changed: set[str] = set()  # and the ones this resumed part wanted to change
        self._local_metrics = local_metrics

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
        return _DummyExperiment()

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
        flat = _flatten_dict(_convert_params(params))
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


def mlflow_loggers(trainer: Trainer) -> list[MLFlowLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]


RUN_KEY = "eoscale_mlflow_run_id"  # in a checkpoint: the MLflow run that wrote it


def resume_run_id(checkpoint: str | os.PathLike | None) -> str | None:
    """The MLflow run a checkpoint file was written by (None: not known, a sharded folder, or no file)."""
    if checkpoint is None or not Path(checkpoint).is_file():
        return None
    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # not ours to judge here: Lightning reports an unreadable checkpoint when it loads it
        return None
    value = saved.get(RUN_KEY) if isinstance(saved, dict) else None
    return str(value) if value else None


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """The commit of the eoscale source tree (with `+dirty` if it has changes), or None outside git."""
    where = Path(path or Path(__file__).parent)
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def run_facts(trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
    """Where and how this run runs: what `eoscale compare` needs to put runs side by side."""
    strategy = trainer.strategy
    datamodule = getattr(trainer, "datamodule", None)
    batch = getattr(datamodule, "batch_size", None)
    hp = getattr(pl_module, "hparams", {})
    facts = {
        "run/model": type(pl_module).__name__,
        "run/backbone": hp.get("backbone"),
        "run/strategy": type(strategy).__name__,
        "run/world_size": trainer.world_size,
        "run/num_nodes": trainer.num_nodes,
        "run/devices_per_node": trainer.num_devices,
        "run/accelerator": type(trainer.accelerator).__name__,
        "run/precision": trainer.precision,
        "run/batch_size_per_device": batch,
        "run/accumulate_grad_batches": trainer.accumulate_grad_batches,
        "run/global_batch_size": batch * trainer.world_size * trainer.accumulate_grad_batches if batch else None,
        "run/git_commit": git_commit(),
        "run/torch": torch.__version__,
        "run/slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "run/device_name": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    contract = getattr(pl_module, "contract", None)
    if contract is not None:
        facts["data/bands"] = ",".join(contract.bands)
        facts["data/tile_size"] = contract.tile_size
        facts["data/classes"] = ",".join(c["name"] for c in contract.classes)
    if datamodule is not None and getattr(datamodule, "hparams", None):
        facts.update({f"data/{k}": v for k, v in dict(datamodule.hparams).items()})
    return {k: v for k, v in facts.items() if v is not None}


class TrainingMonitor(Callback):
    """Throughput, epoch time, peak memory, figures and run facts into every MLflow logger.

    Args:
        panels: how many tiles of the first validation batch to draw as image/label/prediction panels.
        rgb_bands: band names shown as red, green, blue (the first three bands if these are absent).
    """

    def __init__(self, panels: int = 4, rgb_bands: tuple[str, str, str] = ("B04", "B03", "B02")) -> None:
        self.panels = panels
        self.rgb_bands = rgb_bands
        self._samples = 0
        self._epoch_start = 0.0
        self._window = (0, 0.0)
        self._panel_batch: dict[str, torch.Tensor] | None = None

    # -- facts ---------------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_facts(trainer, pl_module)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._log_facts(trainer, pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_facts(trainer, pl_module)

    def _log_facts(self, trainer: Trainer, pl_module: LightningModule) -> None:
        facts = run_facts(trainer, pl_module)  # every rank: no collectives inside, but cheap
        for logger in mlflow_loggers(trainer):
            logger.log_hyperparams(facts)
            if hasattr(logger, "set_tags"):
                logger.set_tags({"eoscale.command": getattr(trainer.state.fn, "value", str(trainer.state.fn)), "eoscale.strategy": facts["run/strategy"]})

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        # the MLflow run travels with the checkpoint: a resumed training continues it (`resume_run_id`)
        runs = [logger.run_id for logger in mlflow_loggers(trainer) if not getattr(logger, "_failed", False)]
        if runs and runs[0]:
            checkpoint[RUN_KEY] = runs[0]

    # -- throughput and memory ------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self._samples = 0
        self._epoch_start = time.perf_counter()
        self._window = (0, self._epoch_start)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self._samples += int(batch["image"].shape[0])
        if (trainer.global_step % max(trainer.log_every_n_steps, 1)) == 0 and trainer.global_step > 0:
            samples, since = self._window
            now = time.perf_counter()
            per_device = (self._samples - samples) / max(now - since, 1e-9)
            self._window = (self._samples, now)
            # per-step figure from this rank; the epoch figure below is the exact all-rank sum
            pl_module.log("throughput/samples_per_s_device_step", per_device, on_step=True, on_epoch=False, rank_zero_only=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        seconds = time.perf_counter() - self._epoch_start
        device = pl_module.device
        # collectives: every rank takes part
        samples = trainer.strategy.reduce(torch.tensor(float(self._samples), device=device), reduce_op="sum")
        slowest = trainer.strategy.reduce(torch.tensor(seconds, device=device), reduce_op="max")
        peak = trainer.strategy.reduce(torch.tensor(peak_memory_mb(), device=device), reduce_op="max")
        metrics = {
            "throughput/samples_per_s": float(samples) / max(float(slowest), 1e-9),
            "throughput/samples_per_s_device": float(samples) / max(float(slowest), 1e-9) / trainer.world_size,
            "time/epoch_s": float(slowest),
            "memory/peak_mb": float(peak),
        }
        for logger in mlflow_loggers(trainer):
            logger.log_metrics(metrics, step=trainer.global_step)

    # -- figures --------------------------------------------------------------------------------------------
    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and trainer.is_global_zero and isinstance(outputs, Mapping):
            n = self.panels
            self._panel_batch = {
                "image": batch["image"][:n].detach().float().cpu(),
                "label": batch["label"][:n].detach().cpu(),
                "pred": outputs["pred"][:n].detach().cpu(),
            }

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._log_figures(trainer, pl_module, "val")

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_figures(trainer, pl_module, "test")

    def _log_figures(self, trainer: Trainer, pl_module: LightningModule, split: str) -> None:
        loggers = [lg for lg in mlflow_loggers(trainer) if hasattr(lg, "log_artifact")]
        if not trainer.is_global_zero or not loggers:
            return
        from eoscale.train import figures

        confusion = getattr(pl_module, "last_confusion", {}).get(split)
        names = list(getattr(pl_module, "class_names", []))
        contract = getattr(pl_module, "contract", None)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            if confusion is not None:
                paths.append(figures.confusion_png(confusion.numpy(), names, Path(tmp) / f"confusion_{split}.png"))
            if self._panel_batch is not None and split == "val":
                colors = [c["color"] for c in contract.classes] if contract else None
                rgb = _rgb_indices(contract.bands if contract else (), self.rgb_bands)
                paths.append(figures.panels_png(self._panel_batch, Path(tmp) / "panels_val.png", rgb=rgb, colors=colors))
            for logger in loggers:
                for path in paths:
                    logger.log_artifact(path, "figures")

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        callback = trainer.checkpoint_callback
        best = getattr(callback, "best_model_path", "") if callback is not None else ""
        if not best and callback is not None:
            best = getattr(callback, "last_model_path", "")
        if best:
            for logger in mlflow_loggers(trainer):
                if hasattr(logger, "set_tags"):
                    logger.set_tags({"best_checkpoint": str(Path(best).resolve())})
                logger.log_hyperparams({"best_checkpoint": str(Path(best).resolve())})


def peak_memory_mb() -> float:
    """Peak accelerator memory allocated by torch, or the process's peak resident memory on CPUs."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _rgb_indices(bands, wanted) -> tuple[int, int, int]:
    bands = list(bands)
    if all(b in bands for b in wanted):
        return tuple(bands.index(b) for b in wanted)  # type: ignore[return-value]
    return (0, 1, 2) if len(bands) >= 3 else (0, 0, 0)
