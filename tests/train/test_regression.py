"""Per-pixel regression end to end: scenes and synthetic tree heights ingested (`--targets`), the loader's
"target" batches, `RegressionTask` fitted a few steps, and `predict` writing a valid float COG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
import zarr

from eoscale.cli import main
from eoscale.contract import TARGET_TAG, read_contract
from eoscale.data.augment import _turned
from eoscale.data.datamodule import TileDataModule
from eoscale.errors import InputError
from eoscale.infer.outputs import VALUES_NODATA
from eoscale.store import schema
from eoscale.train.tasks.regression import MaskedRegressionLoss, RegressionTask
from tests.heights import write_heights
from tests.rasters import CLASSES_CSV, write_labels, write_scene

RUN = ["--trainer.max_steps", "4", "--trainer.val_check_interval", "2", "--trainer.num_sanity_val_steps", "0",
       "--trainer.enable_progress_bar", "false", "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
       "--model.init_args.decoder_channels", "16"]


@pytest.fixture(scope="module")
def heights_store(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("regression")
    scene = folder / "scene.tif"
    classes = write_scene(scene, height=160, width=192, seed=1)
    write_labels(folder / "labels.tif", scene, classes)
    write_heights(folder / "heights.tif", scene)
    (folder / "classes.csv").write_text(CLASSES_CSV)
    store = folder / "tiles.zarr"
    code = main(["ingest", "--scenes", str(scene), "--labels", str(folder / "labels.tif"), "--classes",
                 str(folder / "classes.csv"), "--targets", str(folder / "heights.tif"), "--target-name", "tree_height",
                 "--target-units", "m", "--output", str(store), "--tile-size", "32", "--workers", "1",
                 "--split-block", "1", "--split", "0.6,0.2,0.2", "-q"])
    assert code == 0
    return scene, store


def test_the_loader_yields_float_targets_turned_with_the_image(heights_store):
    _, store = heights_store
    dm = TileDataModule(store, target="values", batch_size=4, num_workers=0, augment=True)
    dm.setup("fit")
    assert dm.target_info["name"] == "tree_height" and dm.target_info["units"] == "m"
    batch = next(iter(dm.train_dataloader()))
    assert "label" not in batch and batch["target"].dtype == torch.float32 and batch["target"].shape == (4, 32, 32)
    out = dm.normalise(batch)
    # the image's nodata pixels (0 in every band) are NaN in the target, after the same turn
    missing = (out["image"] == 0).all(dim=1)
    assert torch.isnan(out["target"][missing]).all()
    assert torch.isfinite(out["target"][~missing]).float().mean() > 0.9
    # the turn: the target still follows the class pattern of the image (trees tall)
    b02 = out["image"][:, 0]
    keep = ~missing & torch.isfinite(out["target"])
    tall = b02[keep] < b02[keep].median()
    assert out["target"][keep][tall].mean() > out["target"][keep][~tall].mean()
    # and exactly: every tile's target is the stored one under the tile's own turn (a target left unturned, or turned
    # another way than its image, fails here; the mean above can hold by chance)
    stored = zarr.open_group(str(store), mode="r")[schema.TARGETS][:]
    turns = set()
    with dm.train_dataloader() as loader:
        for batch in loader:
            out = dm.normalise(batch)
            missing = (out["image"] == 0).all(dim=1).numpy()
            for i, (tile, turn) in enumerate(zip(batch["tile"].tolist(), batch["turn"].tolist(), strict=True)):
                turns.add(turn)
                expected = np.where(missing[i], np.nan, _turned(stored[tile], turn))
                np.testing.assert_array_equal(out["target"][i].numpy(), expected)
    assert len(turns - {0}) >= 2  # the epoch's tiles were turned, several ways


def test_a_classes_store_refuses_values_in_one_line(tmp_path):
    from tests.stores import make_store

    dm = TileDataModule(make_store(tmp_path / "s"), target="values", num_workers=0)
    with pytest.raises(InputError, match="--targets"):
        dm.setup("fit")


def test_the_loss_counts_only_pixels_with_a_target():
    target = torch.tensor([[1.0, float("nan")], [3.0, float("nan")]])
    pred = torch.tensor([[2.0, 100.0], [3.0, -50.0]])
    assert MaskedRegressionLoss("mse")(pred, target).item() == pytest.approx(0.5)
    assert MaskedRegressionLoss("huber")(pred, target).item() == pytest.approx(0.25)
    assert MaskedRegressionLoss("mse")(pred, torch.full_like(target, float("nan"))).item() == 0.0
    with pytest.raises(InputError, match="loss='ce' is not one of 'mse', 'huber'"):  # not some other refusal
        RegressionTask(loss="ce")


def test_fit_then_predict_writes_a_valid_float_cog(heights_store, tmp_path, monkeypatch):
    from rio_cogeo.cogeo import cog_validate

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    scene, store = heights_store
    root = tmp_path / "fit"
    code = main(["fit", "--config", "configs/regression_smoke.yaml", "--data.init_args.store", str(store),
                 "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"), *RUN])
    assert code == 0
    checkpoint = root / "checkpoints" / "last.ckpt"
    contract = read_contract(checkpoint)
    assert contract.target == "values" and contract.output_channels() == 1
    assert contract.target_info["name"] == "tree_height" and contract.target_info["std"] > 0
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(scene), "--output", str(out)]) == 0
    tif = out / "scene_values.tif"
    valid, errors, _ = cog_validate(str(tif))
    assert valid, errors
    with rasterio.open(tif) as src:
        assert src.dtypes[0] == "float32" and src.nodata == VALUES_NODATA and src.tags()[TARGET_TAG] == "values"
        values = src.read(1)
    with rasterio.open(scene) as src:
        has_data = src.read(1) != 0
    assert np.isfinite(values).all() and (values[~has_data] == VALUES_NODATA).all()
    assert (values[has_data] != VALUES_NODATA).all()
    summary = json.loads((out / "scene_values_summary.json").read_text())
    assert summary["valid_pixels"] == int(has_data.sum()) and summary["units"] == "m"
    assert summary["min"] <= summary["percentiles"]["p50"] <= summary["max"]
    assert summary["mean"] == pytest.approx(float(values[has_data].mean()), rel=1e-3, abs=1e-3)
    assert (out / "scene_values_quicklook.png").stat().st_size > 0
    item = json.loads((out / "scene_values_item.json").read_text())
    assert item["assets"]["values"]["raster:bands"][0]["nodata"] == VALUES_NODATA
