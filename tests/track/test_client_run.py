"""`eoscale.track.client_run.ClientRun`: the run `eoscale predict` (and calibrate's evaluation) log through MLflow's
client reads as the one Lightning's logger wrote before, the manners are the same, and those commands import
neither Lightning nor (for the map-only commands) torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from eoscale.infer.tracking import open_run
from eoscale.track.client_run import ClientRun
from tests.processes import ROOT

PARAMS = {"inputs": "x" * 300, "scenes": 2, "overlap": 0.25, "adapter": "", "device": "auto"}
METRICS = {"km2": 1.5, "windows_per_s": 12.0, "area_ha/Tree cover": 3.0, "area_ha/odd(name)": 1.0}


def _log(run, artifact: Path) -> None:
    run.log_hyperparams(PARAMS)
    run.log_metrics(METRICS, step=0)
    run.log_artifact(artifact, "areas")
    run.finalize("success")


def _read(uri: str) -> tuple:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("eoscale-predict")
    (run,) = client.search_runs([experiment.experiment_id])
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "areas")]
    return (Path(experiment.artifact_location.removeprefix("file://")).name, run.info.run_name, run.info.status,
            run.data.params, run.data.metrics, sorted(run.data.tags), artifacts)


def test_a_run_reads_as_the_one_lightnings_logger_wrote(tmp_path: Path):
    """The same calls through the training code's Lightning logger (what predict used) and through `ClientRun`:
    the same experiment folder, run name, status, parameters (cut to 250 characters), metric names, tag keys and
    artifacts."""
    from eoscale.track.logger import MLflowLogger

    artifact = tmp_path / "odd_areas.csv"
    artifact.write_text("class,hectares\n")
    before = MLflowLogger(experiment_name="eoscale-predict", run_name="run-a", root_dir=str(tmp_path / "old"),
                          local_metrics=False)
    _log(before, artifact)
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    _log(ClientRun("eoscale-predict", uri, run_name="run-a"), artifact)
    old, new = _read(f"sqlite:///{tmp_path / 'old' / 'mlflow.db'}"), _read(uri)
    assert new == old
    assert new[3]["inputs"] == "x" * 250 and "area_ha/oddname" in new[4]  # Lightning's cuts, kept


def test_a_locked_store_is_retried_and_a_failed_one_stops_logging(tmp_path: Path, monkeypatch):
    from eoscale.track import client_run

    monkeypatch.setattr(client_run, "LOCKED_RETRIES", (0.01, 0.01, 0.01))
    run = ClientRun("eoscale-predict", f"sqlite:///{tmp_path / 'mlflow.db'}")
    real, calls = run._client.log_batch, []

    def locked_twice(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(run._client, "log_batch", locked_twice)
    with pytest.warns(RuntimeWarning, match="locked by another writer") as caught:
        run.log_metrics({"km2": 2.0})
    assert not run.failed and len(calls) == 3 and len(caught) == 1
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run.run_id).data.metrics == {"km2": 2.0}

    monkeypatch.setattr(run._client, "log_batch", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.warns(RuntimeWarning, match="failed .*disk full"):
        run.log_metrics({"km2": 3.0})
    assert run.failed
    run.finalize("success")  # nothing more is tried once the store failed
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run.run_id).info.status == "RUNNING"


def test_a_store_that_cannot_be_opened_is_one_warning_and_no_run(tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    with pytest.warns(RuntimeWarning, match="MLflow tracking at .* failed .*the run is not logged"):
        assert open_run(tmp_path / "maps", f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}") is None


def test_predicts_tracking_imports_no_lightning_and_reading_a_map_no_torch(tmp_path: Path):
    """Lightning costs a predict process about 2 CPU seconds of imports, torch a map-only command (assess, sample,
    change, mosaic) about 1.5: guarded in a fresh interpreter, as the commands start."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import eoscale.maps.classmap, eoscale.maps.mosaic\n"
        "assert 'torch' not in sys.modules, 'reading a map imported torch'\n"
        "from eoscale.infer.tracking import open_run\n"
        f"run = open_run(Path({str(tmp_path)!r}), None)\n"
        "run.log_hyperparams({'scenes': 1}); run.finalize('success')\n"
        "assert not run.failed\n"
        "assert 'lightning' not in sys.modules, 'predict tracking imported Lightning'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
