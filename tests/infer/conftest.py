"""Checkpoints and scenes for the prediction tests, as fixtures over `tests.checkpoints` and `tests.rasters`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoints import make_checkpoint
from tests.rasters import write_scene


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "best.ckpt")


@pytest.fixture(scope="session")
def scene(tmp_path_factory) -> Path:
    """An odd-sized scene (301 × 347) with a nodata box."""
    path = tmp_path_factory.mktemp("scene") / "odd.tif"
    write_scene(path, height=301, width=347, seed=3, nodata_box=(slice(40, 90), slice(0, 70)))
    return path


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory) -> str:
    """One SQLite MLflow store for the session (creating one takes about 10 s)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
