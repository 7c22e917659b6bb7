"""`eoscale bench active`: the loop runs through eoscale sample/label/assess on a tiny synthetic set and records
each strategy's held-out accuracy per labels added, the labels growing by the batch each round."""

from __future__ import annotations

import json

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_the_active_learning_loop_records_both_strategies(tmp_path):
    assert main(["bench", "active", "--size", "120", "--rounds", "2", "--seeds", "1", "--batch", "10", "--initial", "30",
                 "--assessment-n", "60", "--record", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "active.json").read_text())
    assert {r["strategy"] for r in record["runs"]} == {"random", "margin"}
    for run in record["runs"]:
        first, second = run["rounds"]
        assert 0 < first["oa"] <= 1 and 0 < first["miou"] <= 1
        assert first["labels"] <= 30 and 8 <= second["labels"] - first["labels"] <= 10  # a few fall on nodata
        if run["strategy"] == "margin":  # the mixed sample's stratified part assessed the pool map
            assert abs(first["pool_oa_estimate"] - first["pool_oa_census"]) < 0.3
    assert "vs_random" in record["summary"]["margin"]
