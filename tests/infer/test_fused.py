"""`eoscale predict` of a checkpoint of several sensors (its contract's `sensors`): Sentinel-2 scenes with the
Sentinel-1 scenes that cover them, warped onto their grids as ingest does (`eoscale.raster.fused`), into valid COGs;
each sensor's channels read 0 where that sensor has no data, so the map has classes wherever either sensor sees the
ground; a missing sensor refused in one line naming both fixes, or read as 0 with `--missing-sensor dropout`; a
checkpoint given a sensor it was not trained with refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.bands import SENTINEL2_NAMES
from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.infer.predict import read_strip
from eoscale.infer.windows import WindowGrid
from eoscale.inputs.spec import infer
from eoscale.raster.fused import predict_other_sensors
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene
from eoscale.sensors.groups import parse_groups
from eoscale.synth import synthesize
from tests.checkpoints import TABLE, TILE, make_checkpoint

RADAR = ("VV", "VH")
SENSORS = ({"name": "sentinel-2", "bands": list(SENTINEL2_NAMES)}, {"name": "sentinel-1", "bands": list(RADAR)})


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("fused") / "set", scenes=1, size=(96, 128), seed=4,
                      sensors=("s2", "s1"))


@pytest.fixture(scope="module")
def fused_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint whose contract lists Sentinel-2's and Sentinel-1's bands as two sensors, as a fit on a store of
    both writes (a plain network over every band: a valid network of several sensors)."""
    from eoscale.train.tasks.segmentation import SegmentationTask

    bands = (*SENTINEL2_NAMES, *RADAR)
    task = SegmentationTask(backbone="test_resnet", decoder_channels=8, in_chans=len(bands), num_classes=len(TABLE),
                            img_size=TILE, init_seed=0)
    torch.manual_seed(0)
    network = task.configure_models()
    mean = tuple([1500.0] * len(SENTINEL2_NAMES) + [9000.0, 8400.0])
    std = tuple([1000.0] * len(SENTINEL2_NAMES) + [400.0, 400.0])
    contract = BandContract(bands, mean, std, TILE, tuple(TABLE.to_records()), sensor="sentinel-2", sensors=SENSORS)
    path = tmp_path_factory.mktemp("ckpt") / "fused.ckpt"
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
                "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path


def _predict(checkpoint, out, *inputs, extra=()):
    return main(["predict", "--checkpoint", str(checkpoint), "--input", *map(str, inputs), "--output", str(out),
                 "--device", "cpu", "--no-progress", *extra])


def _map(out: Path, place) -> np.ndarray:
    path = out / f"{place.scene_paths[0].stem}_landcover.tif"
    valid, errors, _ = cog_validate(str(path))
    assert valid and not errors
    with rasterio.open(path) as src:
        return src.read(1, masked=True)


def test_both_sensors_map_where_either_sees_and_dropout_where_only_the_optical_does(place, fused_checkpoint, tmp_path):
    radar = place.sar_items[0].parent
    assert _predict(fused_checkpoint, tmp_path / "both", place.scene_paths[0], radar) == 0
    assert _predict(fused_checkpoint, tmp_path / "dropout", place.scene_paths[0],
                    extra=("--missing-sensor", "dropout")) == 0
    both, dropout = _map(tmp_path / "both", place), _map(tmp_path / "dropout", place)
    with rasterio.open(place.scene_paths[0]) as src:
        optical = src.read_masks(1) > 0
    # with radar the map has classes under the optical swath's gap where the radar sees; without, only where optics do
    assert not optical.all() and (~dropout.mask == optical).all()
    assert (~both.mask).sum() > optical.sum()
    assert not (both.mask & optical).any()


def test_each_sensor_reads_zero_where_it_has_no_data(place):
    groups = parse_groups(SENSORS, (*SENTINEL2_NAMES, *RADAR))
    scenes = [open_scene(str(place.scene_paths[0])), open_scene(str(place.sar_items[0].parent))]
    (fused,) = predict_other_sensors(scenes, groups)
    (dropped,) = predict_other_sensors(scenes[:1], groups, missing="dropout")
    assert [f["sensor"] for f in fused.fused] == ["sentinel-1"] and fused.fused[0]["orbit_state"] == "ascending"
    assert dropped.fused[0]["missing"]
    spec = infer(bands=(*SENTINEL2_NAMES, *RADAR), sensor="sentinel-2", record=SENSORS, steps=1, tile_size=32,
                 nodata=0).with_statistics([0.0] * 12, [1.0] * 12)  # the values as read
    grid = WindowGrid.make(fused.height, fused.width, window=32, overlap=0.0)  # 3 × 4 windows tiling the scene
    with SceneReader(fused) as reader, SceneReader(dropped) as without:
        block = reader.read_masked(0, 0, fused.height, fused.width)
        optical_missing, radar_missing = (missing for _, missing in block.groups())
        assert (optical_missing & ~radar_missing).any() and (radar_missing & ~optical_missing).any()
        seen = np.zeros((12, fused.height, fused.width), np.float32)
        for row in range(grid.rows.count):
            strip = read_strip(reader, grid, row, spec=spec)
            plain = read_strip(without, grid, row, spec=spec).windows.numpy()
            assert (plain[:, 10:] == 0).all()  # dropout: the radar channels all 0, the optical ones as with radar
            np.testing.assert_array_equal(plain[:, :10], strip.windows.numpy()[:, :10])
            for k, window in enumerate(strip.windows.numpy()):
                seen[:, row * 32:(row + 1) * 32, k * 32:(k + 1) * 32] = window
    raw = block.pixels.astype(np.float32)
    # each sensor's channels are 0 exactly where it has no data, its values elsewhere (valid values are at least 1)
    np.testing.assert_array_equal(seen[:10], np.where(optical_missing, 0, raw[:10]))
    np.testing.assert_array_equal(seen[10:], np.where(radar_missing, 0, raw[10:]))
    assert (seen[10:, optical_missing & ~radar_missing] > 0).all()


def test_a_missing_sensor_is_refused_in_one_line_naming_both_fixes(place, fused_checkpoint, tmp_path, capsys):
    out = tmp_path / "refused"
    assert _predict(fused_checkpoint, out, place.scene_paths[0]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sentinel-1" in err and "--missing-sensor dropout" in err, err
    assert "--scenes or --stac" in err and not out.exists()


def test_a_checkpoint_given_a_sensor_it_was_not_trained_with_is_refused(place, tmp_path, capsys):
    checkpoint = make_checkpoint(tmp_path / "s2.ckpt")
    out = tmp_path / "refused"
    assert _predict(checkpoint, out, place.scene_paths[0], place.sar_items[0].parent) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sentinel-1" in err and "trained on sentinel-2 alone" in err and "sentinel-1 scenes" in err, err
    assert not out.exists()


def test_a_served_model_zeroes_each_sensor_as_predict_does(place, fused_checkpoint):
    """`eoscale serve` normalises the raw windows `predict --server` sends (each sensor's bands at nodata where it has
    none) to exactly what `predict` computes itself."""
    from eoscale.infer.model import load_model
    from eoscale.serve.landcover import ServedModel

    model = load_model(fused_checkpoint)
    served = ServedModel("local", model.network, model.contract, {})
    scenes = [open_scene(str(place.scene_paths[0])), open_scene(str(place.sar_items[0].parent))]
    (fused,) = predict_other_sensors(scenes, model.contract.sensor_groups())
    grid = WindowGrid.make(fused.height, fused.width, window=32, overlap=0.0)
    blanked = 0
    with SceneReader(fused) as reader:
        for row in range(grid.rows.count):
            local = read_strip(reader, grid, row, spec=model.contract.spec())
            raw = read_strip(reader, grid, row, spec=None)
            valid = np.stack([raw.valid[:, k * 32:(k + 1) * 32] for k in range(grid.cols.count)])
            np.testing.assert_array_equal(served.normalise(raw.windows.numpy().astype(np.uint16), valid),
                                          local.windows.numpy())
            blanked += int((local.windows.numpy()[:, :10] == 0).all(axis=1).sum())
    assert blanked  # some pixels had no optical data: the optical channels were zeroed there


class _Request:
    """What PyTriton hands a served model's callable: the request's inputs by name, and the outputs it asks for."""

    def __init__(self, data: dict) -> None:
        self.data, self.requested_output_names = data, ["probabilities_fp32"]


def test_a_served_model_refuses_a_request_without_a_sensor_unless_dropout(place, fused_checkpoint):
    """`eoscale serve --missing-sensor` is predict's rule (`eoscale.inputs.missing`), a request standing for predict's
    place: a request whose windows hold no data of one of the model's sensors is refused in one line naming the sensor
    and the fixes (guards: serve zeroed the missing sensor silently, refuse or not), and answers as predict's dropout
    with `--missing-sensor dropout` or the request's `missing_sensor` 1; a sensor with data in any window is no missing
    sensor."""
    from pytriton.exceptions import PyTritonBadParameterError

    from eoscale.infer.model import load_model
    from eoscale.serve.landcover import ServedModel

    model = load_model(fused_checkpoint)
    refuse = ServedModel("local", model.network, model.contract, {})
    dropout = ServedModel("local", model.network, model.contract, {}, missing="dropout")
    scenes = [open_scene(str(place.scene_paths[0])), open_scene(str(place.sar_items[0].parent))]
    (fused,) = predict_other_sensors(scenes, model.contract.sensor_groups())
    (alone,) = predict_other_sensors(scenes[:1], model.contract.sensor_groups(), missing="dropout")
    grid = WindowGrid.make(fused.height, fused.width, window=32, overlap=0.0)

    def request(scene: Path, **extra) -> dict:
        with SceneReader(scene) as reader:
            raw = read_strip(reader, grid, 1, spec=None)  # what `predict --server` sends of a strip
        valid = np.stack([raw.valid[:, k * 32:(k + 1) * 32] for k in range(grid.cols.count)]).astype(np.uint8)
        return {"windows": raw.windows.numpy().astype(np.uint16), "valid": valid, **extra}

    optical = request(alone)  # the radar's bands at nodata in every window
    with pytest.raises(PyTritonBadParameterError) as refused:
        refuse([_Request(optical)])
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and "has no sentinel-1 data" in message and "VV, VH" in message, message
    assert "eoscale serve --missing-sensor dropout" in message and "'missing_sensor' 1" in message
    expected = dropout.probabilities(dropout.normalise(optical["windows"], optical["valid"])).numpy()
    (answer,) = dropout([_Request(optical)])
    np.testing.assert_array_equal(answer["probabilities_fp32"], expected)
    (answer,) = refuse([_Request({**optical, "missing_sensor": np.ones((len(optical["windows"]), 1), np.uint8)})])
    np.testing.assert_array_equal(answer["probabilities_fp32"], expected)
    with pytest.raises(PyTritonBadParameterError, match="has no sentinel-1 data"):  # 0: the request asks for refuse
        dropout([_Request({**optical, "missing_sensor": np.zeros((len(optical["windows"]), 1), np.uint8)})])

    both = request(fused)
    assert len(refuse([_Request(both)])) == 1  # both sensors: answered
    radar_held = (both["windows"][:, 10:] != 0).any(axis=1).sum(axis=(1, 2))
    k = int(radar_held.argmax())
    assert radar_held[k] > 0
    mixed = {name: optical[name].copy() for name in ("windows", "valid")}
    for name in mixed:
        mixed[name][k] = both[name][k]
    assert len(refuse([_Request(mixed)])) == 1  # radar in one window only: a gap elsewhere, not a missing sensor
    radar_only = {**both, "windows": both["windows"].copy()}
    radar_only["windows"][:, :10] = 0
    with pytest.raises(PyTritonBadParameterError, match="has no sentinel-2 data"):
        refuse([_Request(radar_only)])


def test_serve_takes_missing_sensor_as_predict_does(fused_checkpoint):
    import argparse

    from eoscale.errors import InputError
    from eoscale.serve.command import configure
    from eoscale.serve.server import ServeOptions, check_options, load_models

    parser = argparse.ArgumentParser()
    configure(parser)
    assert parser.parse_args(["--checkpoint", "x.ckpt"]).missing_sensor == "refuse"
    assert parser.parse_args(["--checkpoint", "x.ckpt", "--missing-sensor", "dropout"]).missing_sensor == "dropout"
    with pytest.raises(InputError, match="choose one of refuse, dropout"):
        check_options(ServeOptions(checkpoint="x.ckpt", missing_sensor="sometimes"))
    (served,) = load_models(ServeOptions(checkpoint=str(fused_checkpoint), device="cpu", missing_sensor="dropout"),
                            fused_checkpoint)
    assert served.missing == "dropout"
    assert "missing_sensor" in [t.name for t in served.tensors()[0]]


def test_a_place_seen_only_by_radar_maps_with_dropout_and_is_refused_without(place, fused_checkpoint, tmp_path,
                                                                             capsys):
    """A cloudy season: no Sentinel-2 scene of the place at all. With `--missing-sensor dropout` each radar scene is
    mapped on its own grid, the optical channels 0 everywhere (as a dropped sensor), the radar's as read; without it,
    one line naming the option (guards: predict refused every radar-only place, dropout or not)."""
    radar = place.sar_items[0].parent
    out = tmp_path / "refused"
    assert _predict(fused_checkpoint, out, radar) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--missing-sensor dropout" in err and "has no sentinel-2 data" in err, err
    assert not out.exists()

    assert _predict(fused_checkpoint, tmp_path / "radar", radar, extra=("--missing-sensor", "dropout")) == 0
    s1 = open_scene(str(radar))
    path = tmp_path / "radar" / f"{s1.id}_landcover.tif"
    assert cog_validate(str(path), quiet=True)[0]
    with SceneReader(s1) as reader:
        seen = reader.read_masked(0, 0, s1.height, s1.width).valid
    with rasterio.open(path) as src:
        assert (src.crs, src.transform, src.shape) == (s1.crs, s1.transform, (s1.height, s1.width))
        mapped = src.read(1, masked=True)
    assert seen.any() and (~mapped.mask == seen).all()  # classes wherever the radar sees, and only there

    groups = parse_groups(SENSORS, (*SENTINEL2_NAMES, *RADAR))
    (alone,) = predict_other_sensors([s1], groups, missing="dropout")
    assert alone.id == s1.id and alone.sensor == "sentinel-2" and alone.fused[0]["scene"] == s1.id
    spec = infer(bands=(*SENTINEL2_NAMES, *RADAR), sensor="sentinel-2", record=SENSORS, steps=1, tile_size=32,
                 nodata=0).with_statistics((0.0,) * 12, (1.0,) * 12)  # the values as read
    grid = WindowGrid.make(alone.height, alone.width, window=32, overlap=0.0)
    with SceneReader(alone) as reader, SceneReader(s1) as own:
        raw = own.read_masked(0, 0, s1.height, s1.width)
        for row in range(grid.rows.count):
            windows = read_strip(reader, grid, row, spec=spec).windows.numpy()
            assert (windows[:, :10] == 0).all()  # the optical channels: absent everywhere
            for k, window in enumerate(windows):
                ys, xs = slice(row * 32, (row + 1) * 32), slice(k * 32, (k + 1) * 32)
                want = np.where(raw.valid[ys, xs], raw.pixels[:, ys, xs], 0)
                np.testing.assert_array_equal(window[10:], want)


def test_radar_scenes_over_other_places_are_left_out_and_named(fused_checkpoint, tmp_path, capsys):
    """A place's optical scene and the folder of every radar pass of the region (as a season's predict takes them):
    the pass over the other place is left out and named once, the map made of the place's own scenes (guards: the
    whole run was refused unless --missing-sensor dropout, which maps the other pass as a place of its own)."""
    import json

    region = synthesize(tmp_path / "region", scenes=2, size=(96, 128), seed=4, sensors=("s2", "s1"))
    passes = sorted({item.parent for item in region.sar_items})
    assert len(passes) == 2
    out = tmp_path / "maps"
    assert _predict(fused_checkpoint, out, region.scene_paths[0], *passes) == 0
    printed = capsys.readouterr()
    (line,) = [ln for ln in (printed.out + printed.err).splitlines() if "left out" in ln]
    assert "left out 1 scene(s) that overlap none of the sentinel-2 scenes given" in line
    assert sorted(p.name for p in out.glob("*_landcover.tif")) == [f"{region.scene_paths[0].stem}_landcover.tif"]
    with rasterio.open(out / f"{region.scene_paths[0].stem}_landcover.tif") as src:
        read = {Path(r["path"]).parent for r in json.loads(src.tags()["EOSCALE_LINEAGE"])["scenes"]}
    (used,) = [p for p in passes if p in read]  # one pass read; the other named as left out, and only it
    (other,) = [p for p in passes if p != used]
    assert other.name in line and used.name not in line
