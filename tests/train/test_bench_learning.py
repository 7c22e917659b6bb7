"""`eoscale bench learning` runs end to end on a tiny store: the per-pixel baseline, the calibration fit, and a
fit whose step count comes from it, stopped by its 6 s budget (`max_time`) and validated there (no figure
asserted: a few steps learn nothing). The smallest sizes it takes: its figures are not what is tested."""

from __future__ import annotations

import json
import os

import pytest

from eoscale.cli import main


@pytest.mark.slow
def test_bench_learning_records_both_models(store, tmp_path, capsys):
    code = main(["bench", "learning", str(store), "--minutes", "0.1", "--batch-size", "4",
                 "--workers", "0", "--forest-args", "--model.init_args.trees 5", "--calibration-steps", "8", "--validate-every", "10", "--record", str(tmp_path)])
    assert code == 0
    figures = json.loads((tmp_path / "learning.json").read_text())[-1]
    assert 0.0 <= figures["forest"]["val_miou"] <= 1.0
    assert set(figures["forest"]["val_classes"]) == set(figures["network"]["val_classes"])
    assert figures["miou_gain_over_forest"] == figures["network"]["val_miou"] - figures["forest"]["val_miou"]
    network = figures["network"]
    assert network["seconds_per_step_calibrated"] > 0 and network["calibration_steps"] == 8
    assert network["validate_every"] == 10
    assert network["max_steps"] >= 10 and network["max_steps"] % 10 == 0  # validated at its last step
    assert network["val_miou_history"], "the fit validated at least once"
    assert "recorded in" in capsys.readouterr().out


def test_bench_learning_refuses_a_calibration_without_timed_steps(store, capsys):
    assert main(["bench", "learning", str(store), "--calibration-steps", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibration-steps > 5" in err[0]


@pytest.mark.parametrize("args, expected", [
    ([], "give a tile store (STORE) or --synthetic FOLDER"),
    (["STORE", "--synthetic", "FOLDER"], "one of them"),
    (["STORE", "--reuse"], "--reuse keeps the sets of --synthetic"),
    (["--synthetic", "FOLDER", "--seeds", "0,x"], "is not comma-separated whole numbers"),
    (["--synthetic", "FOLDER", "--seeds", "1,1"], "distinct seeds"),
])
def test_bench_learning_refuses_bad_options_in_one_line(store, tmp_path, capsys, args, expected):
    args = [str(store) if a == "STORE" else str(tmp_path / "sets") if a == "FOLDER" else a for a in args]
    assert main(["bench", "learning", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "sets").exists()


def _fake_fits(monkeypatch) -> list[tuple]:
    """Both fits replaced by ones that note what they were given: the seeds, stores and the record are tested
    here, the real fits in test_bench_learning_records_both_models."""
    from eoscale.bench import learning

    calls: list[tuple] = []
    classes = {"Forest": {"iou": 0.5, "pixel_share": 0.99, "producer_accuracy": 0.9},
               "Open water": {"iou": 0.0, "pixel_share": 0.01, "producer_accuracy": 0.0}}

    def forest(store, work, *, config, extra):
        calls.append(("forest", store, extra))
        return {"val_miou": 0.3, "val_accuracy": 0.6, "val_classes": classes}

    def network(store, work, *, config, extra, **budget):
        calls.append(("network", store, extra))
        warned = ["warning: class 'Open water' (1.00% of the val pixels) has producer's accuracy 0 …"]
        return {"val_miou": 0.3 + 0.1 * len(calls), "val_accuracy": 0.7, "val_classes": classes,
                "checkpoint": "epoch000-step000100-miou0.5000.ckpt", "early_stopping": None, "fit_warnings": warned,
                **learning.missed_classes(classes, warned)}

    monkeypatch.setattr(learning, "fit_forest", forest)
    monkeypatch.setattr(learning, "fit_network", network)
    return calls


def test_bench_learning_synthetic_seeds_and_reuse(tmp_path, monkeypatch, capsys):
    calls = _fake_fits(monkeypatch)
    sets, record = tmp_path / "sets", tmp_path / "record"
    small = ["--scenes", "1", "--size", "96", "--tile-size", "32", "--record", str(record)]
    assert main(["bench", "learning", "--synthetic", str(sets), "--seeds", "0,1", *small]) == 0
    figures = json.loads((record / "learning.json").read_text())[-1]
    assert figures["seeds_of"] == "synthetic sets" and figures["seeds"] == [0, 1]
    stores = [run["store"] for run in figures["runs"]]
    assert stores == [str(sets / f"seed{s}" / "tiles.zarr") for s in (0, 1)]
    assert [c[1] for c in calls] == [stores[0], stores[0], stores[1], stores[1]]  # both models on each seed's set
    assert all(c[2] == [] for c in calls)  # the fits keep their configs' seeds
    assert figures["runs"][0]["class_shares"] != figures["runs"][1]["class_shares"]  # two different sets
    assert figures["miou_gain_over_forest_per_seed"] == pytest.approx([0.2, 0.4])
    assert figures["miou_gain_over_forest_min"] == pytest.approx(0.2)
    assert figures["runs"][0]["network"]["missed_classes"] == ["Open water"]
    assert figures["runs"][0]["network"]["missed_classes_unwarned"] == []  # the fit warned about it
    written = (sets / "seed0" / "set.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["bench", "learning", "--synthetic", str(sets), "--seeds", "0", *small]) == 2  # not overwritten
    assert "pass --reuse" in capsys.readouterr().err
    assert main(["bench", "learning", "--synthetic", str(sets), "--seeds", "0", "--reuse", *small]) == 0
    assert (sets / "seed0" / "set.json").stat().st_mtime_ns == written  # reused, not written again
    assert main(["bench", "learning", "--synthetic", str(sets), "--seeds", "0", "--reuse", *small[:-2],
                 "--size", "128"]) == 2  # another set than the one written there
    assert "holds another set" in capsys.readouterr().err


def test_bench_learning_seeds_of_the_fits_on_a_store(store, tmp_path, monkeypatch):
    calls = _fake_fits(monkeypatch)
    assert main(["bench", "learning", str(store), "--seeds", "3,4", "--record", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "learning.json").read_text())[-1]
    assert figures["seeds_of"] == "fits" and [r["store"] for r in figures["runs"]] == [os.path.abspath(store)] * 2
    forest, network = calls[2][2], calls[3][2]  # the second seed's fits
    assert forest[:2] == ["--seed_everything", "4"] and forest[-2:] == ["--model.init_args.seed", "4"]
    # the network's weights and tiles' order too: seed_everything alone trained the same network each seed
    assert network[:6] == ["--seed_everything", "4", "--model.init_args.init_seed", "4", "--data.init_args.seed", "4"]


def test_missed_classes_names_those_without_a_warning():
    from eoscale.bench.learning import missed_classes

    classes = {"Forest": {"pixel_share": 0.9, "producer_accuracy": 0.8},
               "Open water": {"pixel_share": 0.004, "producer_accuracy": 0.0},
               "Barren": {"pixel_share": 0.002, "producer_accuracy": 0.0},
               "Wetlands": {"pixel_share": 0.0005, "producer_accuracy": 0.0}}  # under 0.1 %: not asked
    warned = ["warning: class 'Open water' (0.40% of the val pixels) has producer's accuracy 0 at the best …"]
    assert missed_classes(classes, warned) == {"missed_classes": ["Open water", "Barren"],
                                               "missed_classes_unwarned": ["Barren"]}
