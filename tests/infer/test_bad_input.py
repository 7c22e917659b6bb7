"""Bad input to `eoscale predict` is one line on stderr and exit code 2, and leaves no output behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eoscale.bands import SENTINEL2_NAMES
from eoscale.cli import main
from tests.rasters import damaged_copy, write_scene


def _fails(capsys, args: list[str], *expected: str) -> str:
    code = main(["predict", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("eoscale predict: error: "), err
    for text in expected:
        assert text in err[0], err[0]
    return err[0]


def _args(checkpoint, scene, out) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--input", str(scene), "--output", str(out), "--no-progress"]


def test_scene_missing_a_band(checkpoint, tmp_path, capsys):
    scene = tmp_path / "nine.tif"
    write_scene(scene, height=40, width=50, band_names=[b for b in SENTINEL2_NAMES if b != "B8A"])
    _fails(capsys, _args(checkpoint, scene, tmp_path / "out"), "scene 'nine'", "has no band B8A", str(scene))
    assert not (tmp_path / "out").exists()


def test_scene_bands_in_another_order_are_matched_by_name(checkpoint, scene, tmp_path):
    import numpy as np
    import rasterio

    from eoscale.infer.run import PredictConfig, predict
    from tests.rasters import read_map

    shuffled = tmp_path / "shuffled.tif"
    with rasterio.open(scene) as src:
        profile, pixels = src.profile, src.read()
    with rasterio.open(shuffled, "w", **profile) as dst:
        dst.write(pixels[::-1])
        for i, name in enumerate(reversed(SENTINEL2_NAMES)):
            dst.set_band_description(i + 1, name)
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene), str(shuffled)], output=str(tmp_path),
                          progress=False))
    np.testing.assert_array_equal(read_map(tmp_path / "odd_landcover.tif"), read_map(tmp_path / "shuffled_landcover.tif"))


def test_scene_without_crs(checkpoint, tmp_path, capsys):
    scene = tmp_path / "nocrs.tif"
    write_scene(scene, height=40, width=50, crs=None)
    line = _fails(capsys, _args(checkpoint, scene, tmp_path / "out"), str(scene), "has no CRS",
                  f"gdal_edit.py -a_srs EPSG:<code> {scene}")
    assert "ingest" not in line  # the hint fits predict as well as ingest


def test_checkpoint_that_does_not_exist(scene, tmp_path, capsys):
    _fails(capsys, _args(tmp_path / "nope.ckpt", scene, tmp_path / "out"), "no checkpoint at", "nope.ckpt")


def test_run_folder_without_checkpoints(scene, tmp_path, capsys):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    _fails(capsys, _args(tmp_path / "run", scene, tmp_path / "out"), "no checkpoint in", "run", "a run's folder")
    assert not (tmp_path / "out").exists()


def test_file_that_is_not_a_checkpoint(scene, tmp_path, capsys):
    bad = tmp_path / "notes.ckpt"
    bad.write_text("not a checkpoint")
    _fails(capsys, _args(bad, scene, tmp_path / "out"), "cannot read checkpoint", "notes.ckpt")


def test_checkpoint_without_band_contract(checkpoint, scene, tmp_path, capsys):
    saved = torch.load(checkpoint, weights_only=True)
    del saved["eoscale"]
    torch.save(saved, tmp_path / "plain.ckpt")
    _fails(capsys, _args(tmp_path / "plain.ckpt", scene, tmp_path / "out"), "has no band contract")


def test_checkpoint_that_does_not_fit_its_backbone(checkpoint, scene, tmp_path, capsys):
    saved = torch.load(checkpoint, weights_only=True)
    saved["hyper_parameters"]["backbone"] = "resnet10t"
    torch.save(saved, tmp_path / "misfit.ckpt")
    _fails(capsys, _args(tmp_path / "misfit.ckpt", scene, tmp_path / "out"), "does not fit backbone 'resnet10t'")


def test_adapter_that_does_not_exist(checkpoint, scene, tmp_path, capsys):
    _fails(capsys, [*_args(checkpoint, scene, tmp_path / "out"), "--adapter", "alps"], "no adapter 'alps'",
           str(Path(checkpoint).resolve().parent / "adapters"), "found: none")


def test_output_that_exists(checkpoint, scene, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "odd_landcover.tif").write_bytes(b"finished earlier")
    _fails(capsys, _args(checkpoint, scene, out), "odd_landcover.tif' exists", "--overwrite")
    assert (out / "odd_landcover.tif").read_bytes() == b"finished earlier"


@pytest.mark.parametrize("option,value,expected", [
    ("--overlap", "1.0", "--overlap 1.0"), ("--batch-size", "0", "--batch-size 0"), ("--window", "0", "window=0"),
    ("--devices", "0", "--devices 0"), ("--column-tile", "0", "--column-tile 0"), ("--readers", "0", "--readers 0"),
])
def test_bad_options(checkpoint, scene, tmp_path, capsys, option, value, expected):
    _fails(capsys, [*_args(checkpoint, scene, tmp_path / "out"), option, value], expected)


def test_store_that_does_not_exist(checkpoint, tmp_path, capsys):
    _fails(capsys, ["--checkpoint", str(checkpoint), "--store", str(tmp_path / "tiles.zarr"), "--output",
                    str(tmp_path / "out")], "no tile store at")


def test_damaged_scene_read_by_three_threads(checkpoint, scene, tmp_path, capsys):
    """A reading thread's error reaches the user as the one line a single reader gives, and nothing is left."""
    out = tmp_path / "out"
    _fails(capsys, [*_args(checkpoint, damaged_copy(scene, tmp_path), out), "--readers", "3"],
           "damaged.tif' could not be read")
    assert not list(out.glob("damaged_*"))


@pytest.mark.slow
def test_damaged_scene_in_a_spawned_process(checkpoint, scene, tmp_path, capsys):
    """A user error in one of `--devices 2` processes stops the run with that error, in one line."""
    _fails(capsys, [*_args(checkpoint, damaged_copy(scene, tmp_path), tmp_path / "out"), "--devices", "2"],
           "damaged.tif' could not be read")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_checkpoint_with_a_band_of_std_0_is_refused_naming_it(scene, tmp_path, capsys):
    """Guards issue 46 item 4: a checkpoint trained on a store from before ingest refused a band without valid pixels
    carries std 0 for it, which predict clamped to 1e-6: that band scaled by 1,000,000."""
    from eoscale.contract import CONTRACT_KEY
    from tests.checkpoints import make_checkpoint

    path = make_checkpoint(tmp_path / "old.ckpt")
    saved = torch.load(path, weights_only=True)
    saved[CONTRACT_KEY]["std"][4] = 0.0
    torch.save(saved, path)
    _fails(capsys, _args(path, scene, tmp_path / "out"), f"checkpoint {str(path)!r} gives band {SENTINEL2_NAMES[4]} a "
           "std of 0", f"ingest again without band {SENTINEL2_NAMES[4]}")
    assert not (tmp_path / "out").exists()
