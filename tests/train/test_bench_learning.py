"""`eoscale bench learning` runs end to end on a tiny store: the per-pixel baseline, the calibration fit, and a
fit whose step count comes from it, stopped by its 6 s budget (`max_time`) and validated there (no figure
asserted: a few steps learn nothing). The smallest sizes it takes: its figures are not what is tested."""

from __future__ import annotations

import json

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_bench_learning_records_both_models(store, tmp_path, capsys):
    code = main(["bench", "learning", str(store), "--minutes", "0.1", "--batch-size", "4",
                 "--workers", "0", "--forest-args", "--model.init_args.trees 5", "--calibration-steps", "8", "--validate-every", "10", "--record", str(tmp_path)])
    assert code == 0
    figures = json.loads((tmp_path / "learning.json").read_text())[-1]
    assert 0.0 <= figures["forest"]["val_miou"] <= 1.0
    assert set(figures["forest"]["val_classes"]) == set(figures["network"]["val_classes"])
    assert figures["miou_gain_over_forest"] == figures["network"]["val_miou"] - figures["forest"]["val_miou"]
    network = figures["network"]
    assert network["seconds_per_step_calibrated"] > 0 and network["calibration_steps"] == 8
    assert network["validate_every"] == 10
    assert network["max_steps"] >= 10 and network["max_steps"] % 10 == 0  # validated at its last step
    assert network["val_miou_history"], "the fit validated at least once"
    assert "recorded in" in capsys.readouterr().out


def test_bench_learning_refuses_a_calibration_without_timed_steps(store, capsys):
    assert main(["bench", "learning", str(store), "--calibration-steps", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibration-steps > 5" in err[0]
