"""`eoscale serve` of a model of two sensors (Sentinel-2 and Sentinel-1) takes `--missing-sensor` as `eoscale predict`
does (`eoscale.inputs.missing`): a raw request whose windows hold no radar data at all is refused in one line naming
the fixes (inside Triton's own error text), and the server keeps serving; the same request with `missing_sensor` 1 is answered. `eoscale predict
--server`, which applies its own `--missing-sensor` to whole scenes and says so in its requests, maps a place of both
sensors, and with dropout a place without radar, as local predict does (its requests say its scenes were checked:
without that, the server refused the dropout place's requests)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from tests.checkpoints import TABLE
from tests.infer.test_fused import fused_checkpoint, place  # noqa: F401  (the fixtures)
from tests.serve.conftest import raw_request, start_server, stop_server


@pytest.fixture(scope="module")
def fused_server(fused_checkpoint, tmp_path_factory):  # noqa: F811
    started = start_server(fused_checkpoint, tmp_path_factory.mktemp("fused-serve") / "serve.log")
    yield started
    stop_server(started)


def _infer(server, windows: np.ndarray, missing_sensor: np.ndarray | None = None) -> np.ndarray:
    return raw_request(server, windows=windows, missing_sensor=missing_sensor)


@pytest.mark.slow  # a Triton server (about 15 s to start)
def test_a_request_without_radar_is_refused_in_one_line_unless_it_asks_for_dropout(fused_server):
    from tritonclient.utils import InferenceServerException

    windows = np.full((2, 12, 32, 32), 2500, np.uint16)
    windows[:, 10:] = 0  # the radar's bands at nodata in every window
    with pytest.raises(InferenceServerException) as refused:
        _infer(fused_server, windows)
    # Triton wraps the model's refusal in its own lines (PyTriton's traceback): the refusal itself is one of them
    lines = [line for line in refused.value.message().splitlines() if "has no sentinel-1 data" in line]
    assert lines, refused.value.message()
    for line in lines:
        assert "VV, VH" in line and "eoscale serve --missing-sensor dropout" in line and "'missing_sensor' 1" in line
    answered = _infer(fused_server, windows, np.ones((2, 1), np.uint8))
    assert answered.shape == (2, len(TABLE), 32, 32) and np.allclose(answered.sum(axis=1), 1, atol=1e-5)
    windows[:, 10:] = 9000  # both sensors: answered as before
    assert _infer(fused_server, windows).shape == (2, len(TABLE), 32, 32)


@pytest.mark.slow  # the same server
def test_predict_over_the_server_maps_both_sensors_and_dropout_as_local_predict(fused_server, place, tmp_path):  # noqa: F811
    optical, radar = str(place.scene_paths[0]), str(place.sar_items[0].parent)
    common = ["--window", "32", "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    for name, inputs, extra in (("both", [optical, radar], []), ("dropout", [optical], ["--missing-sensor", "dropout"])):
        remote, local = tmp_path / name / "remote", tmp_path / name / "local"
        assert main(["predict", "--server", fused_server.http, "--input", *inputs, "--output", str(remote), *extra,
                     *common]) == 0
        assert main(["predict", "--checkpoint", str(fused_server.checkpoint), "--device", "cpu", "--input", *inputs,
                     "--output", str(local), *extra, *common]) == 0
        (there,) = remote.glob("*_landcover.tif")
        with rasterio.open(there) as a, rasterio.open(local / there.name) as b:
            assert (a.read(1) == b.read(1)).mean() > 0.999  # probabilities equal to 1e-4: a tie may fall the other way
