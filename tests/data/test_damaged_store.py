"""A missing or damaged shard of a complete store is an error that names it (issue 13, fault 6)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eoscale.cli import main
from eoscale.data.datamodule import TileDataModule
from eoscale.errors import StoreError


@pytest.fixture
def copy(store, tmp_path):
    target = tmp_path / "tiles.zarr"
    shutil.copytree(Path(store), target)
    return target


def _shard(store):
    files = sorted(p for p in (store / "labels" / "c").rglob("*") if p.is_file())
    assert files
    return files[-1]


def test_a_missing_shard_stops_the_loader_and_info(copy, capsys):
    _shard(copy).unlink()
    with pytest.raises(StoreError, match="shard labels/c/.* is missing.*ingest the scenes again"):
        TileDataModule(str(copy), batch_size=4).setup("fit")
    assert main(["info", str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is missing" in err[0], err


def test_a_truncated_shard_is_found_by_check(copy, capsys):
    shard = _shard(copy)
    shard.write_bytes(shard.read_bytes()[:10])
    assert main(["info", str(copy), "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not read" in err[0] and "labels/c/" in err[0], err


def test_check_passes_on_a_sound_store(store, capsys):
    assert main(["info", str(store), "--check"]) == 0
    assert "read whole and verified" in capsys.readouterr().out
