"""A change model end to end: synthetic pairs -> a store of two dates a place -> fit -> a change map -> its accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.cli import main as eoscale_main
from eoscale.synth import synthesize
from eoscale.synth.change import CHANGE_TABLE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pairs_store(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("change")
    data = synthesize(root / "pairs", scenes=3, size=192, seed=4, change=True).out_dir
    assert eoscale_main(["ingest", "--time-series", "--group-by", "grid",
                         "--scenes", str(data / "scenes" / "scene_00[01]*.tif"),
                         "--labels", str(data / "labels" / "scene_00[01]_change.tif"),
                         "--classes", str(data / "change_classes.csv"), "--output", str(root / "pairs.zarr"),
                         "--tile-size", "32", "--quiet"]) == 0
    return data, root / "pairs.zarr"


def test_a_single_date_store_is_refused_by_the_change_task(store, tmp_path, capsys):
    code = eoscale_main(["fit", "--config", str(ROOT / "configs" / "change_resnet18.yaml"), "--data.init_args.store",
                         str(store), "--trainer.max_steps", "1", "--trainer.logger", "false",
                         "--trainer.default_root_dir", str(tmp_path)])
    assert code == 2
    assert "ChangeTask maps the change between 2 dates" in capsys.readouterr().err


@pytest.mark.slow
def test_fit_a_change_model_and_map_a_held_out_pair(pairs_store, tmp_path, monkeypatch):
    data, store = pairs_store
    monkeypatch.chdir(tmp_path)
    assert eoscale_main(["fit", "--config", str(ROOT / "configs" / "change_resnet18.yaml"), "--data.init_args.store",
                         str(store), "--trainer.max_steps", "8", "--trainer.val_check_interval", "4",
                         "--model.init_args.backbone", "test_resnet", "--model.init_args.decoder_channels", "16",
                         "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
                         "--trainer.default_root_dir", str(tmp_path / "run"),
                         "--trainer.logger.init_args.tracking_uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    (last,) = tmp_path.glob("run/*/*/checkpoints/last.ckpt")
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["eoscale"]["target"] == "change" and checkpoint["eoscale"]["time_steps"] == 2
    assert checkpoint["eoscale_model"]["args"]["task"] == "change"
    assert [c["name"] for c in checkpoint["eoscale"]["classes"]] == CHANGE_TABLE.names

    # the third place was not ingested: its two dates make one change map
    assert eoscale_main(["predict", "--checkpoint", str(last), "--input", str(data / "scenes" / "scene_002*.tif"),
                         "--output", str(tmp_path / "maps"), "--no-progress"]) == 0
    change_map = tmp_path / "maps" / "scene_002_change.tif"
    assert cog_validate(str(change_map), quiet=True)[0]
    with rasterio.open(change_map) as src:
        codes = set(np.unique(src.read(1))) - {src.nodata}
    assert codes and codes <= set(CHANGE_TABLE.codes)
    areas = json.loads((tmp_path / "maps" / "scene_002_areas.json").read_text())
    assert {c["name"] for c in areas["classes"]} <= set(CHANGE_TABLE.names)

    # and its accuracy against the pair's change labels, as any class map's
    assert eoscale_main(["assess", str(change_map), "--reference", str(data / "labels" / "scene_002_change.tif"),
                         "--output", str(tmp_path / "assessment"), "--no-tracking"]) == 0
    # a census of the change classes against the pair's change raster ('any file in the folder' held for a report of
    # any classes, or of none)
    report = json.loads((tmp_path / "assessment" / "assessment.json").read_text())
    names = [c["name"] for c in report["classes"]]
    assert report["kind"] == "census" and names and set(names) <= set(CHANGE_TABLE.names)
    assert sum(map(sum, report["error_matrix"]["counts"])) > 0 and 0 <= report["overall_accuracy"]["estimate"] <= 1
