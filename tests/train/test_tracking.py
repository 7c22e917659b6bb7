"""MLflow: a real tracking server gets the run; a server that goes away does not stop training."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from mlflow import MlflowClient

from eoscale.track.logger import MLflowLogger
from eoscale.track.store import default_tracking_uri
from eoscale.train.launch.main import main

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


pytestmark = pytest.mark.usefixtures("one_thread")


def _args(store: Path, root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", SMOKE, "--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
            "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", "--trainer.default_root_dir", str(root),
            *extra]


def _dead_uri() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_default_uri(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert default_tracking_uri(tmp_path) == "http://tracking:5000"
    assert MLflowLogger(tracking_uri="http://other:5000", root_dir=str(tmp_path))._tracking_uri == "http://other:5000"


def test_shared_sqlite_store_keeps_artifacts_beside_it(monkeypatch, tmp_path: Path):
    """Runs of several root folders (pretrain, fit, predict) in one SQLite store: one `mlartifacts/`, beside it,
    not in the first run's folder nor in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///shared/mlflow.db")
    (tmp_path / "shared").mkdir()
    logger = MLflowLogger(experiment_name="a", root_dir=str(tmp_path / "runs" / "one"))
    logger.log_hyperparams({"x": 1})  # the experiment and the run are made on first use
    client = MlflowClient(logger._tracking_uri)
    experiment = client.get_experiment_by_name("a")
    assert experiment.artifact_location == (tmp_path / "shared" / "mlartifacts").as_uri()
    logger.finalize("success")


def test_server_gone_mid_run_keeps_training(store: Path, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.warns(RuntimeWarning, match="MLflow tracking at .* failed .* training goes on"):
        main(_args(store, tmp_path, "--trainer.callbacks+=tests.train.helpers.CutTracking",
                   "--trainer.callbacks.step=2", f"--trainer.callbacks.uri={_dead_uri()}"))
    (csv,) = tmp_path.rglob("metrics.csv")
    text = csv.read_text()
    assert text.count(",val_miou,") == 2  # both validations, the second after the server went away
    assert (csv.parent / "checkpoints" / "last.ckpt").is_file()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert "val_miou" not in run.data.metrics  # nothing reached MLflow after the cut


def test_no_server_at_all(store: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", _dead_uri())
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.warns(RuntimeWarning, match="MLflow tracking"):
        main(_args(store, tmp_path, "--trainer.max_steps", "3"))
    (csv,) = tmp_path.rglob("offline-*/metrics.csv")
    assert "val_miou" in csv.read_text()


@pytest.mark.slow
def test_real_tracking_server(store: Path, tmp_path: Path, monkeypatch, mlflow_server: str):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    main(_args(store, tmp_path, "--trainer.logger.init_args.experiment_name", "server-test"))
    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("server-test").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["run/world_size"] == "1" and run.data.params["model.backbone"] == "resnet18"
    assert {"val_miou", "train_loss_step", "throughput/samples_per_s", "memory/peak_mb"} <= set(run.data.metrics)
    history = client.get_metric_history(run.info.run_id, "val_miou")
    assert len(history) == 2  # validation every 3 of 6 steps
    assert {a.path for a in client.list_artifacts(run.info.run_id, "figures")} == {
        "figures/confusion_val.png", "figures/panels_val.png"}
    assert not (tmp_path / "mlflow.db").exists()  # the server's store, not the embedded one


@pytest.mark.slow
def test_resumed_fit_continues_its_mlflow_run(store: Path, tmp_path: Path, monkeypatch):
    """A crash, then `--ckpt_path last` (as a requeued job resumes from its hpc checkpoint): one MLflow run,
    with the metrics of both parts, RUNNING again while resumed and FINISHED at the end."""
    from tests.train.helpers import Crash

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(Crash):
        main(_args(store, tmp_path, "--trainer.max_steps", "8", "--trainer.val_check_interval", "2",
                   "--trainer.callbacks+=tests.train.helpers.CrashAt", "--trainer.callbacks.step=5"))
    main(_args(store, tmp_path, "--trainer.max_steps", "8", "--trainer.val_check_interval", "2",
               "--ckpt_path", "last"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "val_miou"))
    assert steps[0] < 5 and steps[-1] >= 7, steps  # validations before the crash and after resuming
    assert run.data.params["ckpt_path"] == "last"  # a param only the resumed part had: added, not refused
    (checkpoints,) = {p.parent for p in tmp_path.rglob("last.ckpt")}  # one run folder, reused
    assert checkpoints.parent.name == run.info.run_id


def test_resumed_run_keeps_params_and_names_changes(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = MLflowLogger(root_dir=str(tmp_path))
    first.log_hyperparams({"lr": 0.1, "steps": 10})
    first.finalize("success")
    again = MLflowLogger(root_dir=str(tmp_path), run_id=first.run_id)
    again.log_hyperparams({"lr": 0.1, "steps": 20, "ckpt_path": "last"})
    run = MlflowClient(again._tracking_uri).get_run(first.run_id)
    assert run.info.status == "RUNNING" and not again.failed
    assert run.data.params == {"lr": "0.1", "steps": "10", "ckpt_path": "last"}
    assert run.data.tags["eoscale.changed_on_resume"] == "steps"
    again.log_hyperparams({"lr": 0.2})  # a later call (the run facts) adds to the tag, not replaces it
    run = MlflowClient(again._tracking_uri).get_run(first.run_id)
    assert run.data.tags["eoscale.changed_on_resume"] == "lr,steps" and run.data.params["lr"] == "0.1"
    with pytest.warns(RuntimeWarning, match="is not in .*: logging to a new run"):
        other = MLflowLogger(tracking_uri=f"sqlite:///{tmp_path / 'other.db'}", root_dir=str(tmp_path), run_id=first.run_id)
        other.log_hyperparams({"lr": 0.2})
    assert other.run_id != first.run_id and not other.failed


def test_a_transient_database_lock_is_retried_not_the_end_of_logging(tmp_path: Path, monkeypatch):
    """Issue 13, fault 12: one 'database is locked' used to turn logging off for the rest of the run."""
    import sqlite3

    from lightning.pytorch.loggers import MLFlowLogger

    from eoscale.track import client_run

    monkeypatch.setattr(client_run, "LOCKED_RETRIES", (0.01, 0.01, 0.01))  # the retries `guarded` makes
    logger = MLflowLogger(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", root_dir=str(tmp_path))
    real, calls = MLFlowLogger.log_metrics, []

    def locked_twice(self, metrics, step=None):
        calls.append(step)
        if len(calls) <= 2:
            raise RuntimeError("(sqlite3.OperationalError) database is locked") from sqlite3.OperationalError("locked")
        return real(self, metrics, step)

    monkeypatch.setattr(MLFlowLogger, "log_metrics", locked_twice)
    with pytest.warns(RuntimeWarning, match="locked by another writer") as caught:
        logger.log_metrics({"x": 1.0}, step=0)
        logger.log_metrics({"x": 2.0}, step=1)
    assert not logger.failed and len(calls) == 4
    assert sum("locked" in str(w.message) for w in caught) == 1  # said once
    history = MlflowClient(logger._tracking_uri).get_metric_history(logger.run_id, "x")
    assert [m.value for m in history] == [1.0, 2.0]

    # a lock that outlasts the retries ends logging with one warning, as any other failure does
    monkeypatch.setattr(MLFlowLogger, "log_metrics", lambda self, m, step=None: (_ for _ in ()).throw(
        RuntimeError("database is locked")))
    with pytest.warns(RuntimeWarning, match="failed"):
        logger.log_metrics({"x": 3.0}, step=2)
    assert logger.failed
