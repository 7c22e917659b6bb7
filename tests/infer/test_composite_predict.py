"""`predict` of a checkpoint fitted on composites reads a place's raw scenes as ingest composited them
(`eoscale.raster.fused_season` with `eoscale.raster.composite`, the reducer ingest uses): the same steps, dates and
pixels as the store `ingest --time-series --composite` writes of the same scenes."""

from __future__ import annotations

import numpy as np
import pytest

from eoscale.cli import main
from eoscale.contract import BandContract
from eoscale.infer.stacked import trained_composite
from eoscale.raster.fused_season import season_steps
from eoscale.raster.sources import open_scene
from eoscale.raster.stack import StackReader, stack_scenes
from eoscale.sensors.groups import groups_of
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize

SIZE, TILE, INTERVAL = 64, 32, 120  # 6 dates from 14 February: 120-day intervals hold up to 3 of them


@pytest.fixture(scope="module")
def season(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("composite") / "season", scenes=1, size=SIZE, seed=2, dates=6)


def test_predict_composites_raw_scenes_as_ingest_does(season, tmp_path):
    # guards: predict handed a model fitted on 120-day medians each raw date as a step (6 steps, not 3 medians)
    paths = list(map(str, season.scene_paths))
    assert main(["ingest", "--time-series", "--composite", f"{INTERVAL}d", "--scenes", *paths, "--labels",
                 str(season.label_paths[0]), "--classes", str(season.class_table_path), "--output",
                 str(tmp_path / "c.zarr"), "--tile-size", str(TILE), "--min-valid", "0", "--workers", "1", "-q"]) == 0
    store = open_store(tmp_path / "c.zarr").load()
    scenes = [open_scene(p) for p in paths]
    groups = groups_of(None, tuple(scenes[0].band_names), scenes[0].sensor)
    steps = season_steps(scenes, groups, store.sizes[schema.TIME], composite=INTERVAL, folder=tmp_path / "work")
    (stack,) = stack_scenes(steps, store.sizes[schema.TIME], require="any")
    assert stack.id == scenes[0].id and stack.transform == scenes[0].transform
    assert [np.datetime64(d, "ns") for d in stack.dates] == list(store[schema.DATES].values[0])
    assert (store[schema.OBSERVATIONS].values >= 2).any()  # some steps are medians of several dates
    bands = len(scenes[0].bands)
    with StackReader(stack) as reader:
        for tile in range(store.sizes[schema.TILE]):
            row, col = int(store[schema.ROW_OFF].values[tile]), int(store[schema.COL_OFF].values[tile])
            block = reader.read_masked(row, col, TILE, TILE)
            read = np.where(block.date_valid[:, None], block.pixels.reshape(-1, bands, TILE, TILE), 0)
            np.testing.assert_array_equal(read, store[schema.IMAGES].values[tile])


def test_the_composite_interval_is_read_from_the_contracts_input_spec():
    contract = BandContract(("B02",), (0.0,), (1.0,), 32, (), time_steps=3)
    assert trained_composite(contract) is None  # a contract without an input spec: its scenes' own dates
    object.__setattr__(contract, "input_spec", {"sensors": [{"name": "sentinel-2", "bands": ["B02"], "timeline": {
        "kind": "calendar", "steps": 3, "interval": 16, "reducer": "median", "start": None}}]})
    assert trained_composite(contract) == 16
