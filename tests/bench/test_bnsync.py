"""`eoscale bench bnsync`'s summary and refusal. (Its run, FSDP2 on 2 gloo ranks, takes a minute and more here: it
is not run in the suite; the behaviour it measures is held by the FSDP2 equality tests of tests/train.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from eoscale.cli import main


def test_summary_gives_each_variants_median_and_its_ratio_to_no_sync_paired_by_round():
    from eoscale.bench.bnsync import summarise

    raw = {"none": {"step_s": [1.0, 2.0, 4.0], "eval_output_gap": 0.1, "buffer_gap": 0.2},
           "lazy": {"step_s": [1.1, 1.0, 4.4], "eval_output_gap": 0.0, "buffer_gap": 0.0}}
    out = summarise(raw)
    assert out["none"]["median_step_s"] == 2.0 and out["none"]["x_none"] == 1.0
    # ratios 1.1, 0.5, 1.1: paired by round, not median ÷ median (1.1 / 2.0)
    assert out["lazy"]["median_step_s"] == 1.1 and out["lazy"]["x_none"] == pytest.approx(1.1)
    assert out["lazy"]["eval_output_gap"] == 0.0


def test_bench_bnsync_refuses_a_zero_count_in_one_line(tmp_path: Path, capsys):
    assert main(["bench", "bnsync", "--rounds", "0", "--record", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["eoscale bench: error: --rounds 0: give a positive number"] and not (tmp_path / "bnsync.json").exists()
