"""`eoscale serve` and `eoscale predict --server` against a real Triton server (the session's `server` fixture)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from eoscale.cli import main
from eoscale.infer.model import load_model
from eoscale.infer.predict import predict_blocks
from eoscale.infer.remote import RemoteNetwork, connect_model
from eoscale.infer.run import PredictConfig, predict
from eoscale.infer.windows import WindowGrid
from eoscale.raster.sources import open_scene
from eoscale.serve.landcover import ServedModel
from tests.rasters import read_map


def local_served(checkpoint, adapter=None) -> ServedModel:
    """What the server computes, computed here: the same normalisation and network, in this process."""
    model = load_model(checkpoint, adapter=adapter)
    return ServedModel("local", model.network, model.contract, {})


def test_predict_over_the_server_equals_local_predict(server, served_scene, tmp_path, capsys):
    remote = tmp_path / "remote"
    assert main(["predict", "--server", server.http, "--input", str(served_scene), "--output", str(remote),
                 "--confidence", "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    predict(PredictConfig(checkpoint=str(server.checkpoint), inputs=[str(served_scene)], output=str(tmp_path / "local"),
                          confidence=True, progress=False))
    for name in ("served_landcover.tif", "served_confidence.tif"):
        there, here = read_map(remote / name), read_map(tmp_path / "local" / name)
        assert np.array_equal(there, here), name
    assert "MLflow run" in capsys.readouterr().out


def test_blended_probabilities_over_grpc_with_an_adapter_equal_local(server, served_scene):
    remote = connect_model(server.grpc, "landcover-alps")
    local = load_model(server.checkpoint, adapter="alps")
    assert remote.contract == local.contract and remote.adapter == "alps"
    scene = local.scene_bands(open_scene(str(served_scene)))
    grid = WindowGrid.make(scene.height, scene.width, window=32, overlap=0.25)
    there = torch.cat([b.probs for b in predict_blocks(remote.network, scene, grid, contract=remote.contract,
                                                       batch_size=5)], 1)
    here = torch.cat([b.probs for b in predict_blocks(local.network, scene, grid, contract=local.contract,
                                                      batch_size=5)], 1)
    assert there.shape == here.shape
    assert (there - here).abs().max().item() < 1e-4
    assert torch.equal(there.argmax(0), here.argmax(0))
    remote.network.close()


def test_eight_concurrent_clients_get_the_local_answers(server):
    reference = {"landcover": local_served(server.checkpoint), "landcover-alps": local_served(server.checkpoint, "alps")}
    rng = np.random.default_rng(0)
    work = []  # (client, model, [(windows, valid)]): 8 clients, 4 requests each of 1..6 windows
    for client in range(8):
        model = "landcover-alps" if client % 4 == 3 else "landcover"
        batches = []
        for _ in range(4):
            n = int(rng.integers(1, 7))
            windows = rng.integers(1, 5000, (n, 10, 32, 32)).astype(np.float32)
            valid = rng.random((n, 32, 32)) > 0.1
            batches.append((windows, valid))
        work.append((client, model, batches))
    answers: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def run(client: int, model: str, batches) -> None:
        try:
            network = RemoteNetwork(server.http if client % 2 else server.grpc, model, in_flight=2)
            futures = [network.submit(w, v) for w, v in batches]
            answers[client] = [f.result() for f in futures]
            network.close()
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=item) for item in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for client, model, batches in work:
        for (windows, valid), got in zip(batches, answers[client], strict=True):
            served = reference[model]
            want = served.probabilities(served.normalise(windows.astype(np.uint16), valid)).numpy()
            assert got.shape == want.shape
            assert np.abs(got - want).max() < 1e-4


def test_bad_requests_are_refused_and_the_server_keeps_serving(server):
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException

    client = http.InferenceServerClient(server.http.removeprefix("http://"))

    def send(array: np.ndarray, dtype: str, model: str = "landcover") -> str:
        pixels = http.InferInput("windows", list(array.shape), dtype)
        pixels.set_data_from_numpy(array, binary_data=True)
        with pytest.raises(InferenceServerException) as refused:
            client.infer(model, [pixels])
        return refused.value.message()

    bands = send(np.zeros((1, 9, 32, 32), np.uint16), "UINT16")
    assert "[-1,10,32,32]" in bands.replace(" ", "")  # what was expected: 10 bands of 32 × 32
    dtype = send(np.zeros((1, 10, 32, 32), np.float32), "FP32")
    assert "UINT16" in dtype
    tile = send(np.zeros((1, 10, 16, 16), np.uint16), "UINT16")
    assert "[-1,10,32,32]" in tile.replace(" ", "")
    unknown = send(np.zeros((1, 10, 32, 32), np.uint16), "UINT16", model="landcover-nowhere")
    assert "landcover-nowhere" in unknown
    with pytest.raises(FileNotFoundError, match="it serves: landcover, landcover-alps"):
        RemoteNetwork(server.http, "landcover-nowhere").config()
    # the server still answers, and correctly
    good = http.InferInput("windows", [2, 10, 32, 32], "UINT16")
    windows = np.full((2, 10, 32, 32), 2500, np.uint16)
    good.set_data_from_numpy(windows, binary_data=True)
    result = client.infer("landcover", [good])
    assert result.as_numpy("probabilities").dtype == np.float16
    classes, confidence = result.as_numpy("class"), result.as_numpy("confidence")
    assert classes.shape == (2, 32, 32) and set(np.unique(classes)) <= {10, 30, 40, 80}
    want = local_served(server.checkpoint).probabilities(local_served(server.checkpoint).normalise(windows, None))
    assert np.abs(result.as_numpy("probabilities_fp32") - want.numpy()).max() < 1e-4
    assert np.abs(confidence.astype(np.float32) - want.max(1).values.numpy()).max() < 1e-3
    assert client.is_server_ready() and client.is_model_ready("landcover-alps")
    client.close()


def test_the_model_config_carries_the_band_contract(server):
    from eoscale.contract import read_contract
    from eoscale.infer.remote import describe

    network = RemoteNetwork(server.http, "landcover")
    served = describe(network)
    network.close()
    assert served.contract == read_contract(server.checkpoint).to_dict()
    assert served.about["checkpoint"]["path"] == str(server.checkpoint.resolve())
    assert served.about["backbone"] == "test_vit"


def test_predict_server_errors_are_one_line(tmp_path, served_scene, capsys):
    assert main(["predict", "--server", "http://127.0.0.1:9", "--input", str(served_scene),
                 "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no Triton server answers at http://127.0.0.1:9" in err
    assert main(["predict", "--input", str(served_scene), "--output", str(tmp_path / "o")]) == 2
    assert "give --checkpoint" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(tmp_path / "missing.ckpt"), "--http-port", "70000"]) == 2
    assert "--http-port 70000" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(tmp_path / "missing.ckpt")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
