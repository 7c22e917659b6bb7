"""Early stopping in `eoscale fit` (issue 38): on by default on the best checkpoint's metric, `patience` counted in
validations, switched off by `--early_stopping.enabled false`, its state resumed; the pretraining tasks opt out."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from eoscale.train.callbacks.early_stopping import BestMetricStopping
from eoscale.train.launch.cli import EoscaleCLI
from eoscale.train.tasks.mae import MAETask
from eoscale.train.tasks.segmentation import BEST_VALIDATION_KEY, SegmentationTask

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")

pytestmark = pytest.mark.usefixtures("one_thread")


def _fit(store: Path, root: Path, steps: int, *extra: str) -> EoscaleCLI:
    # min_delta 1: no change of an mIoU counts as an improvement, so every validation after the first one waits
    return EoscaleCLI(args=["fit", "--config", SMOKE, "--data.init_args.store", str(store),
                            "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
                            "--model.init_args.backbone", "test_resnet", "--model.init_args.decoder_channels", "32",
                            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", "2",
                            "--trainer.default_root_dir", str(root), "--trainer.logger", "false",
                            "--checkpoint.dirpath", str(root / "checkpoints"), "--early_stopping.patience", "2",
                            "--early_stopping.min_delta", "1.0", *extra])


def test_a_stalled_fit_stops_and_a_resumed_one_remembers_its_wait(store: Path, tmp_path: Path, capsys):
    off = _fit(store, tmp_path / "off", 8, "--early_stopping.enabled", "false")
    assert off.trainer.global_step == 8  # trained to the end
    on = _fit(store, tmp_path / "on", 40)
    # validations at steps 2 (the best by more than 1), 4 and 6 (2 without improvement): stopped there, not at 40
    assert on.trainer.global_step == 6
    err = capsys.readouterr().err
    assert "early stopping at step 6: val_miou has not improved for 2 validations" in err
    last = torch.load(tmp_path / "on" / "checkpoints" / "last.ckpt", weights_only=True)
    (state,) = [v for k, v in last["callbacks"].items() if k.startswith("BestMetricStopping")]
    assert state["wait_count"] == 2 and "'val_miou'" in next(k for k in last["callbacks"] if "BestMetric" in k)
    # the best validation's confusion travels with the checkpoint: the one of the best checkpoint's step
    (best,) = (tmp_path / "on" / "checkpoints").glob("epoch*.ckpt")
    assert f"-step{last[BEST_VALIDATION_KEY]['step']:06d}-" in best.name
    # resumed with a larger budget: it waited 2 validations already, so the next one (step 8) stops it; a
    # callback that forgot its state would have stopped at step 12
    resumed = _fit(store, tmp_path / "on", 40, "--ckpt_path", str(tmp_path / "on" / "checkpoints" / "last.ckpt"))
    assert resumed.trainer.global_step == 8


def _trainer(monitor: str | None, mode: str = "max") -> SimpleNamespace:
    return SimpleNamespace(checkpoint_callback=SimpleNamespace(monitor=monitor, mode=mode))


def test_it_watches_the_checkpoint_metric_where_the_task_has_one():
    stopping = BestMetricStopping()
    stopping.setup(_trainer("val_rmse", "min"), SegmentationTask(num_classes=2, in_chans=2), "fit")
    assert stopping.active and (stopping.monitor, stopping.mode) == ("val_rmse", "min")
    assert stopping.best_score == torch.inf and stopping.min_delta <= 0  # lower is better
    pretrain = BestMetricStopping()
    pretrain.setup(_trainer("val_loss", "min"), MAETask.__new__(MAETask), "fit")  # a fixed schedule: never stopped
    assert not pretrain.active and MAETask.EARLY_STOPPING is False
    for stopping, trainer in ((BestMetricStopping(enabled=False), _trainer("val_miou")),
                              (BestMetricStopping(), _trainer(None))):  # switched off; no metric to watch
        stopping.setup(trainer, SegmentationTask(num_classes=2, in_chans=2), "fit")
        assert not stopping.active and stopping._should_skip_check(trainer)
