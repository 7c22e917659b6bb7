"""Without DeepSpeed or Ray installed, `eoscale fit` still runs, and a ZeRO config or `--launcher ray` says which
extra to install, in one line with exit code 2 (issue 31: optional extras).

Each case runs in a subprocess whose `sys.meta_path` starts with a finder that refuses the package, as a Python
without it would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"

BLOCKER = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Missing())
from eoscale.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(blocked: set[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=blocked), *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


def _one_line(done: subprocess.CompletedProcess, extra: str) -> None:
    """Exit code 2 and one error line naming `extra`, no traceback (Lightning's "Seed set to 0" may come first)."""
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("eoscale fit: error:")]
    assert len(errors) == 1 and extra in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def _smoke(store: Path, root: Path) -> list[str]:
    return ["--config", str(CONFIGS / "smoke.yaml"), "--data.init_args.store", str(store),
            "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "4", "--trainer.default_root_dir",
            str(root), "--trainer.max_steps", "2", "--trainer.val_check_interval", "2"]


@pytest.mark.parametrize("zero", ["zero2.yaml", "zero3_offload.yaml"])
def test_a_zero_config_without_deepspeed_names_the_extra(zero: str, store: Path, tmp_path: Path):
    done = _run({"deepspeed"}, ["fit", *_smoke(store, tmp_path), "--config", str(CONFIGS / "strategy" / zero)],
                tmp_path)
    _one_line(done, "eoscale[deepspeed]")


# a fit, predict and ingest with no extra at all: tests/test_extras.py


def test_the_ray_launcher_without_ray_names_the_extra(store: Path, tmp_path: Path):
    done = _run({"ray"}, ["fit", "--launcher", "ray", "--workers", "2", *_smoke(store, tmp_path)], tmp_path)
    _one_line(done, "eoscale[ray]")
