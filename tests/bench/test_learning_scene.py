"""`eoscale bench learning --scene`: the halves of a real scene, the pixels scored, the baselines' features and the
stack's mixture, on small seeded rasters (no fitting)."""

import argparse
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine

from eoscale.bench import learning_scene
from eoscale.classes import IGNORE_INDEX

GRID = Affine(30.0, 0.0, 300_000.0, 0.0, -30.0, 4_150_000.0)


def _write(path, data, *, nodata, crs="EPSG:32612", transform=GRID, descriptions=None):
    profile = {"driver": "GTiff", "height": data.shape[1], "width": data.shape[2], "count": data.shape[0],
               "dtype": data.dtype, "crs": crs, "transform": transform, "nodata": nodata}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
        for i, text in enumerate(descriptions or [], start=1):
            dst.set_band_description(i, text)
    return str(path)


def _scene(tmp_path, height=10, width=8):
    rng = np.random.default_rng(0)
    image = rng.integers(100, 1000, (2, height, width)).astype(np.uint16)
    image[:, 0, 0] = 65535  # a nodata pixel in the north half
    image[:, height - 1, width - 1] = 65535  # and one in the south half
    codes = (np.arange(height * width).reshape(1, height, width) % 3 + 1).astype(np.uint8) * 10  # codes 10, 20, 30
    codes[0, 1, 1] = 255  # an unlabelled pixel
    scene = _write(tmp_path / "scene.tif", image, nodata=65535)
    labels = _write(tmp_path / "labels.tif", codes, nodata=255)
    return image, codes[0], scene, labels


@pytest.mark.parametrize("hold_out", ["south", "north", "east", "west"])
def test_the_halves_hold_the_scene_and_its_labels_on_their_grid(tmp_path, hold_out):
    # guards: a half off by a row or column, its labels read from the other half, or nodata counted as labelled
    image, codes, scene, labels = _scene(tmp_path)
    cut = learning_scene.halves(scene, labels, hold_out, tmp_path, band_names=["B02", "B03"])
    rows = {"south": (slice(0, 5), slice(5, 10)), "north": (slice(5, 10), slice(0, 5))}
    cols = {"east": (slice(0, 4), slice(4, 8)), "west": (slice(4, 8), slice(0, 4))}
    for part, index in zip(("train", "test"), range(2), strict=True):
        window = (rows[hold_out][index], slice(None)) if hold_out in rows else (slice(None), cols[hold_out][index])
        with rasterio.open(tmp_path / f"{part}.tif") as src:
            np.testing.assert_array_equal(src.read(), image[(slice(None), *window)])
            assert src.descriptions == ("B02", "B03")
            assert src.transform == GRID @ Affine.translation(window[1].start or 0, window[0].start or 0)
        valid = cut[f"{part}_valid"]
        expected_valid = (image[(0, *window)] != 65535) & (codes[window] != 255)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_array_equal(cut[part][valid], codes[window][valid])


def test_labels_on_another_grid_are_read_onto_the_half(tmp_path):
    # guards: a label raster of another grid taken pixel for pixel instead of being warped onto the half
    image, codes, scene, _ = _scene(tmp_path)
    shifted = GRID @ Affine.translation(-2, 0)  # two columns more on the west: the same ground, other indices
    wider = np.zeros((1, 10, 10), np.uint8)
    wider[0, :, 2:] = codes
    labels = _write(tmp_path / "wider.tif", wider, nodata=255, transform=shifted)
    cut = learning_scene.halves(scene, labels, "south", tmp_path, band_names=["B02", "B03"])
    valid = cut["train_valid"]
    np.testing.assert_array_equal(cut["train"][valid], codes[:5][valid])


def test_band_names_are_needed_when_the_scene_has_no_descriptions(tmp_path):
    from eoscale.errors import InputError

    _, _, scene, labels = _scene(tmp_path)
    with pytest.raises(InputError, match="--band-names"):
        learning_scene.halves(scene, labels, "south", tmp_path, band_names=None)


def test_scores_count_labelled_pixels_only_and_miou_over_the_classes_in_the_truth():
    truth = np.array([[0, 0, 1, IGNORE_INDEX]])
    predicted = np.array([[0, 1, 1, 2]])
    scored = learning_scene.score(truth, predicted, ["a", "b", "c"])
    assert scored["pixels"] == 3 and scored["accuracy"] == pytest.approx(2 / 3)
    assert scored["iou"] == {"a": 0.5, "b": 0.5, "c": None}  # c: neither in the truth nor mapped where labelled
    assert scored["miou"] == pytest.approx(0.5)


def test_the_means_features_leave_nodata_out():
    # guards: a window's mean pulled towards the nodata value (65535) at the scene's edge
    image = np.full((1, 5, 5), 100, np.uint16)
    image[0, 0, :] = 65535
    features, valid = learning_scene._pixel_features(image, 65535, (3,))
    assert not valid[0].any() and valid[1:].all()
    np.testing.assert_allclose(features.reshape(5, 5, 2)[1:, :, 1], 100, rtol=1e-5)


def test_the_stack_mixes_the_probabilities_by_the_forest_weight():
    forest = np.array([[[0.9]], [[0.1]]])  # (classes, 1, 1): the forest says class 0
    network = np.array([[[0.2]], [[0.8]]])  # the network class 1
    mapped = {"forest": {"test": forest}, "network": {"test": network}}
    assert learning_scene._mix(mapped, "test", 1.0).item() == 0
    assert learning_scene._mix(mapped, "test", 0.0).item() == 1
    assert learning_scene._mix(mapped, "test", 0.4).item() == 1  # 0.4·0.9 + 0.6·0.2 = 0.48 < 0.52


def test_a_scene_needs_its_labels_and_classes(tmp_path):
    from eoscale.errors import InputError

    args = argparse.Namespace(scene=str(tmp_path / "s.tif"), labels=None, classes=None)
    with pytest.raises(InputError, match="--labels"):
        learning_scene._check_scene_args(args)


def test_the_baseline_forest_puts_each_class_in_its_own_row():
    # guards: probabilities of a forest that never saw a class (here index 1) shifted onto the wrong classes' rows
    image = np.zeros((1, 4, 6), np.uint16)
    image[0, :, 3:] = 500
    truth = np.where(image[0] == 500, 2, 0)
    (mapped,), _ = learning_scene.pixel_forest(image, truth, [image], nodata=65535, means=(), classes=3, seed=0)
    assert mapped.shape == (3, 4, 6)
    assert (mapped[1] == 0).all()
    np.testing.assert_array_equal(mapped.argmax(0), truth)


def test_the_stack_weight_is_chosen_on_the_train_half_only():
    # guards: the weight chosen on the held-out half (tuning on the test): here the held-out half would want the
    # network alone (w = 0), the val tiles of the train half want the forest alone (w = 1)
    truth = np.array([[0, 1]])
    right, wrong = np.array([[[0.9, 0.1]], [[0.1, 0.9]]]), np.array([[[0.1, 0.9]], [[0.9, 0.1]]])
    mapped = {"forest": {"train": right, "test": wrong}, "network": {"train": wrong, "test": right}}
    weight, by_weight = learning_scene.choose_weight(mapped, truth, ["a", "b"])
    assert by_weight[1.0] == 1.0 and by_weight[0.0] == 0.0
    assert weight == 0.6  # the most even of the mixtures that map the val tiles right (0.6 to 1)


@pytest.mark.parametrize("pretrain", [-1.0, 3.0, 4.0])
def test_pretraining_minutes_must_leave_the_network_some_of_the_budget(tmp_path, pretrain):
    # guards: --pretrain outside [0, --minutes): a fit of 0 or fewer minutes, or a budget that pretraining overspends
    from eoscale.errors import InputError

    _, _, scene, labels = _scene(tmp_path)
    classes = tmp_path / "classes.csv"
    classes.write_text("code,name\n10,a\n20,b\n30,c\n")
    args = argparse.Namespace(scene=scene, labels=labels, classes=str(classes), minutes=3.0, pretrain=pretrain)
    with pytest.raises(InputError, match="--pretrain"):
        learning_scene._check_scene_args(args)
    learning_scene._check_scene_args(argparse.Namespace(**{**vars(args), "pretrain": 1.0}))


def test_pretraining_runs_for_its_minutes_and_writes_the_encoder_in_the_work_folder(tmp_path, monkeypatch):
    # guards: the pretraining's schedule not sized to its minutes, run as 'fit', or writing its checkpoints and
    # encoder where its config says (runs/pretrain/… in the checkout) instead of in the seed's work folder
    import json

    from eoscale.bench import learning_fits

    runs = []

    def fake_fit(argv, env=None):
        runs.append(argv)
        folder = Path(argv[argv.index("--checkpoint.dirpath") + 1])
        folder.mkdir(parents=True)
        (folder / "backbone.safetensors").write_bytes(b"")
        if env:  # the calibration run: 2 s a step
            Path(env["EOSCALE_BENCH_OUT"]).write_text(json.dumps({"seconds": 60.0, "steps_timed": 30}))
        return ""

    monkeypatch.setattr(learning_fits, "_run_fit", fake_fit)
    figures = learning_fits.pretrain_encoder("store.zarr", tmp_path, config="configs/mae_pretrain.yaml",
                                             extra=["--seed_everything", "1"], minutes=5.0, batch=16, workers=0,
                                             validate_every=25)
    calibration, pretraining = runs
    assert all(argv[3] == "pretrain" for argv in runs)
    for argv in runs:
        assert Path(argv[argv.index("--checkpoint.dirpath") + 1]).is_relative_to(tmp_path)
    assert figures["max_steps"] == 125  # 0.9 · 300 s / 2 s = 135 steps, in whole validations of 25
    assert pretraining[pretraining.index("--trainer.max_time") + 1] == "00:00:05:00"
    assert figures["backbone"] == str(tmp_path / "pretrain" / "checkpoints" / "backbone.safetensors")


def test_val_tile_probabilities_land_on_their_tiles_place_in_the_half(tmp_path, monkeypatch):
    # guards: the stack's weight chosen on maps of the val tiles put at the wrong place (a tile's probabilities
    # read against another tile's labels), or on pixels outside the val tiles
    import torch

    from eoscale.bench import learning_maps
    from eoscale.infer import model as infer_model
    from eoscale.ingest import ingest

    image, _, scene, labels = _scene(tmp_path, height=128, width=96)
    image[:, 0, 0] = image[:, 127, 95] = 500  # no nodata: every pixel of the val tiles is mapped
    _write(tmp_path / "scene.tif", image, nodata=65535, descriptions=["B02", "B03"])
    classes = tmp_path / "classes.csv"
    classes.write_text("code,name\n10,a\n20,b\n30,c\n")
    store = tmp_path / "tiles.zarr"
    ingest([scene], store, labels=[labels], classes=str(classes), split=(0.5, 0.5, 0.0), tile_size=32, workers=1,
           progress=False)

    class Band0:  # class 0's logit is the normalised first band: its probability grows with that band
        contract = argparse.Namespace(bands=("B02", "B03"), classes=({"name": "a"}, {"name": "b"}, {"name": "c"}))

        @staticmethod
        def network(x):
            return torch.stack([x[:, 0], torch.zeros_like(x[:, 0]), torch.zeros_like(x[:, 0])], 1)

    monkeypatch.setattr(infer_model, "load_model", lambda checkpoint: Band0)
    mapped = learning_maps.tile_probabilities(Path("x.ckpt"), str(store), (128, 96))
    val = learning_scene.val_mask(str(store), (128, 96))
    assert 0 < val.sum() < val.size
    np.testing.assert_allclose(mapped.sum(0)[val], 1, rtol=1e-5)
    assert (mapped[:, ~val] == 0).all()
    order = np.argsort(image[0][val], kind="stable")
    assert (np.diff(mapped[0][val][order]) >= -1e-6).all()  # the probability follows the band at the same pixel


def test_the_baseline_forest_maps_only_the_pixels_asked():
    # guards: the val tiles' map of the means forest made of the whole train half (its cost), or left empty
    image = np.zeros((1, 4, 6), np.uint16)
    image[0, :, 3:] = 500
    truth = np.where(image[0] == 500, 2, 0)
    keep = np.zeros((4, 6), bool)
    keep[1:3, 2:4] = True
    (mapped,), _ = learning_scene.pixel_forest(image, truth, [image], nodata=65535, means=(), classes=3, seed=0,
                                               where=[keep])
    assert (mapped[:, ~keep] == 0).all()
    np.testing.assert_array_equal(mapped.argmax(0)[keep], truth[keep])


def test_another_network_recipe_shares_the_forests_and_not_the_network(tmp_path):
    # guards: a run of another --fit-args or --minutes in the same --work taking the first recipe's network or
    # result (the fits were kept by seed alone), or fitting the forests again
    args = argparse.Namespace(scene="s.tif", labels="l.tif", classes="c.csv", band_names=None, hold_out="south",
                              tile_size=64, config="configs/vit_scene_seg.yaml", fit_args="", minutes=3.0,
                              batch_size=16, workers=1, calibration_steps=40, validate_every=100,
                              forest_config="configs/forest.yaml", forest_args="", pretrain=0.0,
                              pretrain_config="configs/mae_pretrain.yaml", pretrain_args="")
    other = argparse.Namespace(**{**vars(args), "fit_args": "--model.init_args.class_weights inverse"})
    assert learning_scene._key(*learning_scene._recipe(args)) != learning_scene._key(*learning_scene._recipe(other))
    assert learning_scene._key(args.forest_config, args.forest_args) == learning_scene._key(other.forest_config,
                                                                                          other.forest_args)


def test_a_class_of_a_few_val_pixels_does_not_choose_the_stack():
    # guards: the stack's weight chosen by a plain val mIoU, in which a class of 3 val pixels (Zion's water) weighs
    # as much as one of thousands. Here the forest maps the 3 pixels of class c right and 30 % of class a wrong, the
    # network the other way round: the plain mIoU wants the forest (0.82 against 0.66), the classes of >= 50 val
    # pixels the network (0.99 against 0.73)
    n = 100
    truth = np.array([[0] * n + [1] * n + [2] * 3])
    forest_says = np.array([0] * 70 + [1] * 30 + [1] * n + [2] * 3)
    network_says = np.array([0] * n + [1] * n + [0] * 3)

    def confident(says):  # (classes, 1, pixels): 0.9 on the class it says
        p = np.full((3, 1, says.size), 0.05)
        p[says, 0, np.arange(says.size)] = 0.9
        return p

    mapped = {"forest": {"train": confident(forest_says)}, "network": {"train": confident(network_says)}}
    assert list(learning_scene.choice_classes(truth, 3)) == [True, True, False]
    weight, by_weight = learning_scene.choose_weight(mapped, truth, ["a", "b", "c"])
    assert weight <= 0.5  # the network's map (the plain mIoU chose 0.6, the most even of the forest's)
    assert by_weight[0.0] == pytest.approx((100 / 103 + 1) / 2)
    assert by_weight[1.0] == pytest.approx((0.7 + 100 / 130) / 2)
    plain, _ = learning_scene.choose_weight(mapped, truth, ["a", "b", "c"], min_pixels=0)  # every class: the old way
    assert plain == 0.6


def test_every_present_class_chooses_when_none_has_enough_val_pixels():
    truth = np.array([[0, 0, 1, IGNORE_INDEX]])
    assert list(learning_scene.choice_classes(truth, 3)) == [True, True, False]
