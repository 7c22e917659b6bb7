from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
DEFAULT_CONF = Path(os.environ.get("EOSCALE_SLURM_DIR", "/tmp/eoscale-slurm")) / "slurm" / "slurm.conf"


def _answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and any(s in done.stdout for s in ("idle", "mixed", "allocated"))


@pytest.fixture(scope="session")
def local_slurm() -> str:
    """The local Slurm cluster (scripts/local-slurm.sh), started if `sinfo` does not answer; SLURM_CONF is set."""
    if "SLURM_CONF" not in os.environ and DEFAULT_CONF.exists():
        os.environ["SLURM_CONF"] = str(DEFAULT_CONF)
    if not _answers():
        if shutil.which("slurmctld") is None and os.geteuid() != 0:
            pytest.skip("no Slurm here and not root: run 'bash scripts/local-slurm.sh start' as root")
        done = subprocess.run(["bash", str(ROOT / "scripts" / "local-slurm.sh"), "start"], capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"local-slurm.sh start failed:\n{done.stderr}"
        line = done.stdout.strip().splitlines()[-1]
        assert line.startswith("export SLURM_CONF="), done.stdout
        os.environ["SLURM_CONF"] = line.removeprefix("export SLURM_CONF=")
        assert _answers(), "the local Slurm cluster started but sinfo does not answer"
    return os.environ["SLURM_CONF"]
