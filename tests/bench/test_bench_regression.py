"""`eoscale bench regression`: a tiny real run (synth --heights, ingest --targets, a few seconds of each model)
records every repeat, the medians and the RMSE ratio; bad options are one line."""

from __future__ import annotations

import json

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_bench_regression_records_both_models(tmp_path, capsys):
    assert main(["bench", "regression", "--scenes", "2", "--size", "128", "--tile-size", "32", "--seconds", "4",
                 "--repeats", "2", "--pixels", "3000", "--max-trees", "20", "--record", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "regression.json").read_text())[-1]
    assert record["benchmark"] == "regression" and len(record["runs"]) == 2
    assert [r["order"][0] for r in record["runs"]] == ["network", "forest"]  # alternating
    for run in record["runs"]:
        for model in ("network", "forest"):
            assert run[model]["pixels"] == record["data"]["val_pixels"] > 0
            assert run[model]["rmse"] >= run[model]["mae"] >= abs(run[model]["bias"])
    assert record["rmse_ratio_network_to_forest"] == pytest.approx(
        record["median"]["network"]["rmse"] / record["median"]["forest"]["rmse"])
    assert "median RMSE" in capsys.readouterr().out


def test_bench_regression_refuses_bad_options(capsys):
    assert main(["bench", "regression", "--seconds", "0", "--record", ""]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
