"""`eoscale bench ingest` runs end to end on a tiny synthetic set and records its figures (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from eoscale.cli import main
from eoscale.synth import synthesize


@pytest.mark.slow
def test_bench_ingest_records_ratios(tmp_path, capsys):
    synthesize(tmp_path / "data", scenes=2, size=256)
    code = main(["bench", "ingest", "--data", str(tmp_path / "data"), "--workers", "1", "--repeats", "1",
                 "--record", str(tmp_path / "bench")])
    assert code == 0
    runs = json.loads((tmp_path / "bench" / "ingest.json").read_text())
    figures = runs[-1]
    assert figures["machine"]["cores_available"] >= 1
    assert figures["data"]["tiles"] > 0
    assert figures["ratio_whole_command"] > 0 and figures["ratio_shard_phase"] >= figures["ratio_whole_command"]
    assert "× the baseline" in capsys.readouterr().out
