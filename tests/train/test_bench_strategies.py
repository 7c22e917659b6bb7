"""`eoscale bench strategies` as a user runs it, at its tiniest (a 1-block ViT-S, 5 steps, one turn, DDP and ZeRO-3
only: each fit in the torchrun costs ~6 s here): the figures it records are the measured ones, the ratios are theirs,
and the planner's prediction stands beside each (no value of the machine's is judged: the recorded run in
benchmarks/strategies.json is the measurement). FSDP2 and ZeRO-2 against the planner: tests/train/test_zero.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_bench_strategies_records_state_step_time_and_plan(store: Path, tmp_path: Path, capsys):
    code = main(["bench", "strategies", str(store), "--steps", "5", "--warmup", "2", "--repeats", "1", "--batch", "2",
                 "--depth", "1", "--strategies", "zero3", "--record", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    (run,) = json.loads((tmp_path / "strategies.json").read_text())
    rows = run["strategies"]
    assert list(rows) == ["ddp", "zero3"] and run["world_size"] == 2 and run["tile"] == 32
    ddp = rows["ddp"]["state_bytes_per_rank"]
    assert ddp == pytest.approx(16 * run["params"], rel=0.01)  # fp32 weights, gradients, two AdamW moments
    for name, row in rows.items():
        assert row["state_vs_ddp"] == pytest.approx(row["state_bytes_per_rank"] / ddp, abs=1e-4)
        assert row["step_vs_ddp"] == pytest.approx(row["step_s"] / rows["ddp"]["step_s"], abs=2e-3)
        assert row["planner_error"] == pytest.approx(row["planned_state_bytes"] / row["state_bytes_per_rank"] - 1,
                                                     abs=1e-3)
        assert len(row["step_s_each_repeat"]) == 1 and row["step_s"] > 0
        assert f"\n{name} " in out
    # ZeRO-3 shards all of it, and in fp32 its parameter shard is its own master copy (eoscale.train.strategies.zero; DeepSpeed
    # alone keeps a second one: 10/16 of DDP's): 1/W
    assert rows["zero3"]["state_vs_ddp"] == pytest.approx(0.5, abs=0.01)
    assert rows["zero3"]["state_goal_met"]
    assert run["planner_within_10_percent"]
    assert f"recorded in {tmp_path / 'strategies.json'}" in out


def test_bench_strategies_refuses_bad_options_in_one_line(store: Path, tmp_path: Path, capsys):
    assert main(["bench", "strategies", str(tmp_path / "none.zarr"), "--record", ""]) == 2
    assert main(["bench", "strategies", str(store), "--steps", "3", "--record", ""]) == 2
    assert main(["bench", "strategies", str(store), "--strategies", "zero3,tp", "--record", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"eoscale bench: error: no tile store at {str(tmp_path / 'none.zarr')!r}: run 'eoscale ingest' first",
                   "eoscale bench: error: --steps 3 leaves fewer than 2 timed steps after --warmup 3 and the state "
                   "measurement at step 2 (or --repeats/--batch below 1): give more steps",
                   "eoscale bench: error: --strategies 'zero3,tp': 'tp' is not one of ddp, fsdp, zero2, zero3"]
    assert not list(tmp_path.iterdir())
