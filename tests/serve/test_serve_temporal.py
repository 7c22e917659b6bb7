"""`eoscale serve` of a season model (U-TAE of 3 dates): it takes the windows of every date (`[B, 3 * C, T, T]`, as
`eoscale predict --server` reads a stack) and their `dates`, prepares them as the loader and predict do (each date's
gaps, sent at nodata, read as absent), and answers what the local model answers on predict's own windows. Before
issue 47 serve refused any temporal model. A request without its dates, or of one date, is refused."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
import torch

from eoscale.bands import SENTINEL2_NAMES
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.infer.predict import read_strip
from eoscale.infer.stacked import for_stack
from eoscale.infer.windows import WindowGrid
from eoscale.models.checkpoint import load_network
from eoscale.raster.sources import open_scene
from eoscale.raster.stack import open_reader, stack_scenes
from eoscale.synth import synthesize
from tests.checkpoints import MEAN, STD, TABLE
from tests.serve.conftest import raw_request, start_server, stop_server

TILE = 32
STEPS = 3


def season_checkpoint(path):
    """A U-TAE of 3 dates as `fit` writes it (its weights as initialised: a valid network of a season)."""
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    task = TemporalSegmentationTask("utae", backbone="test_resnet", decoder_channels=8, in_chans=len(SENTINEL2_NAMES),
                                    num_classes=len(TABLE), img_size=TILE, backbone_kwargs={"n_head": 4, "d_model": 32})
    torch.manual_seed(0)
    network = task.configure_models()
    contract = BandContract(tuple(SENTINEL2_NAMES), MEAN, STD, TILE, tuple(TABLE.to_records()), time_steps=STEPS)
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


@pytest.fixture(scope="module")
def season_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("season-serve")
    made = synthesize(root / "set", scenes=1, size=64, seed=5, dates=STEPS, layout="multiband")
    started = start_server(season_checkpoint(root / "season.ckpt"), root / "serve.log")
    yield started, made
    stop_server(started)


def _request(server, windows, valid=None, dates=None):
    return raw_request(server, windows=windows, valid=valid, dates=dates)


@pytest.mark.slow  # a Triton server (about 15 s to start)
def test_a_served_season_model_answers_what_predict_computes_on_its_windows(season_server):
    from tritonclient.utils import InferenceServerException

    server, made = season_server
    scenes = [open_scene(str(p)) for p in sorted(made.out_dir.glob("scenes/*/*.tif"))]
    (stack,) = stack_scenes(scenes, STEPS, require="any")
    assert len(stack.steps) == STEPS
    trained = load_network(server.checkpoint)
    grid = WindowGrid.make(stack.height, stack.width, window=TILE, overlap=0.0)
    days = np.array([(d - dt.date(1970, 1, 1)).days for d in stack.dates], np.int32)
    network = for_stack(trained.network.eval(), stack.dates)  # predict's temporal model of the stack's dates
    gaps = 0
    with open_reader(stack) as reader:
        for row in range(grid.rows.count):
            raw = read_strip(reader, grid, row, spec=None)  # what `eoscale predict --server` sends
            local = read_strip(reader, grid, row, spec=trained.contract.spec())
            windows = raw.windows.numpy().astype(np.uint16)
            valid = np.stack([raw.valid[:, k * TILE:(k + 1) * TILE] for k in range(grid.cols.count)]).astype(np.uint8)
            served = _request(server, windows, valid, np.broadcast_to(days, (len(windows), STEPS)).copy())
            with torch.inference_mode():
                expected = trained.contract.activate(network(local.windows)).numpy()
            np.testing.assert_allclose(served, expected, atol=1e-5)
            by_date = local.windows.numpy().reshape(len(windows), STEPS, -1, TILE, TILE)
            gaps += int((by_date == 0).all(axis=2).sum())
    assert gaps  # a date's clouds among the windows: sent at nodata, read as absent by both
    with pytest.raises(InferenceServerException, match="dates"):
        _request(server, windows[:1], valid[:1])  # a temporal model needs its dates
    with pytest.raises(InferenceServerException):
        _request(server, windows[:1, : len(SENTINEL2_NAMES)], valid[:1], days[None, :1].copy())  # one date of three


@pytest.mark.slow  # the same server
def test_predict_of_a_season_over_the_server_writes_the_local_map(season_server, tmp_path):
    """`eoscale predict --server` sends a stack's dates with its windows; before, a served season model was refused."""
    import rasterio

    from eoscale.cli import main

    server, made = season_server
    inputs = ["--input", *map(str, sorted(made.out_dir.glob("scenes/*/*.tif")))]
    common = ["--window", str(TILE), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main(["predict", "--server", server.http, *inputs, "--output", str(tmp_path / "remote"), *common]) == 0
    assert main(["predict", "--checkpoint", str(server.checkpoint), *inputs, "--output", str(tmp_path / "local"),
                 *common]) == 0
    (there,) = (tmp_path / "remote").glob("*_landcover.tif")
    with rasterio.open(there) as a, rasterio.open(tmp_path / "local" / there.name) as b:
        remote, local = a.read(1), b.read(1)
    assert (remote == local).mean() > 0.999  # probabilities equal to 1e-5: a tie may fall the other way
