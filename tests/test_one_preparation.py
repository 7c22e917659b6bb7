"""One preparation (issue 47): the same window, prepared by the loader (`TileDataModule.normalise` of the compact
batch ingest wrote), by predict's reader (`read_strip` of the raw scenes ingest read, with the contract's statistics)
and by serve (`ServedModel` of the raw uint16 window `eoscale predict --server` sends, its `valid` and its dates), is
the same tensor bit for bit: for a single date, a season, a store of two sensors and a season of two sensors with a
DEM; so are the dates and which dates a window holds.

What it guards (each found disagreeing before the one preparation): serve refused a season model outright and had
no dates input; serve zeroed a sensor's group where its bands were 0, not the contract's nodata; serve took a
date's cloudy pixels as data (the raw window carried no per-date validity) where the loader and predict zeroed them.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from eoscale.cli import main
from eoscale.contract import BandContract
from eoscale.data.datamodule import TileDataModule
from eoscale.infer.predict import read_strip
from eoscale.infer.windows import WindowGrid
from eoscale.inputs.spec import SPEC_KEY, InputSpec
from eoscale.raster.fused import predict_other_sensors
from eoscale.raster.fused_season import season_steps
from eoscale.raster.sources import open_scene, select_scene_bands
from eoscale.raster.stack import SceneStack, open_reader, stack_scenes
from eoscale.raster.static import predict_static_layers, static_bands
from eoscale.serve.landcover import ServedModel
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize

TILE = 32
SIZE = 64


def _ingest(out: Path, *inputs: str, labels, classes, extra=()) -> str:
    assert main(["ingest", *inputs, "--labels", *map(str, labels), "--classes", str(classes), "--output", str(out),
                 "--tile-size", str(TILE), "--workers", "1", "-q", "--min-valid", "0.05", *extra]) == 0
    return str(out)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-single")
    made = synthesize(root / "set", scenes=1, size=SIZE, seed=3, nodata_fraction=0.3)
    store = _ingest(root / "s.zarr", "--scenes", str(made.scene_paths[0]), labels=made.label_paths,
                    classes=made.class_table_path)
    return store, lambda contract: [open_scene(str(made.scene_paths[0]), bands=list(contract.bands))]


@pytest.fixture(scope="module")
def season(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-season")
    assert main(["synth", str(root / "set"), "--layout", "safe", "--dates", "4", "--scenes", "1", "--size", str(SIZE),
                 "--seed", "5"]) == 0
    scenes = sorted(str(p) for p in (root / "set" / "scenes").glob("*/*"))  # one place's dated products
    store = _ingest(root / "s.zarr", "--scenes", *scenes, "--time-series",
                    labels=sorted((root / "set" / "labels").glob("*.tif")), classes=root / "set" / "classes.csv")
    return store, lambda contract: stack_scenes([open_scene(p, bands=list(contract.bands)) for p in scenes],
                                                contract.time_steps, require="any")


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-fused")
    made = synthesize(root / "set", scenes=1, size=SIZE, seed=4, sensors=("s2", "s1"), layout="cog")
    store = _ingest(root / "s.zarr", "--stac", str(made.item_paths[0]), str(made.sar_items[0]),
                    labels=made.label_paths, classes=made.class_table_path)

    def scenes(contract):
        opened = [open_scene(str(made.item_paths[0])), open_scene(str(made.sar_items[0].parent))]
        return predict_other_sensors(opened, contract.sensor_groups())

    return store, scenes


@pytest.fixture(scope="module")
def fused_season(tmp_path_factory):
    """A place's season of Sentinel-2 and Sentinel-1 (each on its own dates) and its DEM, as ingest composes them
    (`--time-series --static`) and as predict opens the raw scenes (`eoscale.infer.run.prepare`'s steps)."""
    root = tmp_path_factory.mktemp("one-fused-season")
    made = root / "set"
    assert main(["synth", str(made), "--dates", "4", "--scenes", "1", "--size", str(SIZE), "--sensors", "s2,s1,dem",
                 "--seed", "6"]) == 0
    manifest = json.loads((made / "manifest.json").read_text())
    optical = [str(made / s["image"]) for s in manifest["scenes"]]
    radar = [str(made / p["folder"]) for p in manifest["sentinel1"]]
    dem = str(made / manifest["dems"][0]["file"])
    store = _ingest(root / "s.zarr", "--scenes", *optical, *radar, "--time-series", "--static", dem,
                    labels=[made / manifest["scenes"][0]["labels"]], classes=made / "classes.csv")

    def scenes(contract):
        opened = [open_scene(p) for p in optical + radar]
        opened = season_steps(opened, contract.sensor_groups(), contract.time_steps)
        opened = predict_static_layers(opened, [dem], static_bands(contract.bands))
        return stack_scenes([select_scene_bands(s, list(contract.bands)) for s in opened], contract.time_steps,
                            require="any")

    return store, scenes


CASES = ["single", "season", "fused", "fused_season"]


def _served(contract: BandContract) -> ServedModel:
    """Serve's preparation of `contract`'s model (the network takes no part in it)."""
    return ServedModel("one", nn.Conv2d(1, 1, 1), contract, {})


@pytest.mark.parametrize("case", CASES)
def test_the_loader_predict_and_serve_prepare_a_window_bit_for_bit_alike(case, request):
    store, open_scenes = request.getfixturevalue(case)
    dm = TileDataModule(store, batch_size=1, num_workers=0, augment=False, shared_memory=False)
    contract = BandContract.from_datamodule(dm)
    data = open_store(store).load()
    (scene,) = open_scenes(contract)
    assert len(data.attrs[schema.ATTR_SCENES]) == 1  # every tile is of `scene`
    steps = contract.time_steps
    assert (steps > 1) == ("season" in case) and (len(contract.sensor_groups()) > 1) == ("fused" in case)
    # ingest recorded the spec (without statistics: the store's own attribute) and fit's contract carries it whole
    recorded = InputSpec.from_dict(data.attrs[SPEC_KEY])
    assert recorded.time_steps == steps and recorded.groups() == contract.sensor_groups() and not recorded.mean
    assert contract.spec() == InputSpec.from_store_attrs(data.attrs) == dm.input_spec
    grid = WindowGrid.make(scene.height, scene.width, window=TILE, overlap=0.0)
    served = _served(contract)
    compared = blanked = 0
    with open_reader(scene) as reader:
        for tile in range(data.sizes["tile"]):
            row, col = int(data[schema.ROW_OFF][tile]), int(data[schema.COL_OFF][tile])
            assert row % TILE == 0 and col % TILE == 0  # the tile is a window of the prediction grid
            # the loader: the compact batch as the stream gives it ((B, C, H, W) of one date, (B, T, C, H, W) else)
            images = torch.from_numpy(data[schema.IMAGES].values[tile : tile + 1])
            batch = {"image": images[:, 0] if steps == 1 else images}
            if steps > 1:
                batch["date_valid"] = torch.from_numpy(data[schema.DATE_VALID].values[tile : tile + 1])
                days = data[schema.DATES].values[tile : tile + 1].astype("datetime64[D]").astype(np.int64)
                batch["dates"] = torch.from_numpy(days)
            loaded = dm.normalise(batch)
            loader = loaded["image"][0]
            # predict: the scene's (or stack's) strip of windows, normalised as the contract says
            strip = read_strip(reader, grid, row // TILE, spec=contract.spec())
            predicted = strip.windows[col // TILE]
            # serve: the raw window `predict --server` sends, its validity and (a season) its dates
            raw = read_strip(reader, grid, row // TILE, spec=None)
            window = raw.windows[col // TILE : col // TILE + 1].numpy().astype(np.uint16)
            valid = raw.valid[:, col : col + TILE][None]
            if steps > 1:
                days = np.array([(d - dt.date(1970, 1, 1)).days for d in scene.dates], np.int32)
                served_x, served_dates, served_valid = served.prepare(window, valid, days[None])
                # the dates and which dates the window holds: the same in all three
                assert isinstance(scene, SceneStack)
                assert torch.equal(loaded["dates"][0], torch.from_numpy(days.astype(np.int64)))
                assert torch.equal(served_dates[0], loaded["dates"][0])
                held = loaded["date_valid"][0] > 0
                assert torch.equal(served_valid[0] > 0, held)
                assert torch.equal(loader.flatten(1).ne(0).any(1), held)
            else:
                served_x = served.normalise(window, valid)
            served_x = torch.as_tensor(served_x)[0]
            predicted = predicted.reshape(loader.shape)
            assert torch.equal(loader, predicted), f"tile {tile}: the loader and predict differ"
            assert torch.equal(predicted, served_x.reshape(loader.shape)), f"tile {tile}: predict and serve differ"
            compared += 1
            blanked += int((loader == 0).sum())
    assert compared >= 2 and blanked  # tiles compared, pixels (or a sensor's) without data among them


def test_a_band_selection_holds_only_the_dates_its_own_sensor_observed(fused_season):
    """A model of one sensor's bands of a season of two (`TileDataModule(bands=…)`, as `bench fusion --dates` fits
    the S2 and S1 seasons) is handed as valid only the dates where those bands hold data, which is what predict and
    serve find (`dates_held` of the prepared window). Guards: the loader took the store's `date_valid` (any sensor's
    data), so a radar model was trained on the optical dates as all-zero dates that counted, and an optical one on
    the radar passes, dates predict leaves out."""
    store, _ = fused_season
    groups = [g for g in TileDataModule(store).sensor_groups if g.name != "copdem"]
    data = open_store(store).load()
    images = torch.from_numpy(data[schema.IMAGES].values)
    days = data[schema.DATES].values.astype("datetime64[D]").astype(np.int64)
    padded = 0
    for group in groups:
        dm = TileDataModule(store, batch_size=1, num_workers=0, augment=False, shared_memory=False,
                            bands=list(group.bands))
        picked = [list(data[schema.BAND].values).index(b) for b in group.bands]
        loaded = dm.normalise({"image": images[:, :, picked], "dates": torch.from_numpy(days),
                               "date_valid": torch.from_numpy(data[schema.DATE_VALID].values)})
        held = loaded["date_valid"] > 0
        assert torch.equal(held, loaded["image"].flatten(2).ne(0).any(2)), group.name
        padded += int(((torch.from_numpy(data[schema.DATE_VALID].values) > 0) & ~held).sum())
    assert padded  # dates the store holds that one sensor's bands do not: what the test is about
