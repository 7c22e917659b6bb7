"""scripts/local-slurm.sh trusts its state folder (pid files it kills by, the root daemons' configuration) only
if it is private: issue 13, fault 14. `status` checks the folder before it reads anything in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "local-slurm.sh"


def _status(state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "EOSCALE_SLURM_DIR": str(state)}
    return subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, env=env, timeout=60)


def test_a_folder_others_can_write_is_refused(tmp_path):
    state = tmp_path / "state"
    (state / "slurm").mkdir(parents=True)
    (state / "slurm" / "slurmd.pid").write_text("1\n")  # planted: status must not even look at it
    state.chmod(0o777)
    done = _status(state)
    assert done.returncode == 1 and "writable by others" in done.stderr and "slurmd" not in done.stdout, done


def test_a_symbolic_link_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "state").symlink_to(tmp_path / "elsewhere")
    done = _status(tmp_path / "state")
    assert done.returncode == 1 and "symbolic link" in done.stderr, done


def test_a_new_folder_is_created_private(tmp_path):
    state = tmp_path / "new"
    done = _status(state)  # the daemons are not running there: status says so, after making the folder
    assert "error" not in done.stderr and "munged: stopped" in done.stdout, done
    assert state.is_dir() and (state.stat().st_mode & 0o777) == 0o711
