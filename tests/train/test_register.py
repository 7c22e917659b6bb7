"""`RegisterModel`: `eoscale fit` registers its best checkpoint in the MLflow Model Registry, and `models:/` finds it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from eoscale.track.registry import resolve_checkpoint
from eoscale.train.launch.main import main
from tests.train.test_fit import SMOKE, _common


@pytest.mark.slow
def test_fit_registers_its_best_checkpoint(store: Path, tmp_path: Path, monkeypatch, one_thread):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    register = tmp_path / "register.yaml"
    register.write_text("trainer:\n  callbacks:\n    - class_path: eoscale.train.callbacks.register.RegisterModel\n"
                        "      init_args: {name: smoke, alias: champion}\n")
    main(["fit", "--config", SMOKE, "--config", str(register), *_common(store, tmp_path), "--trainer.max_steps", "2",
          "--trainer.val_check_interval", "2"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    version = client.get_model_version_by_alias("smoke", "champion")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert version.run_id == run.info.run_id and str(version.version) == "1"
    registered = resolve_checkpoint("models:/smoke@champion", tracking_uri=uri)
    best = Path(run.data.tags["best_checkpoint"])
    assert registered.read_bytes() == best.read_bytes()
    assert torch.load(registered, weights_only=True)["eoscale"]["tile_size"] == 32
