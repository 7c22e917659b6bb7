"""`predict` of a checkpoint fitted on composites reads a place's raw scenes as ingest composited them
(`eoscale.raster.fused_season` with `eoscale.raster.composite`, the reducer ingest uses): the same steps, dates and
pixels as the store `ingest --time-series --composite` writes of the same scenes, on the store's calendar (its first
day, which ingest records in the input spec) also for a place whose first date is not the store's; a checkpoint whose
spec records no first day (written before) is mapped as before, with one warning naming the fix."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from eoscale.cli import main
from eoscale.contract import BandContract
from eoscale.infer.stacked import trained_calendar, trained_composite
from eoscale.inputs.spec import InputSpec
from eoscale.raster.composite import composite_starts
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


def test_the_calendar_of_a_later_or_earlier_place_keeps_the_stores_intervals():
    first = dt.date(2024, 2, 14)  # the store's calendar: 30-day intervals from 14 February
    on_calendar = composite_starts(dt.date(2024, 4, 1), dt.date(2024, 6, 1), 30, start=first)
    assert on_calendar == [dt.date(2024, 3, 15), dt.date(2024, 4, 14), dt.date(2024, 5, 14)]  # 30, 60, 90 days on
    earlier = composite_starts(dt.date(2024, 1, 1), dt.date(2024, 2, 20), 30, start=first)  # k = -2 and -1, then 0
    assert earlier == [dt.date(2023, 12, 16), dt.date(2024, 1, 15), dt.date(2024, 2, 14)]
    assert composite_starts(dt.date(2024, 4, 1), dt.date(2024, 4, 20), 30) == [dt.date(2024, 4, 1)]  # no start
    assert composite_starts(dt.date(2024, 4, 9), dt.date(2024, 5, 2), "monthly", start=first) == [
        dt.date(2024, 4, 1), dt.date(2024, 5, 1)]


@pytest.fixture(scope="module")
def two_places(tmp_path_factory):
    """A store of 120-day composites of two places whose first dates differ by 56 days (place 1's first acquisition
    left out), and place 1's raw scenes."""
    root = tmp_path_factory.mktemp("phase")
    made = synthesize(root / "season", scenes=2, size=SIZE, seed=2, dates=6)
    by_place: dict[str, list[str]] = {}
    for path in made.scene_paths:
        by_place.setdefault(path.parent.name, []).append(str(path))
    first, later = (sorted(paths) for _, paths in sorted(by_place.items()))
    later = later[1:]  # place 1 begins at its second acquisition: 56 days after the store's first date
    assert main(["ingest", "--time-series", "--composite", f"{INTERVAL}d", "--scenes", *first, *later, "--labels",
                 *sorted({str(p) for p in made.label_paths}), "--classes", str(made.class_table_path), "--output",
                 str(root / "c.zarr"), "--tile-size", str(TILE), "--min-valid", "0", "--workers", "1", "-q"]) == 0
    return root / "c.zarr", [open_scene(p) for p in first], [open_scene(p) for p in later]


def test_a_place_whose_first_date_is_not_the_stores_is_composited_on_the_stores_calendar(two_places, tmp_path):
    # guards: predict started a place's intervals at its own first date, so a place whose first scene fell 56 days
    # after the store's first date got 120-day medians of another phase than training's (train/predict skew)
    path, first, later = two_places
    store = open_store(path).load()
    spec = InputSpec.from_store_attrs(store.attrs)  # what fit records in the checkpoint (`input_spec_record`)
    assert spec.composite.start == min(s.date for s in first + later).isoformat()
    bands = spec.bands
    contract = BandContract(bands, (0.0,) * len(bands), (1.0,) * len(bands), TILE, (),
                            time_steps=store.sizes[schema.TIME], input_spec=spec.to_dict())
    interval, start = trained_calendar(contract)
    assert interval == INTERVAL and (later[0].date - start).days % INTERVAL != 0  # another phase than the store's
    groups = groups_of(None, tuple(later[0].band_names), later[0].sensor)
    steps = season_steps(later, groups, store.sizes[schema.TIME], composite=interval, start=start,
                         folder=tmp_path / "work")
    (stack,) = stack_scenes(steps, store.sizes[schema.TIME], require="any")
    places = [scene["place"] for scene in store.attrs[schema.ATTR_SCENES]]
    tiles = [t for t in range(store.sizes[schema.TILE]) if places[int(store[schema.SCENE].values[t])] == stack.id]
    assert tiles and stack.transform == later[0].transform
    stored = [d for d in store[schema.DATES].values[tiles[0]] if not np.isnat(d)]
    held = [k for k, d in enumerate(stored) if d >= np.datetime64(start + dt.timedelta(days=interval * (
        (later[0].date - start).days // interval)), "ns")]  # the store's steps from the one of the place's first date
    assert [np.datetime64(d, "ns") for d in stack.dates] == [stored[k] for k in held]
    assert (store[schema.OBSERVATIONS].values[tiles][:, held] >= 2).any()  # some steps are medians of several dates
    count = len(later[0].bands)
    with StackReader(stack) as reader:
        for tile in tiles:
            row, col = int(store[schema.ROW_OFF].values[tile]), int(store[schema.COL_OFF].values[tile])
            block = reader.read_masked(row, col, TILE, TILE)
            read = np.where(block.date_valid[:, None], block.pixels.reshape(-1, count, TILE, TILE), 0)
            np.testing.assert_array_equal(read, store[schema.IMAGES].values[tile][held])


def test_a_checkpoint_without_its_calendars_first_day_maps_as_before_and_warns_once(two_places, tmp_path, capsys):
    import torch

    from eoscale.contract import CONTRACT_KEY
    from tests.checkpoints import make_season_checkpoint

    path, _, later = two_places
    recorded = InputSpec.from_store_attrs(open_store(path).attrs)
    steps = recorded.time_steps
    checkpoint = make_season_checkpoint(tmp_path / "season.ckpt", time_steps=steps, bands=recorded.bands,
                                        mean=recorded.mean, std=recorded.std)
    saved = torch.load(checkpoint, weights_only=True)
    old = tmp_path / "old.ckpt"  # its spec as fit wrote it before ingest recorded the calendar's first day
    torch.save({**saved, CONTRACT_KEY: {**saved[CONTRACT_KEY], "input_spec": recorded.with_calendar_start(None).to_dict()}}, old)
    torch.save({**saved, CONTRACT_KEY: {**saved[CONTRACT_KEY], "input_spec": recorded.to_dict()}}, checkpoint)
    common = ["--input", *(p for s in later for p in s.paths), "--device", "cpu", "--no-progress", "--tracking-uri",
              f"sqlite:///{tmp_path / 'mlflow.db'}"]
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(checkpoint), "--output", str(tmp_path / "new"), *common]) == 0
    assert "composite calendar" not in capsys.readouterr().err
    assert main(["predict", "--checkpoint", str(old), "--output", str(tmp_path / "old"), *common]) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "composite calendar" in line]
    assert len(warned) == 1 and "ingest the store again and fit" in warned[0], err
