"""`eoscale bench predict` runs on a small scene and records its figures."""

from __future__ import annotations

import argparse
import json

import pytest

from eoscale.bench import predict as bench


@pytest.mark.slow
def test_bench_predict_records_its_figures(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    parser.add_argument("--record")  # added by the bench dispatcher
    args = parser.parse_args(["--size", "128", "--backbone", "test_resnet", "--tile", "32", "--batch-size", "8",
                              "--repeats", "1", "--record", str(tmp_path)])
    assert bench.run(args) == 0
    assert "whole command" in capsys.readouterr().out
    (run,) = json.loads((tmp_path / "predict.json").read_text())
    assert run["benchmark"] == "predict" and run["model"] == {"backbone": "test_resnet", "tile": 32}
    assert run["ratio_whole_command"] > 0 and run["ratio_window_loop"] > 0
    assert set(run["overlap"]) == {"0.0", "0.25", "0.5"}
    windows = [run["overlap"][o]["windows"] for o in ("0.0", "0.25", "0.5")]
    assert windows == sorted(windows) and windows[0] == 16  # 128 px in 32-px windows without overlap: 4 × 4
    assert run["command"]["windows"] == run["baseline"]["windows"] == windows[1]
    # the feed (an instant model) with one reading thread and with the device's default (at least 2)
    assert run["readers"] == 1 and set(run["feed"]) == {"1", "2"}
    assert all(f["windows_per_s"] > 0 and f["vs_model"] > 0 for f in run["feed"].values())
    # the command's own peak memory, in a process of its own, and its map a valid COG
    memory = run["command_memory"]
    assert memory["cog_valid"] is True and memory["cog_errors"] == []
    assert 0 < memory["peak_rss_bytes"] < 8 * 2**30 and memory["bytes_per_scene_pixel"] > 0


def test_bench_predict_overlaps_must_hold_the_commands_default():
    from eoscale.errors import InputError

    parser = argparse.ArgumentParser()
    bench.configure(parser)
    parser.add_argument("--record")
    with pytest.raises(InputError, match="--overlaps 0.5: choose among 0 0.25 0.5, with 0.25"):
        bench.run(parser.parse_args(["--overlaps", "0.5"]))


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_bench_predict_memory_compares_two_sizes(tmp_path, capsys, monkeypatch):
    """--memory: the command's peak at the reference size and at --size, each in a process of its own, and their
    ratio (here 96² against 128² px, for speed; the bench compares 4,096² with a whole Sentinel-2 tile)."""
    monkeypatch.setattr(bench, "MEMORY_REFERENCE", 96)
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    parser.add_argument("--record")
    args = parser.parse_args(["--memory", "--size", "128", "--backbone", "test_resnet", "--tile", "32",
                              "--batch-size", "8", "--record", str(tmp_path)])
    assert bench.run(args) == 0
    assert "peak memory at 128² ÷ at 96²" in capsys.readouterr().out
    (run,) = json.loads((tmp_path / "predict.json").read_text())
    assert run["mode"] == "memory" and set(run["command_memory_by_size"]) == {"96", "128"}
    peaks = [run["command_memory_by_size"][s]["peak_rss_bytes"] for s in ("96", "128")]
    assert all(0 < p < 8 * 2**30 for p in peaks) and run["memory_ratio"] == peaks[1] / peaks[0]
    assert all(m["cog_valid"] for m in run["command_memory_by_size"].values())
