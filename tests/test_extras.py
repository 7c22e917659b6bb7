"""Without the optional extras (DeepSpeed, Ray, PyTriton), ingest, fit and predict run, and a command that needs
one says which to install (issue 31: `pip install .` without extras).

The extras are installed here (scripts/setup.sh installs them all), so each command runs in a subprocess whose
imports of `deepspeed`, `ray` and `pytriton` fail as they would where they are not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stores import make_store

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("deepspeed", "ray", "pytriton", "tritonserver")
# run `eoscale ARGS…` with the extras' packages made impossible to import
RUNNER = f"""
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _NotInstalled())
from eoscale.cli import main
sys.exit(main(sys.argv[1:]))
"""


def eoscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("extras"), size=96)


@pytest.mark.slow
def test_fit_predict_without_extras_and_serve_names_its_extra(store, tmp_path):
    """(A ZeRO config and the Ray launcher without their extras: tests/train/test_extras.py.)"""
    fit = eoscale("fit", "--config", str(ROOT / "configs/smoke.yaml"), "--data.init_args.store", str(store),
                  "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--data.init_args.batch_size", "4",
                  "--trainer.default_root_dir", str(tmp_path / "fit"), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    checkpoint = next((tmp_path / "fit").rglob("last.ckpt"))
    predict = eoscale("predict", "--checkpoint", str(checkpoint), "--input", str(store.parent / "scene0.tif"),
                      "--output", str(tmp_path / "maps"), cwd=tmp_path)
    assert predict.returncode == 0, predict.stderr[-3000:]
    assert (tmp_path / "maps" / "scene0_landcover.tif").is_file()

    serve = eoscale("serve", "--checkpoint", str(checkpoint), cwd=tmp_path)
    assert serve.returncode == 2 and "eoscale[serve]" in serve.stderr and "Traceback" not in serve.stderr, \
        serve.stderr[-3000:]


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_ingest_without_extras(tmp_path):
    make_store(tmp_path / "s", size=64)  # writes the scenes; the command below ingests them again
    out = eoscale("ingest", "--scenes", str(tmp_path / "s/scene0.tif"), "--labels", str(tmp_path / "s/labels0.tif"),
                  "--classes", str(tmp_path / "s/classes.csv"), "--output", str(tmp_path / "again.zarr"),
                  "--tile-size", "32", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "again.zarr").is_dir()
