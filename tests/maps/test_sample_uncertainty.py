"""`eoscale sample --by uncertainty|mixed`: the most uncertain pixels are chosen, spread out, rare classes served;
a mixed sample's probability part gives exactly the stratified estimates; `eoscale assess` refuses points chosen
by uncertainty; bad options are refused in one line with nothing written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import rasterio

from eoscale.cli import main
from eoscale.maps.uncertain import entropy, margin
from tests.maps.maps import NODATA, TABLE, blocky_codes, truth_of, write_map

HEIGHT, WIDTH = 240, 300


def write_float(path, values, like):
    with rasterio.open(like) as src:
        profile = src.profile
    profile.update(dtype="float32", nodata=None, count=values.shape[0] if values.ndim == 3 else 1)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(values.astype(np.float32) if values.ndim == 3 else values.astype(np.float32)[None])
    return path


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    """A map, its truth, and an uncertainty that is high exactly where the map is wrong (plus noise)."""
    folder = tmp_path_factory.mktemp("uncertain")
    codes = blocky_codes(HEIGHT, WIDTH)
    truth = truth_of(codes, error_rate=0.05)
    rng = np.random.default_rng(3)
    uncertainty = rng.random(codes.shape) * 0.5 + (truth != codes) * 1.0
    uncertainty[codes == NODATA] = 9.0  # the map's nodata is never chosen, however uncertain
    map_path = write_map(folder / "map.tif", codes)
    write_map(folder / "truth.tif", truth)
    write_float(folder / "uncertainty.tif", uncertainty, map_path)
    return folder, codes, truth, uncertainty


def sample(tmp_path, folder, *extra, name="s"):
    return main(["sample", str(folder / "map.tif"), "--uncertainty", str(folder / "uncertainty.tif"),
                 "--output", str(tmp_path / name), "--seed", "5", *extra])


def test_the_most_uncertain_pixels_are_chosen_and_spread_out(tmp_path, mapped):
    folder, codes, truth, uncertainty = mapped
    assert sample(tmp_path, folder, "--by", "uncertainty", "--n", "60", "--spacing", "6") == 0
    points = pd.read_csv(tmp_path / "s.csv")
    rows, cols = points["row"].to_numpy(), points["col"].to_numpy()
    assert (points["set"] == "labelling").all() and len(points) == 60
    assert (codes[rows, cols] != NODATA).all()
    # every chosen pixel is one the map got wrong (uncertainty ≥ 1), and far more uncertain than a random pixel
    assert (truth[rows, cols] != codes[rows, cols]).all()
    assert np.allclose(points["uncertainty"], uncertainty[rows, cols], atol=1e-6)
    assert list(points["uncertainty"]) == sorted(points["uncertainty"], reverse=True)  # most uncertain first
    distance = np.hypot(rows[:, None] - rows[None], cols[:, None] - cols[None]) + np.eye(60) * 99
    assert distance.min() >= 6
    design = json.loads((tmp_path / "s_design.json").read_text())
    assert design["eoscale_sample_design"] == 2 and design["design"] == "uncertainty"
    assert design["probability_sample"] is None and design["n"] == 0 and design["labelling"]["n"] == 60
    assert (points["stratum"] == codes[rows, cols]).all()


def test_per_class_gives_a_rare_class_its_own_uncertain_points(tmp_path, mapped):
    folder, codes, *_ = mapped
    assert sample(tmp_path, folder, "--by", "uncertainty", "--n", "40", "--spacing", "3", "--per-class", "8") == 0
    points = pd.read_csv(tmp_path / "s.csv")
    counts = points["stratum"].value_counts()
    assert all(counts.get(code, 0) >= 8 for code in TABLE.codes)
    assert sample(tmp_path, folder, "--by", "uncertainty", "--n", "40", "--spacing", "3", "--overwrite") == 0
    plain = pd.read_csv(tmp_path / "s.csv")
    assert plain["stratum"].value_counts().get(80, 0) < 8  # water (rare) gets fewer without it


def test_a_blob_gives_one_point_per_spacing(tmp_path, mapped):
    folder, codes, *_ = mapped
    blob = np.zeros(codes.shape)
    blob[100:120, 100:120] = 1.0  # 400 equally uncertain pixels in one patch
    write_float(tmp_path / "blob.tif", blob, folder / "map.tif")
    assert main(["sample", str(folder / "map.tif"), "--by", "uncertainty", "--uncertainty", str(tmp_path / "blob.tif"),
                 "--n", "30", "--spacing", "10", "--output", str(tmp_path / "b"), "--seed", "1"]) == 0
    points = pd.read_csv(tmp_path / "b.csv")
    inside = points["row"].between(100, 119) & points["col"].between(100, 119)
    assert 1 <= inside.sum() <= 9  # a 20×20 blob holds at most 9 points 10 pixels apart; the rest go elsewhere
    rows, cols = points["row"].to_numpy(), points["col"].to_numpy()
    assert (np.hypot(rows[:, None] - rows[None], cols[:, None] - cols[None]) + np.eye(30) * 99).min() >= 10


def test_entropy_and_margin_from_class_probabilities(tmp_path, mapped):
    p = np.array([[1.0, 0.5, 0.25], [0.0, 0.5, 0.25], [0.0, 0.0, 0.25], [0.0, 0.0, 0.25]])
    assert np.allclose(entropy(p), [0.0, np.log(2), np.log(4)])
    assert np.allclose(margin(p), [0.0, 1.0, 1.0])
    assert np.allclose(margin(p * 255), margin(p))  # any scale: each pixel is normalised
    folder, codes, *_ = mapped
    probabilities = np.full((4, HEIGHT, WIDTH), 0.01)
    probabilities[0] = 0.97
    probabilities[:, 50:60, 200:210] = 0.25  # a patch where the model cannot choose
    write_float(tmp_path / "p.tif", probabilities, folder / "map.tif")
    assert main(["sample", str(folder / "map.tif"), "--by", "uncertainty", "--uncertainty", str(tmp_path / "p.tif"),
                 "--measure", "margin", "--n", "4", "--spacing", "3", "--output", str(tmp_path / "p"), "--seed", "1"]) == 0
    points = pd.read_csv(tmp_path / "p.csv")
    assert points["row"].between(50, 59).all() and points["col"].between(200, 209).all()


def test_a_mixed_sample_estimates_exactly_as_its_stratified_part(tmp_path, mapped):
    """The probability part of a mixed sample is the stratified sample of the same seed; assess reads only it, so
    labelling points (here all labelled wrong on purpose) change nothing."""
    folder, *_ = mapped
    strat = ["--n", "120", "--allocation", "min-per-class", "15"]
    assert main(["sample", str(folder / "map.tif"), *strat, "--output", str(tmp_path / "st"), "--seed", "5"]) == 0
    assert sample(tmp_path, folder, "--by", "mixed", "--labelling", "50", *strat, name="mx") == 0
    for name in ("st", "mx"):
        assert main(["label", str(tmp_path / f"{name}.csv"), "--reference", str(folder / "truth.tif")]) == 0
    mixed = pd.read_csv(tmp_path / "mx.csv")
    labelling = mixed["set"] == "labelling"
    assert labelling.sum() == 50 and (~labelling).sum() == 120
    assessment = set(zip(mixed.loc[~labelling, "row"], mixed.loc[~labelling, "col"], strict=True))
    stratified = pd.read_csv(tmp_path / "st.csv")
    assert assessment == set(zip(stratified["row"], stratified["col"], strict=True))
    assert not assessment & set(zip(mixed.loc[labelling, "row"], mixed.loc[labelling, "col"], strict=True))
    mixed.loc[labelling, "reference"] = 80  # wrong labels on the labelling set must not move any estimate
    mixed.to_csv(tmp_path / "mx.csv", index=False)
    reports = {}
    for name in ("st", "mx"):
        assert main(["assess", str(folder / "map.tif"), "--reference", str(tmp_path / f"{name}.csv"), "--output",
                     str(tmp_path / f"a_{name}"), "--no-tracking"]) == 0
        reports[name] = json.loads((tmp_path / f"a_{name}" / "assessment.json").read_text())
    assert reports["mx"]["n"] == 120
    assert reports["mx"]["overall_accuracy"] == reports["st"]["overall_accuracy"]
    assert [c["area_ha"] for c in reports["mx"]["classes"]] == [c["area_ha"] for c in reports["st"]["classes"]]
    design = json.loads((tmp_path / "mx_design.json").read_text())
    assert design["design"] == "mixed" and design["probability_sample"] == "assessment"
    assert sum(s["n"] for s in design["strata"]) == 120
    for s in design["strata"]:
        assert s["inclusion_probability"] == pytest.approx(s["n"] / s["pixels"])


def test_assess_refuses_points_chosen_by_uncertainty(tmp_path, mapped, capsys):
    folder, *_ = mapped
    assert sample(tmp_path, folder, "--by", "uncertainty", "--n", "30") == 0
    assert main(["label", str(tmp_path / "s.gpkg"), "--reference", str(folder / "truth.tif")]) == 0
    for reference in ("s.csv", "s.gpkg"):
        capsys.readouterr()
        assert main(["assess", str(folder / "map.tif"), "--reference", str(tmp_path / reference), "--output",
                     str(tmp_path / "a"), "--no-tracking"]) == 2
        err = capsys.readouterr().err.strip()
        assert "chosen by uncertainty" in err and "not a probability sample" in err and len(err.splitlines()) == 1
    (tmp_path / "s_design.json").unlink()  # without its design, the set column still tells
    assert main(["assess", str(folder / "map.tif"), "--reference", str(tmp_path / "s.gpkg"), "--output",
                 str(tmp_path / "a"), "--no-tracking"]) == 2
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("extra, given, match", [
    (["--by", "uncertainty", "--n", "5"], False, "needs --uncertainty"),
    (["--by", "mixed", "--n", "50"], True, "needs --labelling"),
    (["--n", "50", "--per-class", "3"], False, "add --by uncertainty"),
    (["--n", "50"], True, "add --by uncertainty"),
    (["--by", "uncertainty", "--n", "5", "--allocation", "equal"], True, "for the stratified sample of --by mixed"),
    (["--by", "uncertainty", "--n", "5", "--spacing", "0"], True, "at least 1 pixel"),
    (["--by", "uncertainty", "--n", "5000", "--spacing", "20"], True, "ask for fewer points"),
])
def test_bad_options_are_refused_in_one_line(tmp_path, mapped, capsys, extra, given, match):
    folder, *_ = mapped
    uncertainty = ["--uncertainty", str(folder / "uncertainty.tif")] if given else []
    assert main(["sample", str(folder / "map.tif"), *extra, *uncertainty, "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_an_uncertainty_off_the_maps_grid_is_refused(tmp_path, mapped, capsys):
    folder, codes, *_ = mapped
    other = write_map(tmp_path / "other.tif", codes[:100])
    write_float(tmp_path / "u.tif", np.ones((100, WIDTH)), other)
    assert main(["sample", str(folder / "map.tif"), "--by", "uncertainty", "--uncertainty", str(tmp_path / "u.tif"),
                 "--n", "5", "--output", str(tmp_path / "x")]) == 2
    assert "is not on the grid of the map" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
