"""`eoscale bench launchers` refuses what it cannot run in one line, before any fit starts (a whole run takes
minutes: `eoscale bench launchers STORE` records benchmarks/launchers.json)."""

from __future__ import annotations

from eoscale.cli import main


def test_a_missing_store_is_one_line(tmp_path, capsys):
    assert main(["bench", "launchers", str(tmp_path / "none.zarr"), "--record", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.zarr" in err[0], err


def test_too_few_steps_is_one_line(tmp_path, capsys):
    from tests.stores import make_store

    store = make_store(tmp_path, size=64, count=1)
    assert main(["bench", "launchers", str(store), "--steps", "4", "--record", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--steps=4: give at least --warmup + 3 (8)" in err[0], err
