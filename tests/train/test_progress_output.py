"""A fit whose standard output is not a terminal (a Slurm log, a pipe) writes its progress as whole lines, not the
rich bar's table cut at 80 columns (`train_loss_ste…`, issue 32, fault 4)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eoscale.cli import main as eoscale_main
from eoscale.train.quiet import LineProgress, ProgressBar, progress_bar

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_rich_on_a_terminal_and_lines_elsewhere():
    assert isinstance(progress_bar(_Terminal()), ProgressBar)
    assert isinstance(progress_bar(io.StringIO()), LineProgress)


def test_a_fit_into_a_file_writes_whole_lines(store: Path, tmp_path: Path, capsys, monkeypatch, one_thread):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr("eoscale.train.quiet.LINE_EVERY", 2)
    code = eoscale_main(["fit", "--config", SMOKE, "--data.init_args.store", str(store),
                         "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "4",
                         "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "4",
                         "--trainer.val_check_interval", "2", "--trainer.logger", "false",
                         "--trainer.enable_progress_bar", "true"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "…" not in out and "\r" not in out, out[-3000:]  # no cell cut short, no line redrawn in place
    lines = out.splitlines()
    steps = [line for line in lines if line.startswith("epoch 0 (to step 4): step 2, batch 2/")]
    assert steps and all("train_loss_step=" in line for line in steps), lines
    assert [line for line in lines if line.startswith("epoch ") and " done: step " in line and "train_loss_epoch=" in line], lines
    assert [line for line in lines if line.startswith("validation after step 2: ") and "val_miou=" in line], lines
    assert [line for line in lines if line.startswith("validation after step 4: ")], lines


@pytest.mark.parametrize("every", [0, 3])
def test_line_progress_is_a_lightning_progress_bar(every):
    bar = LineProgress(every)
    assert bar.every == max(1, every) and bar.is_enabled
    bar.disable()
    assert not bar.is_enabled
