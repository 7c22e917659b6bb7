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


def _truncate(shard: Path) -> None:
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])


def test_a_truncated_shard_stops_the_loader_with_its_name(copy):
    _truncate(_shard(copy))
    dm = TileDataModule(str(copy), batch_size=4, num_workers=0)
    dm.setup("fit")
    with pytest.raises(StoreError, match=r"shard labels/c/\S+ does not read \(.*\); ingest the scenes again"):
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            for _ in loader:
                pass


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_a_truncated_shard_stops_a_fit_in_one_line(copy, tmp_path, capsys):
    _truncate(_shard(copy))
    code = main(["fit", "--config", "configs/smoke.yaml", "--data.init_args.store", str(copy),
                 "--data.init_args.num_workers", "1", "--trainer.default_root_dir", str(tmp_path / "run"),
                 "--trainer.logger", "false", "--trainer.max_steps", "200", "--trainer.limit_val_batches", "2"])
    printed = capsys.readouterr().err
    assert "Traceback" not in printed, printed[-3000:]
    err = [ln for ln in printed.strip().splitlines() if ln.startswith("eoscale")]
    assert code == 2 and len(err) == 1 and "does not read" in err[0] and "labels/c/" in err[0], err
