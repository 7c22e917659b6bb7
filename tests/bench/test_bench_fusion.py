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


@pytest.mark.slow  # 6 tiny U-TAE fits (about 25 s on 2 cores)
def test_bench_fusion_of_seasons_scores_every_arm_and_seed_on_the_same_pixels(tmp_path, capfd):
    assert main(["bench", "fusion", "--dates", "4", "--scenes", "3", "--size", "128", "--tile-size", "32",
                 "--clouds", "0.5", "--steps", "2", "--seeds", "2", "--batch-size", "4", "--workers", "0",
                 "--record", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "fusion_season.json").read_text())[-1]
    assert record["benchmark"] == "fusion_season" and record["budget"]["seeds"] == [0, 1]
    assert record["data"]["composite"] == "93d"  # one optical date an interval of synth's 4-date season
    assert record["recipe"]["pixel_mask"] is True  # every arm's U-TAE leaves out the dates a pixel lacks (issue 47)
    assert record["recipe"]["presence_channels"] is True  # the fused arm's U-TAE sees where each sensor has data
    row = record["results"]["0.5"]
    assert sorted(row["arms"]) == ["s1", "s1+s2", "s2"] and row["val_pixels"] > 0
    # about half of the optical pixel-steps under cloud (the rest of the steps hold no optical date at all)
    assert 0.2 < row["optical_clear_share"] < 0.7
    for arm in row["arms"].values():
        runs = arm["seeds"]
        assert sorted(runs) == ["0", "1"] and all(r["steps"] == 2 for r in runs.values())
        # guards: seeds that changed nothing (the same weights and order whatever the seed)
        assert (runs["0"]["miou"], runs["0"]["accuracy"]) != (runs["1"]["miou"], runs["1"]["accuracy"])
        mious = [r["miou"] for r in runs.values()]
        assert arm["miou"]["mean"] == pytest.approx(np.mean(mious))
        assert arm["miou"]["std"] == pytest.approx(np.std(mious, ddof=1))
    singles = {k: row["arms"][k]["miou"]["mean"] for k in ("s1", "s2")}
    assert row["best_single"] == max(singles, key=singles.get)
    assert row["gain_over_best_single"] == pytest.approx(row["arms"]["s1+s2"]["miou"]["mean"] - max(singles.values()))
    assert row["fused_beats_best_single"] == (row["gain_over_best_single"] > 0)
    assert record["goal_met"] == row["fused_beats_best_single"]
    out, _ = capfd.readouterr()
    assert "S1 + S2 over the best single sensor" in out


def test_bench_fusion_of_seasons_refuses_bad_options(capsys):
    assert main(["bench", "fusion", "--dates", "1", "--record", ""]) == 2
    assert main(["bench", "fusion", "--dates", "4", "--seeds", "0", "--record", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--dates" in err[0] and "--seeds" in err[1]
