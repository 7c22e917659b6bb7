"""`eoscale predict` with a change checkpoint: each place's two dated scenes stacked, a change COG written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.bands import SENTINEL2_NAMES
from eoscale.catalog.digest import file_sha256
from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene
from eoscale.raster.stack import SceneStack, StackReader, stack_scenes
from eoscale.synth import synthesize
from eoscale.synth.change import CHANGE_TABLE

TILE = 32


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    return synthesize(tmp_path_factory.mktemp("pairs") / "set", scenes=2, size=96, seed=5, change=True).out_dir


def change_checkpoint(path: Path) -> Path:
    from eoscale.train.tasks.change import ChangeTask

    task = ChangeTask(backbone="test_resnet", decoder_channels=8, in_chans=len(SENTINEL2_NAMES),
                      num_classes=len(CHANGE_TABLE), img_size=TILE)
    task.hparams.task = "change"
    network = task.configure_models()
    contract = BandContract(tuple(SENTINEL2_NAMES), tuple(1500.0 for _ in SENTINEL2_NAMES),
                            tuple(1000.0 for _ in SENTINEL2_NAMES), TILE, tuple(CHANGE_TABLE.to_records()),
                            target="change", time_steps=2)
    torch.save({"epoch": 0, "global_step": 1, "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


def test_a_change_checkpoint_maps_each_place_from_its_two_dates(pairs, tmp_path):
    ckpt = change_checkpoint(tmp_path / "change.ckpt")
    scenes = pairs / "scenes"
    inputs = ["--input", str(scenes / "scene_000_after.tif"), str(scenes / "scene_000.tif"),
              str(scenes / "scene_001.tif"), str(scenes / "scene_001_after.tif")]
    assert main(["predict", "--checkpoint", str(ckpt), *inputs, "--output", str(tmp_path / "maps"),
                 "--window", str(TILE), "--no-progress"]) == 0
    for sid in ("scene_000", "scene_001"):  # named after the first date's scene, on its grid
        path = tmp_path / "maps" / f"{sid}_change.tif"
        assert cog_validate(str(path), quiet=True)[0]
        with rasterio.open(path) as out, rasterio.open(scenes / f"{sid}.tif") as first:
            assert (out.crs, out.transform, out.shape) == (first.crs, first.transform, first.shape)
            assert set(np.unique(out.read(1))) <= set(CHANGE_TABLE.codes) | {out.nodata}
            assert out.descriptions[0] == "change class code"
        assert not (tmp_path / "maps" / f"{sid}_after_change.tif").exists()
    item = json.loads((tmp_path / "maps" / "scene_000_item.json").read_text())
    assert item["id"] == "scene_000_change" and "landcover" not in item["assets"]
    assert item["assets"]["change"]["href"].endswith("scene_000_change.tif")
    assert item["assets"]["change"]["file:checksum"].endswith(file_sha256(tmp_path / "maps" / "scene_000_change.tif"))
    # lineage finds the map's asset of a change map's Item, and the Item beside the map
    assert main(["lineage", str(tmp_path / "maps" / "scene_000_change.tif"), "--json"]) == 0

    # the order scenes are given in does not matter: each place's dates are sorted by their metadata
    again = ["--input", str(scenes / "scene_00[0]*.tif")]  # a glob, as users give them
    assert main(["predict", "--checkpoint", str(ckpt), *again, "--output", str(tmp_path / "again"),
                 "--window", str(TILE), "--no-progress"]) == 0
    with rasterio.open(tmp_path / "maps" / "scene_000_change.tif") as a, \
            rasterio.open(tmp_path / "again" / "scene_000_change.tif") as b:
        np.testing.assert_array_equal(a.read(), b.read())


def test_a_place_without_both_dates_is_refused_in_one_line(pairs, tmp_path, capsys):
    ckpt = change_checkpoint(tmp_path / "change.ckpt")
    code = main(["predict", "--checkpoint", str(ckpt), "--input", str(pairs / "scenes" / "scene_000.tif"),
                 "--output", str(tmp_path / "maps"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "1 date(s), and the model maps 2 dates at a time" in err
    assert not (tmp_path / "maps").exists() or not any((tmp_path / "maps").iterdir())


def test_scenes_without_dates_or_of_one_date_cannot_be_stacked(pairs, tmp_path):
    from eoscale.errors import InputError

    undated = tmp_path / "undated.tif"
    shutil.copy(pairs / "scenes" / "scene_000_after.tif", undated)
    with rasterio.open(undated, "r+") as dst:  # the same pixels, its date tag emptied
        dst.update_tags(ACQUISITIONDATETIME="")
    first = open_scene(str(pairs / "scenes" / "scene_000.tif"))
    with pytest.raises(InputError, match="states no acquisition date in its metadata"):
        stack_scenes([first, open_scene(str(undated))], 2)
    with pytest.raises(InputError, match="share a date"):
        stack_scenes([first, first], 2)


def test_the_stack_reader_says_where_each_date_holds_data(pairs, tmp_path):
    first = open_scene(str(pairs / "scenes" / "scene_000.tif"))
    second = open_scene(str(pairs / "scenes" / "scene_000_after.tif"))
    (stack,) = stack_scenes([second, first], 2)
    assert isinstance(stack, SceneStack) and stack.dates == [first.date, second.date]
    assert len(stack.bands) == 2 * len(first.bands) and stack.transform == first.transform
    # a copy of the second date with a hole of nodata
    holed = tmp_path / "holed.tif"
    shutil.copy(pairs / "scenes" / "scene_000_after.tif", holed)
    with rasterio.open(holed, "r+") as dst:
        data = dst.read()
        data[:, 10:20, 30:50] = 0
        dst.write(data)
    for require, expect_valid in (("all", False), ("any", True)):
        (stack,) = stack_scenes([first, open_scene(str(holed))], 2, require=require)
        with StackReader(stack) as reader:
            block = reader.read_masked(0, 0, 32, 64)
        assert block.pixels.shape == (2 * len(first.bands), 32, 64)
        with SceneReader(first) as alone, SceneReader(second) as other:
            own, theirs = alone.read_masked(0, 0, 32, 64).valid, other.read_masked(0, 0, 32, 64).valid
        np.testing.assert_array_equal(block.date_valid[0], own)  # each date its own validity
        assert not block.date_valid[1, 10:20, 30:50].any()
        assert np.array_equal(block.date_valid[1, :10], theirs[:10])
        both, either = own & block.date_valid[1], own | block.date_valid[1]
        np.testing.assert_array_equal(block.valid, both if require == "all" else either)
        # the first date holds data in the hole, so 'all' and 'any' differ there ("or not own[hole].any()" let a
        # hole over the first date's nodata pass either way)
        assert own[10:20, 30:50].all()
        assert (block.valid[10:20, 30:50] == own[10:20, 30:50]).all() == expect_valid
