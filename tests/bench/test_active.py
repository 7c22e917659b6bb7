"""`eoscale bench active`: the loop runs through eoscale sample/label/assess on a tiny synthetic set and records
each strategy's accuracy per labels added (the pool's unlabelled half and a held-out scene), the labels growing by
the batch each round, paired per seed against random."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eoscale.bench.active_loop import parse_strategy, texture_features
from eoscale.cli import main
from eoscale.errors import InputError

DEFAULTS = {"random": 0.0, "per_class": 0, "interior": 1, "spacing": 16, "quotas": None}


@pytest.mark.slow
def test_the_active_learning_loop_records_both_strategies(tmp_path):
    assert main(["bench", "active", "--size", "120", "--rounds", "2", "--seeds", "2", "--batch", "10", "--initial", "30",
                 "--assessment-n", "60", "--reference-labels", "300", "--spacing", "6", "--record", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "active.json").read_text())
    assert record["command"].startswith("eoscale bench active --size 120")
    assert {r["strategy"] for r in record["runs"]} == {"random", "entropy"}
    for run in record["runs"]:
        first, second = run["rounds"]
        for metric in ("oa", "miou", "held_out_oa", "held_out_miou"):
            assert 0 < first[metric] <= 1
        assert first["labels"] <= 30 and 8 <= second["labels"] - first["labels"] <= 10  # a few fall on nodata
        if run["strategy"] == "entropy":  # the mixed sample's stratified part assessed the pool map
            assert abs(first["pool_oa_estimate"] - first["pool_oa_census"]) < 0.3
    vs = record["summary"]["entropy"]["vs_random"]
    assert vs["per_seed"]["seeds"] == [0, 1]
    # the paired summary, recomputed here from the runs it summarises: per seed, entropy's area under the curve (the
    # mean after the shared first round) and final value minus random's, their medians and the seeds won
    curves = {(r["strategy"], r["seed"]): r["rounds"] for r in record["runs"]}
    for metric in ("oa", "miou", "held_out_oa", "held_out_miou"):
        mean_after_first = {k: np.mean([r[metric] for r in rounds[1:]]) for k, rounds in curves.items()}
        area = [mean_after_first["entropy", s] - mean_after_first["random", s] for s in (0, 1)]
        final = [curves["entropy", s][-1][metric] - curves["random", s][-1][metric] for s in (0, 1)]
        assert np.allclose(vs["per_seed"][f"{metric}_area"], area)
        assert np.allclose(vs["per_seed"][f"{metric}_final"], final)
        assert np.isclose(vs[f"{metric}_area_gain_median"], np.median(area))
        assert np.isclose(vs[f"{metric}_final_gain_median"], np.median(final))
        assert vs[f"{metric}_area_seeds_won"] == f"{sum(d > 0 for d in area)}/2"
        assert vs[f"{metric}_final_seeds_won"] == f"{sum(d > 0 for d in final)}/2"
    assert record["reference"]["labels"] > 250 and record["mixed_design"]["samples"] == 2


def test_strategies_take_options_and_refuse_unknown_ones():
    s = parse_strategy("margin:random=0.25:quotas=proportional:spacing=8", DEFAULTS)
    assert (s.measure, s.random, s.quotas, s.spacing, s.interior) == ("margin", 0.25, "proportional", 8, 1)
    assert parse_strategy("random", DEFAULTS).measure is None and not parse_strategy("random", DEFAULTS).flat
    assert parse_strategy("random:interior=2", DEFAULTS).flat  # the control: spacing and interior, no uncertainty
    for bad in ("forest", "margin:colour=red", "margin:random=2", "entropy:quotas=most", "margin:spacing=x"):
        with pytest.raises(InputError, match="--strategies"):
            parse_strategy(bad, DEFAULTS)


def test_texture_features_are_the_bands_ndvi_and_their_window_statistics():
    rng = np.random.default_rng(0)
    bands = rng.random((3, 20, 20)).astype(np.float32) * 1000
    bands[:, :, 10:] += 2000  # two halves of different brightness
    features = texture_features(bands, ("B02", "B04", "B08"), (3, 7))
    assert features.shape == (4 * 5, 20, 20)  # 3 bands + NDVI, each alone, mean and std over 3 and 7 px
    ndvi = (bands[2] - bands[1]) / (bands[2] + bands[1]) * 10000
    assert np.allclose(features[3], ndvi, rtol=1e-4)
    assert np.isclose(features[4, 5, 5], bands[0, 4:7, 4:7].mean(), rtol=1e-5)  # the 3×3 mean
    assert np.isclose(features[8, 5, 5], bands[0, 4:7, 4:7].std(), rtol=1e-3)  # the 3×3 standard deviation
    assert features[16, 5, 10] > features[16, 5, 3] * 2  # the 7×7 std rises across the edge
    assert texture_features(bands, ("B01", "B02", "B03"), ()).shape == (3, 20, 20)  # no red/NIR named: no NDVI
