"""`run_checkpoint`: a run's folder gives its best checkpoint by the fit's metric, else `last.ckpt`; a file or a
sharded checkpoint's folder is taken as given; a folder without checkpoints is refused (issue 38)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eoscale.errors import InputError, InputNotFoundError
from eoscale.models.checkpoint import run_checkpoint


def _touch(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(reversed(names)):  # the first name the newest
        (folder / name).write_bytes(b"")
        os.utime(folder / name, (1e9 - age, 1e9 - age))


def test_the_best_by_its_metric(tmp_path: Path):
    run = tmp_path / "root" / "1" / "abc"
    _touch(run / "checkpoints", "last.ckpt", "epoch001-step000200-miou0.4100.ckpt",
           "epoch000-step000100-miou0.4400-v1.ckpt", "epoch002-step000300-miou0.1000.ckpt")
    for given in (run, run / "checkpoints", tmp_path / "root"):  # the run, its checkpoints, a root of one run
        path, chosen = run_checkpoint(given)
        assert path.name == "epoch000-step000100-miou0.4400-v1.ckpt" and "val_miou (0.44)" in chosen
    regression = tmp_path / "regression"
    _touch(regression, "epoch001-step000200-rmse4.1000.ckpt", "epoch000-step000100-rmse3.9000.ckpt", "last.ckpt")
    assert run_checkpoint(regression)[0].name == "epoch000-step000100-rmse3.9000.ckpt"  # the lowest RMSE


def test_last_when_no_best_and_files_as_given(tmp_path: Path):
    _touch(tmp_path / "run" / "checkpoints", "last.ckpt")
    path, chosen = run_checkpoint(tmp_path / "run")
    assert path == tmp_path / "run" / "checkpoints" / "last.ckpt" and chosen.startswith("last.ckpt")
    assert run_checkpoint(path) == (path, None)
    sharded = tmp_path / "fsdp" / "epoch000-step000010-miou0.5000.ckpt"
    sharded.mkdir(parents=True)  # an FSDP checkpoint is a folder: as given (predict says to consolidate it)
    assert run_checkpoint(sharded) == (sharded, None)


def test_folders_without_one_checkpoint_to_take(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFoundError, match="no checkpoint in"):
        run_checkpoint(tmp_path / "empty")
    _touch(tmp_path / "root" / "1" / "a" / "checkpoints", "last.ckpt")
    _touch(tmp_path / "root" / "1" / "b" / "checkpoints", "last.ckpt")
    with pytest.raises(InputError, match="holds 2 runs"):
        run_checkpoint(tmp_path / "root")
