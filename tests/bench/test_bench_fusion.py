"""`eoscale bench fusion`: a tiny real run (synth --sensors s2,s1, clouds on copies of the optical scenes, one ingest
of both sensors a cover, a few steps of each arm) records S2 alone, S1 alone and S1 + S2 scored on the same val
pixels, the cloudy and clear ones apart, and the fused network without optical data; bad options are one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eoscale.bench.fusion import cloud_mask
from eoscale.cli import main


def test_cloud_mask_covers_exactly_the_share_asked():
    for cover in (0.0, 0.5, 0.9):
        mask = cloud_mask((192, 160), cover, np.random.default_rng(0))
        assert mask.shape == (192, 160)
        assert mask.mean() == pytest.approx(cover, abs=0.01)


@pytest.mark.slow
def test_bench_fusion_scores_every_arm_on_the_same_pixels(tmp_path, capfd):
    assert main(["bench", "fusion", "--scenes", "3", "--size", "128", "--tile-size", "32", "--clouds", "0.5",
                 "--steps", "2", "--batch-size", "4", "--workers", "0", "--record", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "fusion.json").read_text())[-1]
    assert record["benchmark"] == "fusion" and record["machine"]["cores_available"] >= 1
    row = record["results"]["0.5"]
    assert sorted(row["arms"]) == ["s1", "s1+s2", "s2"]
    pixels = row["val_pixels"]
    assert pixels > 0 and all(arm["all"]["pixels"] == pixels for arm in row["arms"].values())
    # half the optical pixels are under cloud, and the optical arm is scored there too
    assert 0.3 < row["optical_clear_share"] < 0.7
    for arm in row["arms"].values():
        assert arm["clear"]["pixels"] + arm["cloudy"]["pixels"] == pixels and arm["steps"] == 2
    assert row["arms"]["s1+s2"]["without_optical"]["pixels"] == pixels
    assert row["gain_over_s2"] == pytest.approx(row["arms"]["s1+s2"]["all"]["miou"] - row["arms"]["s2"]["all"]["miou"])
    out, err = capfd.readouterr()
    assert "S1 + S2 over S2 alone" in out and "GPU available" not in out + err


def test_bench_fusion_refuses_bad_options(capsys):
    assert main(["bench", "fusion", "--clouds", "1.5", "--record", ""]) == 2
    assert main(["bench", "fusion", "--arms", "s3", "--record", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--clouds" in err[0] and "--arms" in err[1]
