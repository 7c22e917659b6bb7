"""`eoscale bench calibration`'s scoring: entropy on wrong and right pixels and its AUROC, and the uncertainty COG
compared with a label raster on another grid (the whole bench runs the real commands: benchmarks/calibration.json)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from eoscale.bench.calibration import score_map, separation
from eoscale.bench.command import BENCHMARKS


def test_separation_of_a_perfect_and_a_useless_score():
    wrong = np.array([False, False, True, True])
    assert separation([0.1, 0.2, 0.8, 0.9], wrong) == {"pixels": 4, "error_rate": 0.5, "mean_wrong": pytest.approx(0.85),
                                                        "mean_right": pytest.approx(0.15), "auroc_errors": 1.0}
    assert separation([0.5] * 4, wrong)["auroc_errors"] == 0.5
    assert separation([0.5, 0.5], [False, False])["auroc_errors"] is None  # no errors: no AUROC


def test_score_map_reads_the_truth_onto_the_maps_grid(tmp_path):
    truth = np.full((64, 64), 10, np.uint8)
    truth[:, 32:] = 30
    mapped = truth.copy()
    mapped[:8] = 80  # wrong: the top rows
    mapped[60:, :4] = 0  # nodata
    uncertainty = np.full((64, 64), 10, np.uint8)
    uncertainty[:8] = 70
    grid = dict(driver="GTiff", width=64, height=64, count=1, dtype="uint8", crs="EPSG:32632",
                transform=from_origin(300_000, 5_600_000, 10, 10))
    for name, values, nodata in (("s_landcover.tif", mapped, 0), ("s_uncertainty.tif", uncertainty, 255)):
        with rasterio.open(tmp_path / name, "w", nodata=nodata, **grid) as f:
            f.write(values, 1)
    # the truth at 20 m, as the synthetic labels come
    with rasterio.open(tmp_path / "labels.tif", "w", nodata=0, **{**grid, "width": 32, "height": 32,
                                                                   "transform": from_origin(300_000, 5_600_000, 20, 20)}) as f:
        f.write(truth[::2, ::2], 1)
    (tmp_path / "classes.csv").write_text("code,name,color\n10,Tree cover,#006400\n30,Grassland,#ffff4c\n"
                                          "80,Water,#0064c8\n")
    found = score_map(tmp_path, "s", tmp_path / "labels.tif", tmp_path / "classes.csv")
    assert found["cog_valid"] and found["pixels"] == 64 * 64 - 16
    assert found["error_rate"] == pytest.approx(8 * 64 / (64 * 64 - 16))
    assert found["mean_wrong"] == pytest.approx(0.7) and found["mean_right"] == pytest.approx(0.1)
    assert found["auroc_errors"] == 1.0


def test_the_bench_is_registered():
    assert BENCHMARKS["calibration"][0] == "eoscale.bench.calibration"
