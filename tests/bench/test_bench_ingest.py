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
    assert set(figures["shard_write"]["seconds"]) == {"numcodecs_encode", "zarr_assignment", "eoscale_shards"}
    assert figures["data"]["scene_size"] == [256, 256]


@pytest.mark.parametrize("options,message", [
    (["--size", "10"], "--size 10: scenes need at least 64 pixels on each side"),
    (["--data", "somewhere", "--size", "512"], "--size and --scenes shape the synthesised scenes: leave them out with --data"),
])
def test_bench_ingest_bad_size_is_one_line(tmp_path, capsys, options, message):
    assert main(["bench", "ingest", *options, "--record", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"eoscale bench: error: {message}"]


def test_a_full_size_scene_is_its_piece_repeated(tmp_path, monkeypatch):
    import numpy as np
    import rasterio

    import eoscale.bench.fullsize as fullsize

    monkeypatch.setattr(fullsize, "PIECE", 100)
    inputs = fullsize.synthesize_full_size(tmp_path / "full", 250)  # 3 × 3 pieces of 84 px
    with rasterio.open(inputs["scenes"][0]) as src:
        pixels = src.read()
        assert (src.count, src.height, src.width, src.descriptions[0]) == (10, 250, 250, "B02")
    np.testing.assert_array_equal(pixels[:, 84:168, 168:250], pixels[:, :84, :82])
    with rasterio.open(inputs["labels"][0]) as src:
        assert (src.height, src.width, src.res) == (125, 125, (20.0, 20.0))
        assert set(np.unique(src.read(1))) - {0}
    assert not (tmp_path / "full" / "piece").exists()
