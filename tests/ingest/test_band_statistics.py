"""A band that cannot be normalised is refused at ingest in one line naming it (issue 46, item 4).

Before, a band without a valid pixel got mean 0 and std 0 and a band of one value std 0; the loader and predict
clamped std to 1e-6, so such a band was scaled by 1,000,000 at training and prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio

from eoscale.cli import main
from eoscale.ingest.stats import HISTOGRAM_BINS, statistics_from_histograms, unusable_band
from tests.rasters import CLASSES_CSV, write_labels, write_scene


def test_a_band_without_valid_pixels_is_named():
    histograms = np.zeros((3, HISTOGRAM_BINS), dtype=np.int64)
    histograms[0, 100:200] = 1
    histograms[2, 300:310] = 5
    stats = statistics_from_histograms(histograms)
    assert unusable_band(stats, ["B02", "B03", "B04"]) == (
        "band B03 has no valid pixel in any tile, so it cannot be normalised (mean 0, std 0): leave it out with "
        "--bands B02,B04, or give scenes where it holds data")
    histograms[1, 7] = 50  # one value in every valid pixel
    assert unusable_band(statistics_from_histograms(histograms), ["B02", "B03", "B04"]).startswith(
        "band B03 holds one value (7) in every valid pixel, so it cannot be normalised (std 0)")
    histograms[1, 8] = 1
    assert unusable_band(statistics_from_histograms(histograms), ["B02", "B03", "B04"]) is None
    # a static layer (a flat DEM's slope) is left out of --static-layers, not --bands
    assert "leave slope out of --static-layers" in unusable_band(stats, ["B02", "SLOPE", "B04"])


def test_ingest_refuses_a_band_of_one_value_and_leaves_nothing_behind(tmp_path: Path, capsys):
    scene = tmp_path / "scene.tif"
    classes = write_scene(scene, height=96, width=96, band_names=["B02", "B03", "B04", "B08"])
    with rasterio.open(scene, "r+") as dst:  # B04 is 1234 wherever the scene has data (0 in its nodata corner)
        dst.write(np.where(dst.read(3) == 0, 0, 1234).astype(np.uint16), 3)
    write_labels(tmp_path / "labels.tif", scene, classes)
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    args = ["ingest", "--scenes", str(scene), "--labels", str(tmp_path / "labels.tif"), "--classes",
            str(tmp_path / "classes.csv"), "--output", str(tmp_path / "tiles.zarr"), "--tile-size", "32", "--workers",
            "1", "-q"]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("eoscale ingest: error: band B04 holds one value (1234) in every valid pixel, so it cannot be "
                      "normalised (std 0): leave it out with --bands B02,B03,B08")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classes.csv", "labels.tif", "scene.tif"]
    assert main([*args, "--bands", "B02,B03,B08"]) == 0  # what the line says to do works, with nothing in the way
