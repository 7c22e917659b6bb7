"""A regression fit whose config names no checkpoint monitor keeps its best checkpoint by val_rmse (lowest), the
task's own `CHECKPOINT_MONITOR`; a config that names one keeps it; class tasks keep val_miou."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eoscale.cli import main
from eoscale.train.tasks.base import BaseTask
from eoscale.train.tasks.regression import RegressionTask
from eoscale.train.tasks.segmentation import SegmentationTask
from tests.train.test_regression import RUN, heights_store  # noqa: F401  (the fixture)


def test_tasks_declare_their_monitor():
    assert RegressionTask.CHECKPOINT_MONITOR[:2] == ("val_rmse", "min")
    assert SegmentationTask.CHECKPOINT_MONITOR == BaseTask.CHECKPOINT_MONITOR
    assert BaseTask.CHECKPOINT_MONITOR[:2] == ("val_miou", "max")


@pytest.mark.slow
def test_a_regression_config_without_a_monitor_keeps_the_lowest_rmse(heights_store, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, store = heights_store
    config = yaml.safe_load(Path("configs/regression_smoke.yaml").read_text())
    del config["checkpoint"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    root = tmp_path / "fit"
    assert main(["fit", "--config", str(tmp_path / "config.yaml"), "--data.init_args.store", str(store),
                 "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"), *RUN]) == 0
    best = [p.name for p in (root / "checkpoints").glob("*.ckpt") if not p.name.startswith("last")]
    assert len(best) == 1 and "-rmse" in best[0], best
