"""`TemperatureScaling` in `eoscale fit`: every checkpoint of a class model carries the temperature fitted on its own
validation, the ECE before and after is logged to the run, and `--calibration.enabled false` leaves none."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from eoscale.contract import BandContract
from eoscale.train.cli import main

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


@pytest.fixture(autouse=True)
def _small(monkeypatch, one_thread):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _fit(store: Path, root: Path, *extra: str) -> None:
    main(["fit", "--config", SMOKE, "--data.init_args.store", str(store), "--data.init_args.num_workers", "0",
          "--data.init_args.batch_size", "4", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
          "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
          "--trainer.max_steps", "6", "--trainer.val_check_interval", "3", *extra])


def test_fit_stores_the_temperature_and_logs_the_ece(store: Path, tmp_path: Path, capsys):
    _fit(store, tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    history = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
               for key in ("val_ece", "val_ece_calibrated", "val_temperature")}
    assert all(len(h) == 2 for h in history.values()), history  # at both validations
    for step, before in history["val_ece"].items():
        assert 0 <= history["val_ece_calibrated"][step] <= 1 and 0 <= before <= 1
    # the temperature changes the probabilities the ECE is measured on. Temperature scaling minimises the NLL, not
    # the ECE: after 6 steps of a model that never maps a class the ECE may rise (0.103 -> 0.127 on 2026-12-06's
    # install; the old bound "+0.02 at most" held on the installs before it). That calibration lowers the ECE of a
    # trained model is measured by `eoscale bench calibration` (benchmarks/calibration.json).
    last = max(history["val_ece"])
    assert history["val_ece_calibrated"][last] != history["val_ece"][last]
    for name in ("last.ckpt", Path(run.data.tags["best_checkpoint"]).name):
        path = next((tmp_path).rglob(name))
        checkpoint = torch.load(path, weights_only=True)
        contract = BandContract.from_dict(checkpoint["eoscale"])
        # the temperature logged at the validation the checkpoint was saved after
        assert any(math.isclose(contract.temperature, t, rel_tol=1e-5) for t in history["val_temperature"].values())
        assert checkpoint["eoscale"]["calibration"]["step"] in (3, 6)
        assert contract.temperature != 1.0 and contract.calibration["pixels"] > 0
        assert contract.calibration["by"] == "fit"
    out = capsys.readouterr().out
    assert "calibration: temperature" in out and "expected calibration error" in out


def test_calibration_can_be_turned_off(store: Path, tmp_path: Path):
    _fit(store, tmp_path, "--calibration.enabled", "false", "--trainer.logger", "false", "--trainer.max_steps", "3")
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)
    assert "temperature" not in checkpoint["eoscale"]
    assert BandContract.from_dict(checkpoint["eoscale"]).temperature == 1.0


@pytest.mark.slow
def test_a_clamped_temperature_is_said_once_and_recorded(store: Path, tmp_path: Path, monkeypatch):
    """Guards issue 46 item 4: a fitted temperature outside the range was clamped without a word. A range that no fit
    of this run reaches makes every validation's temperature a clamped one."""
    monkeypatch.setattr("eoscale.models.calibration.TEMPERATURE_RANGE", (0.001, 0.002))
    with pytest.warns(RuntimeWarning, match=r"step 2: the fitted temperature .* outside \[0.001, 0.002\]") as caught:
        _fit(store, tmp_path, "--trainer.max_steps", "4", "--trainer.val_check_interval", "2")
    assert len([w for w in caught if "fitted temperature" in str(w.message)]) == 1  # once a fit, not each validation
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)
    clamped = checkpoint["eoscale"]["calibration"]["clamped"]
    assert clamped["kept"] == checkpoint["eoscale"]["temperature"] == 0.002 and clamped["fitted"] > 0.002
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert run.data.tags["calibration/clamped"].startswith("step 4: the fitted temperature")
