"""`eoscale predict --static`: a checkpoint trained on a store with a DEM's layers (`ingest --static`) maps scenes
with the same layers added, into valid COGs, one from before the aspect's sine and cosine with the aspect in degrees;
without --static it is refused in one line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.bands import SENTINEL2_NAMES
from eoscale.catalog.digest import CHANGED, OK, file_sha256
from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.raster.dem import static_layers, to_store_values
from eoscale.raster.sources import open_scene
from eoscale.raster.static import predict_static_layers
from eoscale.sensors.copdem import STORE_SCALE
from eoscale.synth import synthesize
from tests.checkpoints import TABLE, TILE

STATIC = ("ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS")
OLDER = ("ELEVATION", "SLOPE", "ASPECT")  # a checkpoint trained on a store from before: the aspect in degrees


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("static") / "set", scenes=1, size=(96, 128), seed=4,
                      sensors=("s2", "dem"))


def _checkpoint(path: Path, static: tuple[str, ...]) -> Path:
    """A checkpoint whose contract lists Sentinel-2's bands and `static`, as a fit on such a store writes."""
    from eoscale.train.tasks.segmentation import SegmentationTask

    bands = (*SENTINEL2_NAMES, *static)
    task = SegmentationTask(backbone="test_resnet", decoder_channels=8, in_chans=len(bands), num_classes=len(TABLE),
                            img_size=TILE, init_seed=0)
    torch.manual_seed(0)
    network = task.configure_models()
    layer_mean = {"ELEVATION": 11000.0, "SLOPE": 300.0, "ASPECT": 18000.0, "ASPECT_SIN": 20000.0, "ASPECT_COS": 20000.0}
    layer_std = {"ELEVATION": 200.0, "SLOPE": 200.0, "ASPECT": 10000.0, "ASPECT_SIN": 7000.0, "ASPECT_COS": 7000.0}
    mean = tuple([1500.0] * len(SENTINEL2_NAMES) + [layer_mean[n] for n in static])
    std = tuple([1000.0] * len(SENTINEL2_NAMES) + [layer_std[n] for n in static])
    contract = BandContract(bands, mean, std, TILE, tuple(TABLE.to_records()), sensor="sentinel-2")
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


@pytest.fixture(scope="module")
def static_checkpoint(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("ckpt") / "static.ckpt", STATIC)


@pytest.fixture(scope="module")
def older_checkpoint(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("ckpt") / "older.ckpt", OLDER)


@pytest.mark.parametrize("which", ["static_checkpoint", "older_checkpoint"])
def test_predict_adds_the_static_layers_and_writes_valid_cogs(place, which, request, tmp_path):
    static_checkpoint = request.getfixturevalue(which)
    dem = str(place.dem_items[0].with_suffix(".tif"))
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(static_checkpoint), "--input", str(place.scene_paths[0]),
                 "--static", dem, "--output", str(out), "--device", "cpu", "--no-progress"]) == 0
    landcover = out / f"{place.scene_paths[0].stem}_landcover.tif"
    with rasterio.open(landcover) as src, rasterio.open(place.scene_paths[0]) as scene:
        assert (src.width, src.height, src.crs) == (scene.width, scene.height, scene.crs)
    valid, errors, _ = cog_validate(str(landcover))
    assert valid and not errors
    # the DEM is an input of the map as its scene is: in its lineage, checked by `eoscale lineage` (it was not listed)
    with rasterio.open(landcover) as src:
        lineage = json.loads(src.tags()["EOSCALE_LINEAGE"])
    assert [(Path(r["path"]).resolve(), r["sha256"]) for r in lineage["static"]] == [
        (Path(dem).resolve(), file_sha256(Path(dem)))]
    assert _links(landcover)["static layers' DEM"] == OK
    # the DEM's values reach the network: 500 m higher ground gives another map (layers of the right names but of
    # any values, zeros included, passed the checks above)
    higher = tmp_path / "higher.tif"
    with rasterio.open(dem) as src:
        profile, heights = src.profile, src.read(1)
    with rasterio.open(higher, "w", **profile) as dst:
        dst.write(np.where(heights == src.nodata, heights, heights + 500), 1)
    assert main(["predict", "--checkpoint", str(static_checkpoint), "--input", str(place.scene_paths[0]),
                 "--static", str(higher), "--output", str(tmp_path / "higher"), "--device", "cpu", "--no-progress"]) == 0
    with rasterio.open(landcover) as a, rasterio.open(tmp_path / "higher" / landcover.name) as b:
        assert (a.read(1) != b.read(1)).any()
    with rasterio.open(higher, "r+") as dst:  # the DEM changes after the map was made from it
        dst.write(np.where(heights == dst.nodata, heights, heights + 501), 1)
    assert _links(tmp_path / "higher" / landcover.name)["static layers' DEM"] == CHANGED


def _links(map_path: Path) -> dict[str, str]:
    from eoscale.maps.lineage import trace

    return {link.kind: link.status for link in trace(map_path).links}


def test_a_checkpoint_with_static_layers_needs_the_dem(place, static_checkpoint, tmp_path, capsys):
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(static_checkpoint), "--input", str(place.scene_paths[0]),
                 "--output", str(out), "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "trained with static layers ELEVATION, SLOPE, ASPECT_SIN, ASPECT_COS" in err and "--static" in err
    assert len(err.splitlines()) == 1 and not (out.exists() and list(out.glob("*.tif")))


def test_static_for_a_checkpoint_without_them_is_refused(place, checkpoint, tmp_path, capsys):
    dem = str(place.dem_items[0].with_suffix(".tif"))
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(place.scene_paths[0]), "--static", dem,
                 "--output", str(tmp_path / "maps"), "--device", "cpu", "--no-progress"]) == 2
    assert "trained without static layers: leave out --static" in capsys.readouterr().err


def test_an_older_checkpoints_aspect_is_computed_in_degrees(place):
    # guards the compatibility half of issue 46 item 5 (passes on the old code too, by design): with the aspect stored
    # as sine and cosine, a checkpoint trained on a store from before still gets the band it was trained with, ASPECT
    # in degrees on its old store scale, computed as before
    dem = str(place.dem_items[0].with_suffix(".tif"))
    (scene,) = predict_static_layers([open_scene(str(place.scene_paths[0]))], [dem], list(OLDER))
    assert scene.band_names[-3:] == list(OLDER)
    band = scene.bands[-1]
    with rasterio.open(band.path) as src:
        stored = src.read(band.index)
    expected = static_layers(dem, crs=scene.crs, transform=scene.transform, width=scene.width, height=scene.height,
                             layers=("ASPECT",)).layers["ASPECT"]
    np.testing.assert_array_equal(stored, to_store_values(expected, *STORE_SCALE["ASPECT"][:2]))
    assert stored.max() <= 36000 and np.ptp(stored) > 9000  # degrees at 0.01°, facing several ways
