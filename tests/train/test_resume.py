"""Checkpoints: resuming equals not stopping, and the band contract guards resuming and fine-tuning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eoscale.cli import main as eoscale_main
from eoscale.train.launch.cli import EoscaleCLI
from tests.train.helpers import Crash

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
# Resumed and uninterrupted runs do the same float operations in the same order on one CPU process;
# the tolerance only allows for a different thread split of the same reductions.
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")


def _fit(store: Path, root: Path, steps: int, *extra: str) -> EoscaleCLI:
    return EoscaleCLI(args=["fit", "--config", SMOKE, "--data.init_args.store", str(store),
                            "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
                            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", "5",
                            "--trainer.default_root_dir", str(root), "--trainer.logger", "false",
                            "--checkpoint.dirpath", str(root / "checkpoints"), *extra])


def _params(cli: EoscaleCLI) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in cli.model.named_parameters()}


@pytest.mark.slow
def test_resume_equals_uninterrupted(store: Path, tmp_path: Path):
    # 38 training tiles in batches of 4: 10 steps an epoch. The run crashes in its second epoch, after the
    # checkpoint of step 15 (validation every 5 steps), in the middle of that epoch, and resumes from it with the
    # same command: it trains the 5 batches that epoch had left, not its first 5 again.
    whole = _fit(store, tmp_path / "whole", 20)
    with pytest.raises(Crash):
        _fit(store, tmp_path / "parts", 20, "--trainer.callbacks+=tests.train.helpers.CrashAt",
             "--trainer.callbacks.step=17")
    # last.ckpt is the newest state, also where val_miou did not improve (Lightning's own stays at the best step)
    last = tmp_path / "parts" / "checkpoints" / "last.ckpt"
    (best,) = (tmp_path / "parts" / "checkpoints").glob("epoch*.ckpt")
    assert "-step000010-" in best.name  # val_miou was best at step 10, not at 15
    assert torch.load(last, weights_only=True)["global_step"] == 15
    resumed = _fit(store, tmp_path / "parts", 20, "--ckpt_path", str(last))
    assert resumed.trainer.global_step == whole.trainer.global_step == 20
    assert resumed.trainer.current_epoch == whole.trainer.current_epoch
    a, b = _params(whole), _params(resumed)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=ATOL, msg=name)
    for key in ("val_miou", "val_loss", "val_accuracy"):
        assert abs(float(whole.trainer.callback_metrics[key]) - float(resumed.trainer.callback_metrics[key])) < ATOL


def test_resume_refuses_another_band_contract(store: Path, other_store: Path, tmp_path: Path, capsys):
    _fit(store, tmp_path, 2, "--trainer.limit_val_batches", "0", "--checkpoint.monitor", "null")
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["eoscale"]["bands"][:2] == ["B02", "B03"]
    common = ["--config", SMOKE, "--data.init_args.store", str(other_store), "--trainer.max_steps", "4",
              "--trainer.default_root_dir", str(tmp_path / "again"), "--trainer.logger", "false"]
    for extra in (["--ckpt_path", str(last)], ["--model.init_args.finetune_from", str(last)]):
        code = eoscale_main(["fit", *common, *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, err
        assert err[-1].startswith("eoscale fit: error: ") and "trained on bands ['B02'" in err[-1], err[-1]
