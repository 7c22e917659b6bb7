"""`eoscale bench fewshot` on a real scene (`--scene`, `--labels`, `--classes`, `--encoder`): the labelled pixels come
from the training rows only and both the head and the forest are scored on every labelled pixel with data below them.
A small seeded scene and an untrained checkpoint stand in for Zion and its pretrained encoder."""

from __future__ import annotations

import json

import numpy as np
import rasterio

from eoscale.cli import main
from tests.checkpoints import make_checkpoint
from tests.rasters import CLASSES_CSV, CODES, write_scene

HEIGHT, WIDTH, TRAIN_ROWS, PER_CLASS = 96, 120, 40, 5
NODATA_BOX = (slice(30, 60), slice(0, 20))  # straddles the split: its pixels count on neither side


def test_bench_fewshot_on_a_scene_draws_north_of_the_split_and_scores_south_of_it(tmp_path, capsys):
    # guards the split of the real-scene bench: labelled pixels drawn from rows above --train-rows only (a class with
    # fewer there gives as many as it has), scored on every labelled pixel with data below (drawing from the test
    # rows, scoring the training rows, or counting nodata pixels would change these counts), 2 seeds recorded with
    # their mean and spread
    scene = tmp_path / "scene.tif"
    classes = write_scene(scene, height=HEIGHT, width=WIDTH, seed=1, nodata_box=NODATA_BOX)
    codes = CODES[classes]
    north_water = np.argwhere(codes[:TRAIN_ROWS] == 80)
    codes[:TRAIN_ROWS][codes[:TRAIN_ROWS] == 80] = 10
    for r, c in north_water[:3]:  # three pixels of water north of the split
        codes[r, c] = 80
    codes[70:75, 100:110] = 0  # unlabelled south of it
    labels = tmp_path / "labels.tif"
    with rasterio.open(scene) as src:
        profile = dict(driver="GTiff", height=HEIGHT, width=WIDTH, count=1, dtype="uint8", nodata=0, crs=src.crs,
                       transform=src.transform)
    with rasterio.open(labels, "w", **profile) as dst:
        dst.write(codes, 1)
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    assert main(["bench", "fewshot", "--scene", str(scene), "--labels", str(labels), "--classes",
                 str(tmp_path / "classes.csv"), "--encoder", str(make_checkpoint(tmp_path / "best.ckpt")),
                 "--train-rows", str(TRAIN_ROWS), "--seeds", "0,1", "--per-class", str(PER_CLASS), "--record",
                 str(tmp_path / "records")]) == 0
    record = json.loads((tmp_path / "records" / "fewshot.json").read_text())[-1]
    valid = np.ones((HEIGHT, WIDTH), dtype=bool)
    valid[NODATA_BOX] = False
    south = valid[TRAIN_ROWS:] & (codes[TRAIN_ROWS:] != 0)
    for row in record["seeds"]:
        assert row["train_pixels"] == 3 * PER_CLASS + 3
        assert row["test_pixels"] == int(south.sum())
        assert 0.0 <= row["head"]["miou"] <= 1.0 and 0.0 <= row["forest"]["miou"] <= 1.0
    assert record["data"]["train_rows"] == f"0..{TRAIN_ROWS - 1}" and record["encoder"]["layer"] == "decoder"
    summary = record["summary"]
    assert summary["head_miou_mean"] == np.mean([r["head"]["miou"] for r in record["seeds"]])
    assert summary["head_miou_std"] == np.std([r["head"]["miou"] for r in record["seeds"]], ddof=1)


def test_bench_fewshot_refuses_a_scene_without_its_labels(tmp_path, capsys):
    # guards the one-line refusal of a half-given real scene (the synthetic bench would otherwise run instead)
    assert main(["bench", "fewshot", "--scene", str(tmp_path), "--record", ""]) == 2
    assert "--labels" in capsys.readouterr().err


def test_bench_fewshot_gives_the_scene_one_band_name_a_band(tmp_path, monkeypatch):
    # guards: --band-names B02,B03,B04,B08 handed to the embedding as the string itself, read as 15 names of one
    # character ("has 4 bands but --band-names gives 15"), so a scene without band descriptions (Zion's VRT) failed
    import pytest

    from eoscale.bench import fewshot
    from eoscale.infer import run

    class Embedded(Exception):
        pass

    def embed(config):
        raise Embedded(config.band_names)

    monkeypatch.setattr(run, "predict", embed)
    scene = tmp_path / "scene.tif"
    write_scene(scene, height=16, width=16, seed=1)
    with pytest.raises(Embedded) as embedded:
        fewshot.bench_scene(tmp_path, scene=scene, band_names="B02,B03,B04,B08", labels=scene, classes=scene,
                            encoder=scene, layer="backbone", train_rows=None, seeds=[0], per_class=1)
    assert embedded.value.args[0] == ["B02", "B03", "B04", "B08"]
