"""`eoscale fit --help` and `eoscale pretrain --help` list the launcher's options, one line of help each (issue 32, 3)."""

from __future__ import annotations

import pytest

from eoscale.cli import main as eoscale_main
from eoscale.train.launch.options import FLAGS, HELP


@pytest.mark.parametrize("command", ["fit", "pretrain"])
def test_help_lists_the_launcher_options(command: str, capsys):
    with pytest.raises(SystemExit) as exit_info:
        eoscale_main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--trainer.max_steps" in out  # still LightningCLI's own help
    for flag in ("--launcher", "--workers", "--address", "--max-failures", "--cpus-per-worker", "--gpus-per-worker"):
        (line,) = [ln for ln in out.splitlines() if ln.strip().startswith(f"{flag} ")]
        assert len(line.split(maxsplit=2)) == 3, line  # flag, value, and a line of help


def test_every_launcher_flag_has_help():
    assert set(HELP) == set(FLAGS)
