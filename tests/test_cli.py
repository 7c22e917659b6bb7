"""The command table: every command answers --help, and `python -m eoscale` is the same CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eoscale.cli import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert len(capsys.readouterr().out.strip().splitlines()) > 3


def test_python_m_eoscale_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "eoscale", "--help"], capture_output=True, text=True, check=True).stdout
    for command in COMMANDS:
        assert command in out


def test_unknown_command_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ingestt"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_command_description_shows_a_percent_sign_once(capsys):
    """argparse %-formats help strings ("95 %%") but not descriptions: `eoscale assess --help` said "95 %%"."""
    with pytest.raises(SystemExit):
        main(["assess", "--help"])
    out = capsys.readouterr().out
    assert "95 %" in out and "%%" not in out
