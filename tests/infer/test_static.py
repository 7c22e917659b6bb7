"""`eoscale predict --static`: a checkpoint trained on a store with a DEM's layers (`ingest --static`) maps scenes
with the same layers added, into valid COGs; without --static it is refused in one line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.bands import SENTINEL2_NAMES
from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.synth import synthesize
from tests.checkpoints import TABLE, TILE

STATIC = ("ELEVATION", "SLOPE", "ASPECT")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("static") / "set", scenes=1, size=(96, 128), seed=4,
                      sensors=("s2", "dem"))


@pytest.fixture(scope="module")
def static_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint whose contract lists Sentinel-2's bands and the static layers, as a fit on such a store writes."""
    from eoscale.train.task import SegmentationTask

    bands = (*SENTINEL2_NAMES, *STATIC)
    task = SegmentationTask(backbone="test_resnet", decoder_channels=8, in_chans=len(bands), num_classes=len(TABLE),
                            img_size=TILE, init_seed=0)
    torch.manual_seed(0)
    network = task.configure_models()
    mean = tuple([1500.0] * len(SENTINEL2_NAMES) + [11000.0, 300.0, 18000.0])
    std = tuple([1000.0] * len(SENTINEL2_NAMES) + [200.0, 200.0, 10000.0])
    contract = BandContract(bands, mean, std, TILE, tuple(TABLE.to_records()), sensor="sentinel-2")
    path = tmp_path_factory.mktemp("ckpt") / "static.ckpt"
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


def test_predict_adds_the_static_layers_and_writes_valid_cogs(place, static_checkpoint, tmp_path):
    dem = str(place.dem_items[0].with_suffix(".tif"))
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(static_checkpoint), "--input", str(place.scene_paths[0]),
                 "--static", dem, "--output", str(out), "--device", "cpu", "--no-progress"]) == 0
    landcover = out / f"{place.scene_paths[0].stem}_landcover.tif"
    with rasterio.open(landcover) as src, rasterio.open(place.scene_paths[0]) as scene:
        assert (src.width, src.height, src.crs) == (scene.width, scene.height, scene.crs)
    valid, errors, _ = cog_validate(str(landcover))
    assert valid and not errors


def test_a_checkpoint_with_static_layers_needs_the_dem(place, static_checkpoint, tmp_path, capsys):
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(static_checkpoint), "--input", str(place.scene_paths[0]),
                 "--output", str(out), "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "trained with static layers ELEVATION, SLOPE, ASPECT" in err and "--static" in err
    assert len(err.splitlines()) == 1 and not (out.exists() and list(out.glob("*.tif")))


def test_static_for_a_checkpoint_without_them_is_refused(place, checkpoint, tmp_path, capsys):
    dem = str(place.dem_items[0].with_suffix(".tif"))
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(place.scene_paths[0]), "--static", dem,
                 "--output", str(tmp_path / "maps"), "--device", "cpu", "--no-progress"]) == 2
    assert "trained without static layers: leave out --static" in capsys.readouterr().err
