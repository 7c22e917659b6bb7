"""`eoscale serve` of a regression checkpoint (target kind "values") and `eoscale predict --server` against it: the
served model answers values (float32, `[B, 1, T, T]`) instead of class probabilities, the value map made over the
server equals the local one, and class outputs or --confidence asked of it are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from eoscale.contract import TARGET_TAG
from eoscale.infer.remote import RemoteNetwork
from tests.serve.conftest import start_server, stop_server
from tests.train.test_regression import RUN, heights_store  # noqa: F401  (the fixture)


@pytest.fixture(scope="module")
def values_server(heights_store, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("values-fit")
    _, store = heights_store
    assert main(["fit", "--config", "configs/regression_smoke.yaml", "--data.init_args.store", str(store),
                 "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"),
                 "--trainer.logger", "false", *RUN]) == 0
    started = start_server(root / "checkpoints" / "last.ckpt", root / "serve.log")
    yield started
    stop_server(started)


def test_predict_over_the_server_writes_the_local_value_map(values_server, heights_store, tmp_path, capsys):  # noqa: F811
    scene, _ = heights_store
    remote, local = tmp_path / "remote", tmp_path / "local"
    tracking = ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main(["predict", "--server", values_server.http, "--input", str(scene), "--output", str(remote),
                 "--no-progress", *tracking]) == 0
    assert main(["predict", "--checkpoint", str(values_server.checkpoint), "--input", str(scene), "--output",
                 str(local), "--no-progress", *tracking]) == 0
    name = f"{scene.stem}_values.tif"
    with rasterio.open(remote / name) as there, rasterio.open(local / name) as here:
        assert there.dtypes[0] == "float32" and there.tags()[TARGET_TAG] == "values"
        a, b = there.read(1), here.read(1)
    assert np.array_equal(a == there.nodata, b == here.nodata)
    np.testing.assert_allclose(a, b, atol=1e-4)
    # a regression model has no classes: --confidence (and class areas) refused in one line, nothing written
    capsys.readouterr()
    assert main(["predict", "--server", values_server.http, "--input", str(scene), "--output", str(tmp_path / "c"),
                 "--confidence", "--no-progress", *tracking]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "maps values" in err, err
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").glob("*.tif"))


def test_the_served_values_model_has_one_float_output(values_server):
    import tritonclient.http as client
    from tritonclient.utils import InferenceServerException

    network = RemoteNetwork(values_server.http, "landcover", output="values")
    config = network.config()
    assert [o["name"] for o in config["output"]] == ["values"]
    bands = len(config["input"][0]["dims"]) and config["input"][0]["dims"][0]
    windows = np.full((2, int(bands), 32, 32), 1500, np.uint16)
    values = network(windows, np.ones((2, 32, 32), np.uint8))
    assert values.shape == (2, 1, 32, 32) and values.dtype == np.float32 and np.isfinite(values).all()
    # class outputs do not exist for it: Triton refuses the request, naming the output
    raw = client.InferenceServerClient(url=values_server.http.removeprefix("http://"))
    pixels = client.InferInput("windows", list(windows.shape), "UINT16")
    pixels.set_data_from_numpy(windows)
    with pytest.raises(InferenceServerException, match="class"):
        raw.infer("landcover", [pixels], outputs=[client.InferRequestedOutput("class")])
    network.close()
