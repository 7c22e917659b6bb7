"""`eoscale label --training-raster`: a mixed sample's labelling points (never its assessment points) as a sparse
label raster on the map's grid, nodata elsewhere; bad requests refused in one line with nothing written; `eoscale
ingest --labels` stores it as the ignore index away from the points, and a fit fine-tunes a checkpoint on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
import torch
import xarray as xr

from eoscale.classes import IGNORE_INDEX
from eoscale.cli import main
from eoscale.store import schema
from tests.checkpoints import MEAN, STD, make_checkpoint
from tests.maps.maps import blocky_codes, truth_of, write_map
from tests.maps.test_sample_uncertainty import write_float
from tests.rasters import CLASSES_CSV, write_scene

HEIGHT, WIDTH = 200, 230  # the grid of tests.rasters.write_scene: the map below is a map of that scene
SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A scene, a map of it, its truth, and a mixed sample (40 labelling, 60 assessment points) labelled from it."""
    folder = tmp_path_factory.mktemp("training")
    write_scene(folder / "scene.tif", height=HEIGHT, width=WIDTH, seed=0)
    codes = blocky_codes(HEIGHT, WIDTH)
    truth = truth_of(codes, error_rate=0.1)
    write_map(folder / "map.tif", codes)
    write_map(folder / "truth.tif", truth)
    uncertainty = np.random.default_rng(4).random(codes.shape) + (truth != codes)
    write_float(folder / "uncertainty.tif", uncertainty, folder / "map.tif")
    assert main(["sample", str(folder / "map.tif"), "--by", "mixed", "--uncertainty", str(folder / "uncertainty.tif"),
                 "--labelling", "40", "--spacing", "8", "--n", "60", "--seed", "3",
                 "--output", str(folder / "s")]) == 0
    assert main(["label", str(folder / "s.csv"), "--reference", str(folder / "truth.tif")]) == 0
    (folder / "classes.csv").write_text(CLASSES_CSV)
    return folder, codes, truth


def read(path: Path) -> tuple[np.ndarray, dict]:
    with rasterio.open(path) as src:
        return src.read(1), {"crs": src.crs, "transform": src.transform, "nodata": src.nodata, "shape": src.shape}


def test_only_the_labelling_points_are_written_with_their_codes_on_the_maps_grid(tmp_path, labelled):
    folder, codes, truth = labelled
    assert main(["label", str(folder / "s.csv"), "--training-raster", str(tmp_path / "train.tif")]) == 0
    labels, grid = read(tmp_path / "train.tif")
    _, map_grid = read(folder / "map.tif")
    assert (grid["crs"], grid["transform"], grid["shape"]) == (map_grid["crs"], map_grid["transform"], map_grid["shape"])
    points = pd.read_csv(folder / "s.csv")
    mine = points[points["set"] == "labelling"]
    others = points[points["set"] == "assessment"]
    assert len(mine) == 40 and len(others) == 60
    r, c = mine["row"].to_numpy(), mine["col"].to_numpy()
    np.testing.assert_array_equal(labels[r, c], truth[r, c])  # the reference code, not the map's
    assert (labels[others["row"], others["col"]] == grid["nodata"]).all()
    assert int((labels != grid["nodata"]).sum()) == 40  # nodata everywhere else


def test_a_radius_labels_a_disc_around_each_point(tmp_path, labelled):
    folder, codes, truth = labelled
    assert main(["label", str(folder / "s.gpkg"), "--training-raster", str(tmp_path / "train.tif"),
                 "--radius", "2"]) == 0
    labels, grid = read(tmp_path / "train.tif")
    points = pd.read_csv(folder / "s.csv")
    mine, others = points.query("set == 'labelling'"), points.query("set == 'assessment'")
    r, c = mine["row"].to_numpy(), mine["col"].to_numpy()
    np.testing.assert_array_equal(labels[r, c], truth[r, c])
    written = labels != grid["nodata"]
    near = np.zeros_like(written)
    rows, cols = np.mgrid[:HEIGHT, :WIDTH]
    for pr, pc in zip(r, c, strict=True):
        near |= (rows - pr) ** 2 + (cols - pc) ** 2 <= 4
    assessed = np.zeros_like(written)
    assessed[others["row"], others["col"]] = True
    assert (near & assessed).any()  # this sample has an assessment point inside a disc: it stays nodata
    # 13-pixel discs (fewer where they meet or leave the map) less the assessment points' pixels, nothing else
    np.testing.assert_array_equal(written, near & ~assessed)
    first = ((rows - r[0]) ** 2 + (cols - c[0]) ** 2 <= 4) & ~assessed  # the most uncertain point's disc: its code
    assert (labels[first] == truth[r[0], c[0]]).all()


def test_no_assessment_point_is_ever_labelled_even_under_a_labelling_disc(tmp_path, labelled, capsys):
    """The layout that biased the quick start's second assessment (issue 45): assessment points on a labelling
    point's own pixel and inside its disc. The map fine-tuned on the raster is assessed on those points, so none of
    them may carry a training label; the labelling points elsewhere keep theirs."""
    folder, codes, truth = labelled
    points = pd.read_csv(folder / "s.csv")
    mine = points.index[points["set"] == "labelling"]
    others = points.index[points["set"] == "assessment"]
    moved = {others[0]: (mine[0], 0), others[1]: (mine[1], 1), others[2]: (mine[2], -2)}  # same pixel, 1 and 2 px off
    for target, (source, dcol) in moved.items():
        points.loc[target, ["x", "y", "row"]] = points.loc[source, ["x", "y", "row"]]
        points.loc[target, "x"] += 10.0 * dcol  # the map's 10 m pixels
        points.loc[target, "col"] = points.loc[source, "col"] + dcol
    points.to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "s_design.json").write_bytes((folder / "s_design.json").read_bytes())
    assert main(["label", str(tmp_path / "s.csv"), "--training-raster", str(tmp_path / "train.tif"),
                 "--radius", "2"]) == 0
    labels, grid = read(tmp_path / "train.tif")
    assessed = points.loc[others]
    rows, cols = np.mgrid[:HEIGHT, :WIDTH]
    near = np.zeros((HEIGHT, WIDTH), bool)
    for pr, pc in zip(points.loc[mine, "row"], points.loc[mine, "col"], strict=True):
        near |= (rows - pr) ** 2 + (cols - pc) ** 2 <= 4
    covered = len({(r, c) for r, c in zip(assessed["row"], assessed["col"], strict=True) if near[r, c]})
    assert covered >= 3  # the three moved points, and any the sample put near a labelling point itself
    assert f"{covered} pixels left nodata because assessment points lie on them" in capsys.readouterr().out
    assert (labels[assessed["row"], assessed["col"]] == grid["nodata"]).all()
    kept = points.loc[mine[1:]]  # the first labelling point shares its pixel with an assessment point: withheld
    np.testing.assert_array_equal(labels[kept["row"], kept["col"]], truth[kept["row"], kept["col"]])
    r, c = int(points.loc[mine[1], "row"]), int(points.loc[mine[1], "col"])
    assert labels[r, c - 1] == truth[r, c] and labels[r - 1, c + 1] == truth[r, c]  # the rest of its disc stays


def test_bad_requests_are_refused_in_one_line_with_nothing_written(tmp_path, labelled, capsys):
    folder, codes, truth = labelled
    out = tmp_path / "train.tif"
    assert main(["sample", str(folder / "map.tif"), "--n", "30", "--seed", "1", "--output", str(tmp_path / "strat")]) == 0
    before = (tmp_path / "strat.csv").read_bytes()
    cases = [
        (["label", str(tmp_path / "strat.csv"), "--reference", str(folder / "truth.tif"), "--training-raster", str(out)],
         "holds no labelling points"),
        (["label", str(folder / "s.csv")], "give --reference RASTER"),
        (["label", str(folder / "s.csv"), "--radius", "2"], "give --reference RASTER"),
        (["label", str(folder / "s.csv"), "--training-raster", str(tmp_path / "train.png")], "give a .tif path"),
        (["label", str(folder / "s.csv"), "--training-raster", str(out), "--radius", "-1"], "--radius -1"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not out.exists()
    assert (tmp_path / "strat.csv").read_bytes() == before  # the stratified sample was not labelled either
    for name in ("s.csv", "s_design.json"):  # a mixed sample drawn but not labelled yet
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    table = pd.read_csv(tmp_path / "s.csv")
    table["reference"] = ""
    table.to_csv(tmp_path / "s.csv", index=False)
    assert main(["label", str(tmp_path / "s.csv"), "--training-raster", str(out)]) == 2
    assert "has a reference code: label them first" in capsys.readouterr().err and not out.exists()
    out.write_bytes(b"keep")
    assert main(["label", str(folder / "s.csv"), "--training-raster", str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err and out.read_bytes() == b"keep"


def test_ingest_ignores_all_but_the_points_and_a_fit_fine_tunes_on_them(tmp_path, labelled, one_thread):
    folder, codes, truth = labelled
    assert main(["label", str(folder / "s.csv"), "--training-raster", str(tmp_path / "train.tif"), "--radius", "1"]) == 0
    labels, grid = read(tmp_path / "train.tif")
    store = tmp_path / "sparse.zarr"
    checkpoint = make_checkpoint(tmp_path / "start.ckpt")
    # normalised as the checkpoint's store was (fine-tuning refuses other statistics), not with the scene's own
    assert main(["ingest", "--scenes", str(folder / "scene.tif"), "--labels", str(tmp_path / "train.tif"),
                 "--classes", str(folder / "classes.csv"), "--output", str(store), "--tile-size", "32",
                 "--workers", "1", "--quiet", "--statistics-from", str(checkpoint)]) == 0
    ds = xr.open_zarr(store)
    np.testing.assert_allclose(ds.attrs[schema.ATTR_STATISTICS]["mean"], MEAN)
    np.testing.assert_allclose(ds.attrs[schema.ATTR_STATISTICS]["std"], STD)
    lut = {int(c["code"]): i for i, c in enumerate(ds.attrs[schema.ATTR_CLASSES])}
    assert ds.sizes["tile"] == 6 * 7 - 2  # tiles are kept by the image's validity (two under its nodata corner)
    seen = 0
    for t in range(ds.sizes["tile"]):
        r, c = int(ds.row_off[t]), int(ds.col_off[t])
        window = labels[r:r + 32, c:c + 32]
        want = np.full(window.shape, IGNORE_INDEX, dtype=np.uint8)
        have = window != grid["nodata"]
        want[have] = [lut[int(v)] for v in window[have]]
        image = ds[schema.IMAGES][t, 0].values
        want[(image == 0).any(axis=0)] = IGNORE_INDEX
        np.testing.assert_array_equal(ds[schema.LABELS][t].values, want)
        seen += int((want != IGNORE_INDEX).sum())
    assert 0 < seen <= int((labels != grid["nodata"]).sum())
    code = main(["fit", "--config", SMOKE, "--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
                 "--model.init_args.backbone", "test_resnet", "--model.init_args.decoder_channels", "8",
                 "--model.init_args.finetune_from", str(checkpoint), "--trainer.max_steps", "3",
                 "--trainer.val_check_interval", "3", "--trainer.default_root_dir", str(tmp_path / "fit"),
                 "--trainer.logger", "false", "--checkpoint.dirpath", str(tmp_path / "fit" / "checkpoints")])
    assert code == 0
    state = torch.load(tmp_path / "fit" / "checkpoints" / "last.ckpt", weights_only=True)
    start = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert state["global_step"] == 3
    changed = [k for k, v in start.items() if v.is_floating_point() and not torch.equal(v, state["state_dict"][k])]
    assert changed and all(torch.isfinite(state["state_dict"][k]).all() for k in changed)
