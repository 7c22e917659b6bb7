"""`eoscale serve` of a change checkpoint (two dates) and `eoscale predict --server` against it: the served model takes
both dates' bands (`[B, 2 * C, T, T]`), and the change map made over the server equals the local one."""

from __future__ import annotations

import pytest
import rasterio

from eoscale.cli import main
from eoscale.synth import synthesize
from tests.infer.test_change_predict import TILE, change_checkpoint
from tests.serve.conftest import start_server, stop_server


@pytest.fixture(scope="module")
def change_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("change-serve")
    pairs = synthesize(root / "pairs", scenes=1, size=96, seed=6, change=True).out_dir
    started = start_server(change_checkpoint(root / "change.ckpt"), root / "serve.log")
    yield started, pairs
    stop_server(started)


@pytest.mark.slow  # a Triton server (about 10 s to start)
def test_predict_of_a_pair_over_the_server_writes_the_local_change_map(change_server, tmp_path):
    server, pairs = change_server
    inputs = ["--input", str(pairs / "scenes" / "scene_000*.tif")]
    common = ["--window", str(TILE), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main(["predict", "--server", server.http, *inputs, "--output", str(tmp_path / "remote"), *common]) == 0
    assert main(["predict", "--checkpoint", str(server.checkpoint), *inputs, "--output", str(tmp_path / "local"),
                 *common]) == 0
    with rasterio.open(tmp_path / "remote" / "scene_000_change.tif") as there, \
            rasterio.open(tmp_path / "local" / "scene_000_change.tif") as here:
        a, b = there.read(1), here.read(1)
        assert there.descriptions[0] == "change class code"
    assert (a == b).mean() > 0.999  # probabilities equal to 1e-4: a tie may fall the other way
