"""A Landsat-like series, its grids shifted by a few pixels from scene to scene: ingest and predict group its scenes by
the same rule (`eoscale.raster.places`: overlapping footprints) into one place on the earliest scene's grid, the other
dates warped onto it. The season checkpoint maps it as one stack: the same map as the series given on one grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine

from eoscale.cli import main
from eoscale.raster.sources import open_scene
from eoscale.raster.stack import StackReader, stack_scenes
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize
from tests.checkpoints import TILE, make_season_checkpoint

SIZE = 64
SHIFTS = ((0, 0), (3, -2), (-4, 5))  # (columns, rows) each date's grid lies from the first's


def _shifted(source: Path, target: Path, columns: int, rows: int) -> None:
    """`source`'s ground seen by a grid `columns`, `rows` pixels away (pixels it does not cover: nodata)."""
    with rasterio.open(source) as src:
        data, profile, tags = src.read(), src.profile, src.tags()
        descriptions = src.descriptions
    out = np.zeros_like(data)
    height, width = data.shape[1:]
    ys, xs = slice(max(rows, 0), height + min(rows, 0)), slice(max(columns, 0), width + min(columns, 0))
    out[:, max(-rows, 0): height - max(rows, 0), max(-columns, 0): width - max(columns, 0)] = data[:, ys, xs]
    profile.update(transform=profile["transform"] @ Affine.translation(columns, rows))
    with rasterio.open(target, "w", **profile) as dst:
        dst.write(out)
        dst.update_tags(**tags)
        dst.descriptions = descriptions


def _on_first_grid(source: Path, target: Path, columns: int, rows: int) -> None:
    """What the shifted date reads as on the first date's grid: `source` where the shifted grid covers it, else
    nodata (an integer shift: bilinear resampling moves no value)."""
    with rasterio.open(source) as src:
        data, profile, tags = src.read(), src.profile, src.tags()
        descriptions = src.descriptions
    height, width = data.shape[1:]
    keep = np.zeros((height, width), bool)
    keep[max(rows, 0): height + min(rows, 0), max(columns, 0): width + min(columns, 0)] = True
    with rasterio.open(target, "w", **profile) as dst:
        dst.write(np.where(keep, data, 0))
        dst.update_tags(**tags)
        dst.descriptions = descriptions


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> dict[str, list[Path]]:
    """One place's 3 dates as a Landsat series delivers them (each on its own grid, shifted) and as the same ground on
    the first date's grid."""
    root = tmp_path_factory.mktemp("shifted")
    season = synthesize(root / "season", scenes=1, size=SIZE, seed=3, dates=3, nodata_fraction=0)
    (root / "shifted").mkdir()
    (root / "aligned").mkdir()
    shifted, aligned = [], []
    for path, (columns, rows) in zip(season.scene_paths, SHIFTS, strict=True):
        _shifted(path, root / "shifted" / path.name, columns, rows)
        _on_first_grid(path, root / "aligned" / path.name, columns, rows)
        shifted.append(root / "shifted" / path.name)
        aligned.append(root / "aligned" / path.name)
    return {"shifted": shifted, "aligned": aligned, "labels": season.label_paths[:1],
            "classes": [season.class_table_path]}


def test_the_shifted_dates_are_one_stack_on_the_earliest_grid(series):
    # guards: stack_scenes grouped by identical grid, so each shifted date was a place of its own (3 stacks)
    scenes = [open_scene(str(p)) for p in reversed(series["shifted"])]
    (stack,) = stack_scenes(scenes, 3, require="any")
    first = open_scene(str(series["shifted"][0]))
    assert stack.transform == first.transform and stack.id == first.id
    assert stack.dates == sorted(s.date for s in scenes)
    (aligned,) = stack_scenes([open_scene(str(p)) for p in series["aligned"]], 3, require="any")
    with StackReader(stack) as reader, StackReader(aligned) as expected:
        got, want = reader.read_masked(0, 0, SIZE, SIZE), expected.read_masked(0, 0, SIZE, SIZE)
    np.testing.assert_array_equal(got.pixels, want.pixels)
    np.testing.assert_array_equal(got.date_valid, want.date_valid)
    assert not got.date_valid[1].all() and got.date_valid[0].all()  # the shifted dates' uncovered edges: nodata


@pytest.mark.slow  # an ingest and two predicts (about 20 s on 2 cores)
def test_a_shifted_series_ingests_and_predicts_on_the_reference_grid(series, tmp_path):
    # guards: predict grouped a season's scenes by identical grid, so a Landsat series ingested as one place was
    # mapped date by date (a map a scene) instead of as one stack
    assert main(["ingest", "--time-series", "--scenes", *map(str, series["shifted"]), "--labels",
                 str(series["labels"][0]), "--classes", str(series["classes"][0]), "--output",
                 str(tmp_path / "season.zarr"), "--tile-size", str(TILE), "--workers", "1", "-q"]) == 0
    store = open_store(tmp_path / "season.zarr")
    assert store.sizes[schema.TIME] == 3 and len(np.unique(store[schema.SCENE].values)) == 1
    checkpoint = make_season_checkpoint(tmp_path / "season.ckpt", time_steps=3)
    for name in ("shifted", "aligned"):
        assert main(["predict", "--checkpoint", str(checkpoint), "--input", *map(str, series[name]), "--output",
                     str(tmp_path / name), "--window", str(TILE), "--device", "cpu", "--no-progress"]) == 0
    maps = sorted((tmp_path / "shifted").glob("*_landcover.tif"))
    assert [m.name for m in maps] == [f"{series['shifted'][0].stem}_landcover.tif"]  # one map of the place
    with rasterio.open(maps[0]) as got, rasterio.open(tmp_path / "aligned" / maps[0].name) as want, \
            rasterio.open(series["shifted"][0]) as first:
        assert (got.crs, got.transform, got.shape) == (first.crs, first.transform, first.shape)
        np.testing.assert_array_equal(got.read(), want.read())
