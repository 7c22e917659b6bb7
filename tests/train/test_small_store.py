"""A small real-sized scene trains with the default recipe (issue 46, items 6 and 7).

A scene of 250 × 450 px on the Zion scene's grid (Landsat 8, UTM 12N, 30 m; the window whose 64-px tiles 4-tile
blocks dealt all to train: "train 21, val 0, test 0"), exported as float32 reflectance with a class table without
colours, is ingested with the defaults and `--scale 10000`, fitted with `configs/resnet18_seg.yaml` (its batch size
of 32 lowered to the train split's share, said in one line, instead of "batch_size=32 is larger than each rank's
share"), validated on part of it, and its float scene mapped with the same conversion."""

from __future__ import annotations

from pathlib import Path

import pytest
import rasterio
import torch

from eoscale.cli import main
from tests.rasters import write_labels, write_reflectance, write_scene

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "resnet18_seg.yaml")
ORIGIN = (301_905.0 + 600 * 30.0, 4_154_085.0)  # tests/ingest/test_small_scene_split.py's ZION window


@pytest.fixture(autouse=True)
def _small(monkeypatch, one_thread):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.mark.slow
def test_the_default_recipe_trains_and_validates_on_a_small_float_scene(tmp_path: Path, capsys):
    dn = tmp_path / "dn.tif"
    classes = write_scene(dn, height=250, width=450, band_names=["B02", "B03", "B04", "B08"], origin=ORIGIN,
                          crs="EPSG:32612", resolution=30.0)
    scene = tmp_path / "reflectance.tif"
    write_reflectance(dn, scene)
    write_labels(tmp_path / "labels.tif", dn, classes, crs="EPSG:32612", resolution=30.0)
    (tmp_path / "classes.csv").write_text("code,name\n10,Trees\n30,Grass\n40,Crops\n80,Water\n")
    store = tmp_path / "tiles.zarr"
    assert main(["ingest", "--scenes", str(scene), "--labels", str(tmp_path / "labels.tif"), "--classes",
                 str(tmp_path / "classes.csv"), "--output", str(store), "--scale", "10000", "--workers", "1",
                 "-q"]) == 0
    err = capsys.readouterr().err
    assert "(train 17, val 2, test 2)" in err and "blocks of 1 tile(s), not --split-block 4" in err, err

    assert main(["fit", "--config", CONFIG, "--data.init_args.store", str(store), "--data.init_args.num_workers", "0",
                 "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.default_root_dir",
                 str(tmp_path / "fit"), "--trainer.enable_progress_bar", "false", "--trainer.max_steps", "2",
                 "--trainer.val_check_interval", "1"]) == 0
    out = capsys.readouterr().out
    assert ("batch_size=32 is larger than each rank's share of the 'train' split (17 tiles on each of 1 ranks): "
            "lowered to 17 (fit_batch_size)") in out
    best = next((tmp_path / "fit").rglob("epoch*-miou*.ckpt"))  # the best checkpoint: val mIoU was measured
    saved = torch.load(best, weights_only=True)
    assert saved["eoscale"]["input_scale"] == {"scale": 10000.0, "offset": 0.0}
    assert 0 <= float(saved["callbacks"][next(k for k in saved["callbacks"] if "Checkpoint{" in k)][
        "best_model_score"]) <= 1

    assert main(["predict", "--checkpoint", str(best), "--input", str(scene), "--output", str(tmp_path / "maps"),
                 "--no-progress"]) == 0
    with rasterio.open(tmp_path / "maps" / "reflectance_landcover.tif") as src:
        colours = src.colormap(1)  # the default palette's colours, for the classes in the table's order
        assert colours[10][:3] == (0x1f, 0x77, 0xb4) and colours[30][:3] == (0xae, 0xc7, 0xe8)
        assert (src.read(1) != src.nodata).mean() > 0.9
