"""The random forest as a first-class model (issue 38): `eoscale fit --config configs/forest.yaml` fits it on a
store, its checkpoint maps a scene with `eoscale predict` (COGs) and `eoscale assess` scores the map; and the
segmentation task's imbalance options (tempered class weights, the missed-class warning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eoscale.cli import main
from eoscale.contract import load_checkpoint

FOREST = str(Path(__file__).resolve().parents[2] / "configs" / "forest.yaml")


@pytest.fixture(autouse=True)
def _tracking(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def _fit_forest(store: Path, root: Path, *extra: str) -> Path:
    assert main(["fit", "--config", FOREST, "--data.init_args.store", str(store), "--data.init_args.num_workers", "0",
                 "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
                 "--model.init_args.trees", "12", "--model.init_args.n_jobs", "1", *extra]) == 0
    (checkpoint,) = root.rglob("last.ckpt")
    return checkpoint


def test_forest_fit_predict_assess(store: Path, tmp_path: Path):
    from rio_cogeo.cogeo import cog_validate

    checkpoint = _fit_forest(store, tmp_path / "fit", "--model.init_args.pixels_per_class", "3000")
    saved = load_checkpoint(checkpoint)  # plain data: weights_only
    assert saved["eoscale_model"]["args"]["backbone"] == "random_forest"
    assert saved["eoscale_model"]["args"]["trees"] == 12
    assert max(saved["eoscale_forest"]["pixels_per_class"]) <= 3000  # the cap per class held
    assert saved["eoscale"]["bands"]  # the band contract
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(store.parent / "scene1.tif"), "--output",
                 str(out), "--confidence", "--no-progress"]) == 0
    for name in ("scene1_landcover.tif", "scene1_confidence.tif"):
        assert cog_validate(str(out / name), quiet=True)[0]
    assert main(["assess", str(out / "scene1_landcover.tif"), "--reference", str(store.parent / "labels1.tif"),
                 "--no-tracking"]) == 0
    (report,) = (out / "scene1_landcover_assessment").glob("*.json")
    figures = json.loads(report.read_text())
    assert figures["overall_accuracy"]["estimate"] > 0.9  # the test scenes' classes are plain in their pixels
    assert {c["name"] for c in figures["classes"]} >= {"Tree cover", "Cropland"}


def test_prior_sample_keeps_the_capped_sample_unweighted(store: Path, tmp_path: Path):
    checkpoint = _fit_forest(store, tmp_path / "fit", "--model.init_args.prior", "sample",
                             "--model.init_args.pixels_per_class", "500")
    report = load_checkpoint(checkpoint)["eoscale_forest"]
    assert all(n <= 500 for n in report["pixels_per_class"])
    assert sum(report["pixels_seen_per_class"]) > sum(report["pixels_per_class"])


def test_a_forest_refuses_bad_options(store: Path, tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exit_info:  # the parser refuses it, in one line
        main(["fit", "--config", FOREST, "--data.init_args.store", str(store), "--model.init_args.prior", "flat",
              "--trainer.default_root_dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "prior" in err[0]


def test_sqrt_class_weights_are_tempered_and_capped():
    from eoscale.train.tasks.segmentation import SQRT_WEIGHT_CAP, class_weights

    inverse = torch.tensor([1.0, 4.0, 0.0, 10_000.0])
    assert torch.equal(class_weights(inverse, True), inverse)
    tempered = class_weights(inverse, "sqrt")
    assert torch.allclose(tempered, torch.tensor([1.0, 2.0, 0.0, SQRT_WEIGHT_CAP]))


def test_a_class_never_found_is_named_in_a_warning(capsys):
    from types import SimpleNamespace

    from eoscale.train.tasks.segmentation import SegmentationTask

    task = SegmentationTask(num_classes=3, in_chans=2)
    task.class_names = ["Forest", "Open water", "Barren"]
    # water: 0.5 % of the pixels, never predicted right; barren: 0.05 %, under the threshold
    task.last_confusion = {"val": torch.tensor([[9945, 0, 0], [50, 0, 0], [0, 0, 5]])}
    task._trainer = SimpleNamespace(is_global_zero=True)
    task.warn_missed_classes("val")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'Open water'" in err[0] and "producer's accuracy 0" in err[0]


def test_the_best_validation_is_warned_about_too(capsys):
    from types import SimpleNamespace

    from eoscale.train.tasks.segmentation import BEST_VALIDATION_KEY, SegmentationTask

    task = SegmentationTask(num_classes=3, in_chans=2)
    task.class_names = ["Forest", "Open water", "Barren"]
    trainer = SimpleNamespace(is_global_zero=True, state=SimpleNamespace(fn="fit"), sanity_checking=False,
                              checkpoint_callback=SimpleNamespace(monitor="val_miou", mode="max"), global_step=0)
    task._trainer = trainer
    missed = torch.tensor([[990, 0, 0], [10, 0, 0], [0, 0, 0]])  # water (1 %) never mapped
    found = torch.tensor([[990, 0, 0], [5, 5, 0], [0, 0, 0]])
    # the best val mIoU at step 100 (the checkpoint predict takes) missed water; the last validation found it
    for step, confusion, miou in ((100, missed, 0.6), (200, found, 0.4), (300, found, 0.6)):  # a tie is not better
        trainer.global_step = step
        task.last_confusion = {"val": confusion}
        task._keep_best_validation({"val_miou": torch.tensor(miou)})
    assert task.best_validation["step"] == 100
    task.on_fit_end()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'Open water'" in err[0] and "at the best validation (step 100" in err[0], err
    resumed = SegmentationTask(num_classes=3, in_chans=2)
    resumed.on_load_checkpoint({BEST_VALIDATION_KEY: task.best_validation})  # a resumed fit knows it
    assert resumed.best_validation == task.best_validation
    # the last validation also the best: one warning, saying so
    task.last_confusion, task.best_validation = {"val": missed}, dict(task.best_validation, step=300)
    task.on_fit_end()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at the last validation, also the best" in err[0], err
