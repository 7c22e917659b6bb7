"""eoscale synth --dates: a season of dated scenes a place, dates in every layout's metadata, clouds as each layout's
mask, missing dates, determinism, and classes that only the season tells apart."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import rasterio

from eoscale.bands import SENTINEL2_NAMES
from eoscale.cli import main
from eoscale.errors import InputError
from eoscale.raster.formats.stac import open_items
from eoscale.raster.sources import open_scene
from eoscale.synth import synthesize
from eoscale.synth.phenology import (
    DECIDUOUS,
    EVERGREEN,
    GRASSLAND,
    MAIZE,
    SEASON_CLASSES,
    WINTER_CEREAL,
    class_fractions,
    season_days,
)
from eoscale.synth.season import Place, missing_dates

B = {name: i for i, name in enumerate(SENTINEL2_NAMES)}
SIZE = 96


@pytest.fixture(scope="module")
def season(tmp_path_factory):
    out = tmp_path_factory.mktemp("season")
    return {layout: synthesize(out / layout, scenes=2, size=SIZE, seed=3, layout=layout, dates=6, nodata_fraction=0.2)
            for layout in ("multiband", "safe", "cog")}


def _manifest(result) -> dict:
    return json.loads(result.manifest_path.read_text())


def test_a_season_has_dated_scenes_a_place_with_a_missing_date(season):
    manifest = _manifest(season["safe"])
    assert len(manifest["dates"]) == 6
    by_place: dict[str, list[str]] = {}
    for record in manifest["scenes"]:
        by_place.setdefault(record["place"], []).append(record["date"])
    assert sorted(by_place) == ["place_000", "place_001"]
    assert all(dates == sorted(dates) and set(dates) <= set(manifest["dates"]) for dates in by_place.values())
    assert len(by_place["place_000"]) < 6, "place 0 always misses a date"
    assert missing_dates(0, 6, 3) and not missing_dates(0, 3, 3)
    # every layout writes the same places and dates
    for layout in ("multiband", "cog"):
        assert [(r["place"], r["date"]) for r in _manifest(season[layout])["scenes"]] == \
            [(r["place"], r["date"]) for r in manifest["scenes"]]


@pytest.mark.parametrize("layout", ["multiband", "safe", "cog"])
def test_each_layout_carries_its_dates_in_its_metadata(season, layout):
    result = season[layout]
    manifest = _manifest(result)
    if layout == "cog":
        scenes = open_items([str(p) for p in result.item_paths])
    else:
        scenes = [open_scene(str(p)) for p in result.scene_paths]
    assert [s.date for s in scenes] == [dt.date.fromisoformat(r["date"]) for r in manifest["scenes"]]
    with (result.out_dir / manifest["dates_file"]).open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["date"], r["place"]) for r in rows] == [(r["date"], r["place"]) for r in manifest["scenes"]]
    assert all((result.out_dir / r["path"]).exists() for r in rows)


def test_clouds_are_each_layouts_mask(season):
    """Multi-band files: nodata 0 under clouds; SAFE products: cloud tops in the bands, SCL class 8 over them."""
    nodata_shares = []
    for path in season["multiband"].scene_paths:
        with rasterio.open(path) as src:
            nodata_shares.append(float((src.read(1) == 0).mean()))
    assert max(nodata_shares) > 0.05 and min(nodata_shares) < max(nodata_shares)
    scl_shares = []
    for product in season["safe"].scene_paths:
        scl = next(Path(product).rglob("*_SCL_20m.jp2"))
        b05 = next(Path(product).rglob("*_B05_20m.jp2"))
        with rasterio.open(scl) as s, rasterio.open(b05) as b:
            classes, band = s.read(1), b.read(1)
        cloudy = classes == 8
        scl_shares.append(float(cloudy.mean()))
        assert (band != 0).all(), "a SAFE product's bands hold cloud tops, not nodata"
        if cloudy.any():
            assert np.median(band[cloudy]) > 5000 > np.median(band[~cloudy])
    assert max(scl_shares) > 0.05
    # the same date of the same place is cloudy over the same pixels in both layouts
    multiband = season["multiband"].scene_paths[0]
    with rasterio.open(multiband) as src:
        nodata_20m = src.read(B["B05"] + 1)[::2, ::2] == 0
    with rasterio.open(next(Path(season["safe"].scene_paths[0]).rglob("*_SCL_20m.jp2"))) as s:
        assert np.array_equal(s.read(1) == 8, nodata_20m)


def test_the_same_seed_gives_identical_bytes(tmp_path):
    def digests(out: Path) -> dict[str, str]:
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(out.rglob("*")) if p.is_file()}

    a = synthesize(tmp_path / "a", scenes=1, size=64, seed=5, layout="cog", dates=4)
    b = synthesize(tmp_path / "b", scenes=1, size=64, seed=5, layout="cog", dates=4)
    c = synthesize(tmp_path / "c", scenes=1, size=64, seed=6, layout="cog", dates=4)
    assert digests(a.out_dir) == digests(b.out_dir) != digests(c.out_dir)


def test_calendars_share_states_only_on_some_dates():
    same = lambda a, b, day: np.allclose(class_fractions(a, day), class_fractions(b, day))  # noqa: E731
    assert same(WINTER_CEREAL, GRASSLAND, 120) and not same(WINTER_CEREAL, GRASSLAND, 225)
    assert same(DECIDUOUS, EVERGREEN, 200) and not same(DECIDUOUS, EVERGREEN, 50)
    assert same(MAIZE, GRASSLAND, 250) and not same(MAIZE, GRASSLAND, 120)
    assert list(season_days(6)) == sorted(season_days(6)) and len(set(season_days(6))) == 6


def _ndvi(reflectance: np.ndarray, where: np.ndarray) -> float:
    red, nir = reflectance[B["B04"]][where].mean(), reflectance[B["B08"]][where].mean()
    return float((nir - red) / (nir + red))


def test_classes_alike_on_one_date_differ_over_the_season():
    """Rendered reflectance: winter cereal and grassland alike in spring, apart after the harvest; deciduous and
    evergreen forest alike in summer, apart in winter."""
    place = Place(0, (256, 256), seed=1)
    present = set(np.unique(place.classes))
    assert {WINTER_CEREAL, GRASSLAND, DECIDUOUS, EVERGREEN} <= present
    assert present <= set(SEASON_CLASSES.codes)
    spring, harvest, summer, winter = (place.reflectance(d) for d in (120, 228, 200, 50))
    cereal, grass = place.classes == WINTER_CEREAL, place.classes == GRASSLAND
    broadleaf, conifer = place.classes == DECIDUOUS, place.classes == EVERGREEN

    def spectrum(r: np.ndarray, where: np.ndarray) -> np.ndarray:
        return r[:, where].mean(axis=1)

    alike = np.abs(spectrum(spring, cereal) - spectrum(spring, grass)).max()
    apart = np.abs(spectrum(harvest, cereal) - spectrum(harvest, grass)).max()
    assert alike < 0.02 < 0.1 < apart
    assert abs(_ndvi(spring, cereal) - _ndvi(spring, grass)) < 0.03
    assert _ndvi(harvest, grass) - _ndvi(harvest, cereal) > 0.4
    # 0.035 on the context world's stands (its regions changed: orchards, fewer and larger stands), 0.65 of the
    # classes' pixel spread; in winter 0.19 (4.5 spreads)
    assert np.abs(spectrum(summer, broadleaf) - spectrum(summer, conifer)).max() < 0.04
    assert _ndvi(summer, broadleaf) - _ndvi(winter, broadleaf) > 0.4
    assert abs(_ndvi(winter, conifer) - _ndvi(summer, conifer)) < 0.05


@pytest.mark.parametrize("kwargs, reason", [({"dates": 0}, "dates=0: give a whole number"),
                                            ({"dates": 2.5}, "dates=2.5: give a whole number"),
                                            ({"dates": 4, "layout": "landsat"}, "--dates with --layout landsat"),
                                            ({"dates": 4, "layout": "perband"}, "--dates with --layout perband")])
def test_bad_season_arguments_raise_input_error(tmp_path, kwargs, reason):
    # each refused for its own reason (any InputError passed, a size or scene count refused instead included)
    with pytest.raises(InputError, match=reason):
        synthesize(tmp_path / "x", scenes=1, size=64, **kwargs)
    assert not (tmp_path / "x").exists()


def test_cli_writes_a_season(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "s"), "--dates", "3", "--scenes", "1", "--size", "64"]) == 0
    assert "on up to 3 dates" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert len(manifest["scenes"]) == 3 and manifest["layout"] == "multiband"
    assert main(["synth", str(tmp_path / "t"), "--dates", "3", "--layout", "landsat"]) == 2
