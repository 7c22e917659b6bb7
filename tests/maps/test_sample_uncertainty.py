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
    (["--n", "50", "--interior", "1"], False, "--interior chooses points by uncertainty"),
    (["--n", "50", "--quotas", "equal"], False, "--quotas chooses points by uncertainty"),
    (["--by", "uncertainty", "--n", "5", "--interior", "-1"], True, "the interior at least 0"),
    (["--by", "uncertainty", "--n", "5000", "--spacing", "20", "--interior", "1"], True, "or --interior"),
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


def boundary_uncertainty(codes: np.ndarray) -> np.ndarray:
    """High on the pixels beside another class (where a model is least sure), low inside a class, some noise."""
    from scipy.ndimage import maximum_filter, minimum_filter

    edge = minimum_filter(codes, 3, mode="nearest") != maximum_filter(codes, 3, mode="nearest")
    return np.random.default_rng(4).random(codes.shape) * 0.5 + edge


def test_interior_keeps_the_points_off_the_class_edges(tmp_path, mapped, monkeypatch):
    """--interior R: every point has one map class R pixels around it, also where the map is read in strips (the
    neighbourhood crosses a strip's edge); without it the most uncertain points sit on the edges."""
    from scipy.ndimage import maximum_filter, minimum_filter

    folder, codes, *_ = mapped
    write_float(tmp_path / "edge.tif", boundary_uncertainty(codes), folder / "map.tif")

    def points(name, *extra):
        assert main(["sample", str(folder / "map.tif"), "--by", "uncertainty", "--uncertainty", str(tmp_path / "edge.tif"),
                     "--n", "40", "--spacing", "5", "--output", str(tmp_path / name), "--seed", "2", *extra]) == 0
        table = pd.read_csv(tmp_path / f"{name}.csv")
        return table["row"].to_numpy(), table["col"].to_numpy()

    def one_class_around(rows, cols, radius):
        size = 2 * radius + 1
        same = minimum_filter(codes, size, mode="constant", cval=NODATA) == maximum_filter(codes, size, mode="constant",
                                                                                         cval=NODATA)
        return same[rows, cols]

    rows, cols = points("edge")
    assert not one_class_around(rows, cols, 1).any()  # all on an edge
    for radius in (1, 2):
        rows, cols = points(f"in{radius}", "--interior", str(radius))
        assert one_class_around(rows, cols, radius).all()
    monkeypatch.setattr("eoscale.maps.uncertain.STRIP_PIXELS", WIDTH * 12)  # strips of 10 rows
    strips = points("strips", "--interior", "2")
    assert (strips[0] == rows).all() and (strips[1] == cols).all()
    design = json.loads((tmp_path / "strips_design.json").read_text())
    assert design["labelling"]["interior_pixels"] == 2 and design["labelling"]["quotas"] == "none"


@pytest.mark.parametrize("quotas", ["proportional", "equal"])
def test_quotas_divide_the_points_among_the_map_classes(tmp_path, mapped, quotas):
    """--quotas proportional: each class's share of the points is its share of the map (the class mix of a random
    sample); equal: the same number a class; within a class, its most uncertain points."""
    folder, codes, *_ = mapped
    uncertainty = np.random.default_rng(6).random(codes.shape)
    uncertainty[codes == 10] += 1.0  # left to rank alone, every point would be trees
    write_float(tmp_path / "u.tif", uncertainty, folder / "map.tif")
    assert main(["sample", str(folder / "map.tif"), "--by", "uncertainty", "--uncertainty", str(tmp_path / "u.tif"),
                 "--n", "60", "--spacing", "3", "--quotas", quotas, "--output", str(tmp_path / "q"), "--seed", "1"]) == 0
    points = pd.read_csv(tmp_path / "q.csv")
    counts = points["stratum"].value_counts()
    valid = codes[codes != NODATA]
    for code in TABLE.codes:
        expected = 60 * (valid == code).mean() if quotas == "proportional" else 15
        assert abs(counts.get(code, 0) - expected) <= 1, (code, counts.to_dict())
        mine = points[points["stratum"] == code]["uncertainty"].min()
        others = uncertainty[(codes == code)]
        assert mine >= np.quantile(others, 0.9)  # each class's own most uncertain pixels
    assert json.loads((tmp_path / "q_design.json").read_text())["labelling"]["quotas"] == quotas
