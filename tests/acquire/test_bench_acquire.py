"""`eoscale bench acquire` runs end to end on a tiny season and records its figures (no timing is asserted)."""

from __future__ import annotations

import json

from eoscale.cli import main


def test_bench_acquire_records_both_sides_and_the_memory(tmp_path):
    """guards: a benchmark that records without running odc-stac's side, or without the memory figures"""
    assert main(["bench", "acquire", "--size", "64", "--dates", "2", "--repeats", "2", "--jobs", "2",
                 "--memory-items", "3", "--memory-size", "64", "--record", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "acquire.json").read_text())
    assert len(record["seconds"]["eoscale"]) == len(record["seconds"]["odc"]) == 2
    assert record["ratio_eoscale_over_odc"] > 0 and record["setup"]["bands"] == ["blue", "green", "red", "nir"]
    memory = record["memory"]
    assert {"stage_20_items_peak_rss_mib", "stage_3_items_peak_rss_mib", "odc_load_3_items_peak_rss_mib"} <= set(memory)
    assert all(value > memory["baseline_python_eoscale_import_peak_rss_mib"] for key, value in memory.items()
               if key.endswith("items_peak_rss_mib"))
