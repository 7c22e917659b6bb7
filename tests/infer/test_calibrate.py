"""`eoscale calibrate CKPT --store STORE`: the temperature goes into the checkpoint's band contract (and nothing else
changes), the ECE before and after is printed and logged to MLflow, and what exists is never replaced unasked."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from scipy.optimize import minimize_scalar

from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.infer.calibrate import EXPERIMENT, write_temperature
from eoscale.models.calibration import PixelSample, nll
from tests.checkpoints import make_checkpoint
from tests.stores import make_store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("store"), size=96)


def store_checkpoint(path: Path, store: Path) -> Path:
    """An untrained checkpoint whose band contract is the store's (its normalisation statistics)."""
    from eoscale.data.datamodule import TileDataModule

    make_checkpoint(path, backbone="test_resnet")
    saved = torch.load(path, weights_only=True)
    saved[CONTRACT_KEY] = BandContract.from_datamodule(TileDataModule(store, batch_size=4)).to_dict()
    torch.save(saved, path)
    return path


def prior_checkpoint(path: Path, store: Path, scale: float = 3.0) -> Path:
    """A checkpoint whose network says `scale` × the log of the class shares of the store's val pixels at every pixel
    (classifier weights 0, its bias those logits): the NLL-optimal temperature of such logits is finite (near `scale`),
    where an untrained network's is past the clamp (its fit gave 351758, kept at 20, whatever the fit did)."""
    from eoscale.store import schema
    from eoscale.store.open import open_store

    store_checkpoint(path, store)
    saved = torch.load(path, weights_only=True)
    ds = open_store(store)
    labels = ds[schema.LABELS].values[slice(*ds.attrs[schema.ATTR_SPLITS]["val"])]
    counts = np.bincount(labels[labels != schema.IGNORE_INDEX].ravel(), minlength=4) + 1
    saved["state_dict"]["model.decoder.classifier.weight"].zero_()
    saved["state_dict"]["model.decoder.classifier.bias"] = torch.tensor(scale * np.log(counts / counts.sum()),
                                                                        dtype=torch.float32)
    torch.save(saved, path)
    return path


def test_calibrate_writes_the_temperature_and_logs_the_ece(store, tmp_path, capsys, one_thread, monkeypatch):
    fitted_on = []  # the val pixels (logits, labels) the temperature was fitted on
    tensors = PixelSample.tensors

    def keep(sample: PixelSample):
        fitted_on.append(tensors(sample))
        return fitted_on[-1]

    monkeypatch.setattr(PixelSample, "tensors", keep)
    checkpoint = prior_checkpoint(tmp_path / "best.ckpt", store)
    before = checkpoint.read_bytes()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["calibrate", str(checkpoint), "--store", str(store), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "expected calibration error" in out and "calibrated.ckpt" in out
    assert checkpoint.read_bytes() == before  # the checkpoint given is left alone
    calibrated = tmp_path / "best.calibrated.ckpt"
    saved, original = torch.load(calibrated, weights_only=True), torch.load(checkpoint, weights_only=True)
    contract = BandContract.from_dict(saved[CONTRACT_KEY])
    assert contract.temperature != 1.0 and contract.calibration["by"] == "calibrate"
    assert contract.calibration["split"] == "val" and contract.calibration["pixels"] > 0
    # everything else as it was: weights, hyperparameters, the rest of the contract
    assert saved["state_dict"].keys() == original["state_dict"].keys()
    assert all(torch.equal(saved["state_dict"][k], v) for k, v in original["state_dict"].items())
    assert {k: v for k, v in saved[CONTRACT_KEY].items() if k not in ("temperature", "calibration")} == \
        original[CONTRACT_KEY]
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    metrics = run.data.metrics
    assert math.isclose(metrics["temperature"], contract.temperature, rel_tol=1e-6)
    # the fitted temperature minimises the NLL on the sample it was fitted on, found here by a bounded scalar search on
    # those pixels (the command's own nll_before/nll_after held for any temperature it wrote beside them, and with an
    # untrained network every fit was clamped to 20); a temperature fitted on other pixels, its inverse or a constant
    # fails this
    assert metrics["nll_after"] <= metrics["nll_before"] + 1e-9
    ((logits, labels),) = fitted_on
    assert contract.calibration["pixels"] == len(labels) > 0 and "clamped" not in contract.calibration
    best = minimize_scalar(lambda t: float(nll(logits, labels, temperature=t)), bounds=(0.05, 20), method="bounded",
                           options={"xatol": 1e-5}).x
    assert 1.5 < best < 6 and contract.temperature == pytest.approx(best, rel=1e-2)
    assert nll(logits, labels, temperature=contract.temperature) < nll(logits, labels)
    assert {"ece_before", "ece_after", "pixels"} <= metrics.keys()
    assert not list(tmp_path.glob(".*partial*"))


def test_existing_outputs_are_kept_unless_overwrite(store, tmp_path, capsys, one_thread):
    checkpoint = store_checkpoint(tmp_path / "best.ckpt", store)
    taken = tmp_path / "best.calibrated.ckpt"
    taken.write_text("not eoscale's")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["calibrate", str(checkpoint), "--store", str(store), "--tracking-uri", uri]) == 2
    assert capsys.readouterr().err.strip().endswith("exists: pass --overwrite to replace it, or --output another file")
    assert taken.read_text() == "not eoscale's"
    # --overwrite without --output rewrites the checkpoint itself, atomically
    assert main(["calibrate", str(checkpoint), "--store", str(store), "--overwrite", "--tracking-uri", uri]) == 0
    assert BandContract.from_dict(torch.load(checkpoint, weights_only=True)[CONTRACT_KEY]).temperature != 1.0


def test_bad_input_is_one_line(store, tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "missing.ckpt"), "--store", str(store)]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "sharded").mkdir()
    assert main(["calibrate", str(tmp_path / "sharded"), "--store", str(store)]) == 2
    assert "eoscale consolidate" in capsys.readouterr().err


def test_write_temperature_leaves_no_partial_file_when_saving_fails(tmp_path, monkeypatch):
    checkpoint = make_checkpoint(tmp_path / "best.ckpt", backbone="test_resnet")
    target = tmp_path / "out.ckpt"

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError):
        write_temperature(checkpoint, target, 1.5, {"by": "calibrate"})
    assert not target.exists() and os.listdir(tmp_path) == ["best.ckpt"]


def test_predict_store_reports_the_ece_of_the_probabilities_it_maps(store, tmp_path, one_thread):
    from dataclasses import replace

    from eoscale.infer.evaluate import evaluate
    from eoscale.infer.model import load_model

    model = load_model(store_checkpoint(tmp_path / "best.ckpt", store))
    plain = evaluate(model, store, split="val")
    sharp = evaluate(replace(model, contract=replace(model.contract, temperature=1e-4)), store, split="val")
    assert 0 <= plain["val_ece"] <= 1 and sharp["val_miou"] == plain["val_miou"]
    # a near-one-hot softmax of a network right about val_accuracy of the time: ECE ≈ 1 − accuracy
    assert sharp["val_ece"] == pytest.approx(1 - sharp["val_accuracy"], abs=0.05)


def test_a_clamped_temperature_is_said_and_recorded(store, tmp_path, capsys, monkeypatch, one_thread):
    """Guards issue 46 item 4: a temperature outside the range was clamped without a word. A range that no fit
    reaches makes the fitted temperature a clamped one."""
    monkeypatch.setattr("eoscale.models.calibration.TEMPERATURE_RANGE", (0.001, 0.002))
    checkpoint = store_checkpoint(tmp_path / "best.ckpt", store)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["calibrate", str(checkpoint), "--store", str(store), "--tracking-uri", uri]) == 0
    assert "warning: the fitted temperature" in capsys.readouterr().err
    saved = torch.load(tmp_path / "best.calibrated.ckpt", weights_only=True)[CONTRACT_KEY]
    assert saved["temperature"] == saved["calibration"]["clamped"]["kept"] == 0.002
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert run.data.params["temperature_clamped"].startswith("the fitted temperature")
