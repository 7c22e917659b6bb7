"""A successful fit prints eoscale's progress, not third-party noise (issue 13, fault 8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
NOISE = ("litlogger", "LeafSpec", "`IterableDataset` has `__len__`", "Total FLOPs", "/-2", "Traceback",
         "srun` command is available", "Creating initial MLflow database tables", "not found. Creating it.")


@pytest.mark.slow
def test_a_fit_prints_no_known_noise(store, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "eoscale", "fit", "--config", SMOKE, "--data.init_args.store", str(store),
         "--data.init_args.batch_size", "4", "--trainer.max_steps", "3", "--trainer.enable_progress_bar", "true",
         "--trainer.default_root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "Trainable params" in text and "to step 3" in text  # the summary and progress are still there
    found = [n for n in NOISE if n in text]
    assert not found, f"noise {found} in:\n{text[-3000:]}"
