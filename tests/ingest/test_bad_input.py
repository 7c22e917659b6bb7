"""Every bad input gets one line naming the file and the fix, exit code 2, and no complete store."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from tests.rasters import CLASSES_CSV, write_labels, write_scene


def ingest(capsys, out, scenes, labels=None, *extra):
    argv = ["ingest", "--scenes", *map(str, scenes), "--classes", str(out.parent / "classes.csv"),
            "--output", str(out), "--tile-size", "32", "--workers", "1", "-q", *extra]
    if labels:
        argv[3:3] = ["--labels", *map(str, labels)]
    (out.parent / "classes.csv").write_text(CLASSES_CSV)
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def assert_one_line_error(code, err, *words):
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


def assert_no_store(out):
    assert not out.exists()


@pytest.fixture
def scene(tmp_path):
    path = tmp_path / "good.tif"
    classes = write_scene(path)
    write_labels(tmp_path / "good_lc.tif", path, classes)
    return path


def test_missing_path(tmp_path, capsys):
    out = tmp_path / "s.zarr"
    code, err = ingest(capsys, out, [tmp_path / "nope.tif"])
    assert_one_line_error(code, err, "nope.tif", "does not exist")
    assert_no_store(out)


def test_glob_that_matches_nothing(tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "s.zarr", [tmp_path / "*.tif"])
    assert_one_line_error(code, err, "matches no file")


def test_not_a_raster(tmp_path, capsys):
    bad = tmp_path / "notes.tif"
    bad.write_text("this is not a GeoTIFF\n")
    code, err = ingest(capsys, tmp_path / "s.zarr", [bad])
    assert_one_line_error(code, err, "notes.tif", "not a readable raster")


def test_truncated_geotiff(scene, tmp_path, capsys):
    truncated = tmp_path / "cut.tif"
    data = scene.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    out = tmp_path / "s.zarr"
    code, err = ingest(capsys, out, [truncated], [tmp_path / "good_lc.tif"])
    assert_one_line_error(code, err, "cut.tif")
    assert "damaged or truncated" in err or "not a readable raster" in err
    assert_no_store(out)


def test_raster_without_crs(tmp_path, capsys):
    path = tmp_path / "nocrs.tif"
    write_scene(path, crs=None)
    code, err = ingest(capsys, tmp_path / "s.zarr", [path])
    assert_one_line_error(code, err, "nocrs.tif", "no CRS")


def test_labels_that_do_not_overlap(scene, tmp_path, capsys):
    far = tmp_path / "far.tif"
    classes = write_scene(far, origin=(600_000.0, 5_200_000.0))
    write_labels(tmp_path / "far_lc.tif", far, classes)
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene], [tmp_path / "far_lc.tif"])
    assert_one_line_error(code, err, "far_lc.tif", "good", "overlap")


def test_scenes_with_different_band_sets(scene, tmp_path, capsys):
    other = tmp_path / "four.tif"
    write_scene(other, band_names=["B02", "B03", "B04", "B08"])
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene, other])
    assert_one_line_error(code, err, "four", "--bands")
    # ... and picking the common bands makes it work
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene, other], None, "--bands", "B04,B03,B02,B08")
    assert code == 0, err


def test_band_that_is_not_there(scene, tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene], None, "--bands", "B02,B99")
    assert_one_line_error(code, err, "B99", "good")


def test_label_codes_missing_from_the_class_table_warn_with_counts(scene, tmp_path, capsys):
    out = tmp_path / "s.zarr"
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    table = tmp_path / "three.csv"
    table.write_text("\n".join(CLASSES_CSV.strip().splitlines()[:-1]) + "\n")  # no code 80
    code = main(["ingest", "--scenes", str(scene), "--labels", str(tmp_path / "good_lc.tif"), "--classes", str(table),
                 "--output", str(out), "--tile-size", "32", "--workers", "1", "-q"])
    err = capsys.readouterr().err
    assert code == 0
    assert "warning" in err and "code 80:" in err and " px" in err
    assert out.exists()


def test_tile_size_larger_than_the_scene(scene, tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene], None, "--tile-size", "512")
    assert_one_line_error(code, err, "512", "good", "--tile-size")


def test_all_nodata_scene(tmp_path, capsys):
    path = tmp_path / "empty.tif"
    write_scene(path, nodata_box=(slice(None), slice(None)))
    out = tmp_path / "s.zarr"
    code, err = ingest(capsys, out, [path])
    assert_one_line_error(code, err, "empty", "only nodata")
    assert_no_store(out)


def test_existing_output_needs_overwrite_and_survives_a_failed_replacement(scene, tmp_path, capsys):
    out = tmp_path / "s.zarr"
    code, err = ingest(capsys, out, [scene], [tmp_path / "good_lc.tif"])
    assert code == 0, err
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    code, err = ingest(capsys, out, [scene], [tmp_path / "good_lc.tif"])
    assert_one_line_error(code, err, "s.zarr", "--overwrite")
    # a replacement that fails halfway leaves the old store as it was
    broken = tmp_path / "broken.tif"
    broken.write_bytes(scene.read_bytes()[: scene.stat().st_size // 2])
    code, err = ingest(capsys, out, [broken], [tmp_path / "good_lc.tif"], "--overwrite")
    assert code == 2
    after = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert before == after
    code, err = ingest(capsys, out, [scene], [tmp_path / "good_lc.tif"], "--overwrite", "--tile-size", "64")
    assert code == 0, err


def test_bad_numbers(scene, tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene], None, "--split", "0.5,0.2,0.2")
    assert_one_line_error(code, err, "--split")
    code, err = ingest(capsys, tmp_path / "s.zarr", [scene], None, "--min-valid", "1.5")
    assert_one_line_error(code, err, "--min-valid")


def test_readers_refuse_an_unfinished_store(scene, tmp_path, capsys):
    out = tmp_path / "s.zarr"
    (tmp_path / "s.zarr.partial" / "progress").mkdir(parents=True)
    code = main(["info", str(out)])
    err = capsys.readouterr()
    assert code == 2
    assert "not finished" in (err.out + err.err) and "eoscale ingest" in (err.out + err.err)
    shutil.rmtree(tmp_path / "s.zarr.partial")
    assert np.isfinite(rasterio.open(scene).read(1).mean())


def test_statistics_from_another_band_set_or_a_checkpoint_without_contract(capsys, tmp_path, scene):
    import torch

    from tests.checkpoints import make_checkpoint

    out = tmp_path / "out.zarr"
    three = make_checkpoint(tmp_path / "three.ckpt", bands=("B02", "B03", "B04"))
    code, err = ingest(capsys, out, [scene], None, "--statistics-from", str(three))
    assert_one_line_error(code, err, "three.ckpt", "has bands ['B02', 'B03', 'B04']", "same bands")
    assert_no_store(out)
    torch.save({"state_dict": {}}, tmp_path / "bare.ckpt")
    code, err = ingest(capsys, out, [scene], None, "--statistics-from", str(tmp_path / "bare.ckpt"))
    assert_one_line_error(code, err, "bare.ckpt", "without a band contract")
    assert_no_store(out)
