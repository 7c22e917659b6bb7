"""`eoscale synth --change`: a second date of each scene with known changes, its date in its tags, the change labels."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from eoscale.raster.scene import tiff_date
from eoscale.synth import synthesize
from eoscale.synth.change import (
    CHANGE_TABLE,
    CROP_EXPANSION,
    FOREST_LOSS,
    NEW_BUILT,
    STABLE,
    WATER_GAIN,
    WATER_LOSS,
)
from eoscale.synth.landcover import BARE, BUILT, CROP, GRASS, TREE, WATER, WETLAND


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    assert main(["synth", str(root / "set"), "--change", "--scenes", "2", "--size", "400", "--seed", "3"]) == 0
    synthesize(root / "plain", scenes=2, size=400, seed=3)
    return root / "set", root / "plain"


def read(path):
    with rasterio.open(path) as src:
        return src.read(), src


def test_the_first_dates_pixels_are_those_of_a_set_without_change(pairs):
    changed, plain = pairs
    for sid in ("scene_000", "scene_001"):
        a, _ = read(changed / "scenes" / f"{sid}.tif")
        b, _ = read(plain / "scenes" / f"{sid}.tif")
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(read(changed / "labels" / f"{sid}_landcover.tif")[0],
                                      read(plain / "labels" / f"{sid}_landcover.tif")[0])


def test_both_dates_carry_their_acquisition_date(pairs):
    changed, _ = pairs
    manifest = json.loads((changed / "manifest.json").read_text())
    for record in manifest["scenes"]:
        with rasterio.open(changed / record["image"]) as first, rasterio.open(changed / record["after"]["image"]) as second:
            assert tiff_date(first) == dt.date.fromisoformat(record["date"])
            assert tiff_date(second) == dt.date.fromisoformat(record["after"]["date"])
            assert tiff_date(second) - tiff_date(first) > dt.timedelta(days=360)
            assert first.transform == second.transform and first.crs == second.crs  # one place


def test_change_labels_say_what_changed_from_what_to_what(pairs):
    changed, _ = pairs
    manifest = json.loads((changed / "manifest.json").read_text())
    seen = set()
    for record in manifest["scenes"]:
        before = read(changed / record["labels"])[0][0]
        after = read(changed / record["after"]["labels"])[0][0]
        change, src = read(changed / record["after"]["change"])
        change = change[0]
        assert set(np.unique(change)) <= {0, *CHANGE_TABLE.codes}
        assert np.all((before == after) | (change != STABLE))  # a changed class is never labelled stable
        rules = {FOREST_LOSS: ({TREE}, {BARE, GRASS}), NEW_BUILT: ({CROP, GRASS}, {BUILT}),
                 CROP_EXPANSION: ({GRASS}, {CROP}), WATER_GAIN: ({GRASS, CROP, WETLAND}, {WATER}),
                 WATER_LOSS: ({WATER}, {WETLAND, BARE})}
        for code, (sources, targets) in rules.items():
            here = change == code
            seen |= {code} if here.any() else set()
            assert set(np.unique(before[here])) <= sources and set(np.unique(after[here])) <= targets
        share = np.isin(change, list(rules)).mean()
        assert 0.002 < share < 0.15  # change is rare, as in real pairs
        assert record["after"]["change_hectares"]["no change"] > 0
        assert src.crs.to_epsg() == 3035  # like the label rasters: another CRS than the scenes
    assert seen == {FOREST_LOSS, NEW_BUILT, CROP_EXPANSION, WATER_GAIN, WATER_LOSS}
    assert (changed / "change_classes.csv").is_file()


def test_the_same_seed_gives_the_same_pairs(pairs, tmp_path):
    changed, _ = pairs
    synthesize(tmp_path / "again", scenes=1, size=400, seed=3, change=True)
    for name in ("scenes/scene_000_after.tif", "labels/scene_000_change.tif"):
        assert (tmp_path / "again" / name).read_bytes() == (changed / name).read_bytes()


def test_change_pairs_of_another_layout_are_refused(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "x"), "--change", "--layout", "safe", "--size", "64"]) == 2
    assert "change pairs are written as multiband GeoTIFFs" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
