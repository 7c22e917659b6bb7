"""`eoscale assess` of a value map (`EOSCALE_TARGET=values`, as `eoscale predict` writes for a regression model):
RMSE, MAE, bias and R² against reference points (CSV in the map's CRS, GeoPackage in another) and a reference
raster in another CRS and resolution, with bootstrap intervals and a scatter plot; class/value mix-ups refused in
one line (exit 2) with nothing written."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import rasterio
from affine import Affine

from eoscale.cli import main
from tests.maps.maps import blocky_codes, write_map

NODATA = -9999.0
ORIGIN = (330_000.0, 5_650_000.0)


def write_values(path, values, *, crs="EPSG:32632", resolution=10.0, tags=None, nodata=NODATA):
    transform = Affine(resolution, 0, ORIGIN[0], 0, -resolution, ORIGIN[1])
    with rasterio.open(path, "w", driver="COG", width=values.shape[1], height=values.shape[0], count=1,
                       dtype="float32", crs=crs, transform=transform, nodata=nodata) as dst:
        dst.write(values.astype(np.float32), 1)
        dst.update_tags(**(tags or {}))
    return path


@pytest.fixture(scope="module")
def maps(tmp_path_factory):
    folder = tmp_path_factory.mktemp("values")
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:120, 0:150]
    truth = (10 + 8 * np.sin(x / 15.0) * np.cos(y / 20.0)).astype(np.float32)
    mapped = truth + 0.5 + rng.normal(0, 1.0, truth.shape).astype(np.float32)  # biased by +0.5, noise of 1
    mapped[:4] = NODATA
    tags = {"EOSCALE_TARGET": "values", "EOSCALE_TARGET_NAME": "canopy_height", "EOSCALE_TARGET_UNITS": "m",
            "EOSCALE_NODATA": str(NODATA)}
    return folder, truth, mapped, write_values(folder / "T32_values.tif", mapped, tags=tags)


def assess(out, map_path, reference, *extra):
    return main(["assess", str(map_path), "--reference", str(reference), "--output", str(out), "--no-tracking", *extra])


def test_points_give_the_hand_computed_statistics_with_intervals(tmp_path, maps):
    folder, truth, mapped, map_path = maps
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(4, 120, 300), rng.integers(0, 150, 300)
    x, y = ORIGIN[0] + (cols + 0.5) * 10, ORIGIN[1] - (rows + 0.5) * 10
    pd.DataFrame({"x": x, "y": y, "value": truth[rows, cols]}).to_csv(tmp_path / "plots.csv", index=False)
    assert assess(tmp_path / "a", map_path, tmp_path / "plots.csv") == 0
    report = json.loads((tmp_path / "a" / "assessment.json").read_text())
    err = mapped[rows, cols].astype(np.float64) - truth[rows, cols]
    s = report["statistics"]
    assert report["kind"] == "sample" and report["n"] == 300 and report["units"] == "m"
    assert s["rmse"]["estimate"] == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-6)
    assert s["bias"]["estimate"] == pytest.approx(err.mean(), rel=1e-6)
    assert s["mae"]["estimate"] == pytest.approx(np.abs(err).mean(), rel=1e-6)
    t = truth[rows, cols].astype(np.float64)
    assert s["r2"]["estimate"] == pytest.approx(1 - np.sum(err**2) / np.sum((t - t.mean()) ** 2), rel=1e-6)
    for key in ("rmse", "mae", "bias", "r2"):
        assert s[key]["ci95_lower"] < s[key]["estimate"] < s[key]["ci95_upper"]
    assert s["bias"]["ci95_lower"] < 0.5 < s["bias"]["ci95_upper"]  # the bias put in is inside its interval
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"assessment.csv", "assessment.md", "scatter.png",
                                                            "assessment.json"}
    assert (tmp_path / "a" / "scatter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(tmp_path / "a" / "assessment.csv")
    assert list(table["statistic"]) == ["rmse", "mae", "bias", "r2"]

    # the same points as a GeoPackage in WGS84 give the same pairs
    gpd.GeoDataFrame({"value": truth[rows, cols]}, geometry=gpd.points_from_xy(x, y), crs="EPSG:32632").to_crs(
        "EPSG:4326").to_file(tmp_path / "plots.gpkg")
    assert assess(tmp_path / "b", map_path, tmp_path / "plots.gpkg") == 0
    again = json.loads((tmp_path / "b" / "assessment.json").read_text())["statistics"]
    assert again["rmse"]["estimate"] == pytest.approx(s["rmse"]["estimate"], rel=1e-6)


def test_a_reference_raster_in_another_crs_is_a_census(tmp_path, maps):
    folder, truth, mapped, map_path = maps
    reference = write_values(tmp_path / "chm.tif", truth)  # same grid: the pairs are exact
    assert assess(tmp_path / "a", map_path, reference) == 0
    report = json.loads((tmp_path / "a" / "assessment.json").read_text())
    err = (mapped[4:].astype(np.float64) - truth[4:]).ravel()
    assert report["kind"] == "census" and report["n"] == err.size
    assert report["statistics"]["rmse"]["estimate"] == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-5)
    assert report["statistics"]["rmse"]["ci95_lower"] is None
    # a 20 m raster in EPSG:3035: warped by the continuous rule, it still tells a good map from a bad one
    from rasterio.warp import Resampling, calculate_default_transform, reproject

    with rasterio.open(reference) as src:
        transform, w, h = calculate_default_transform(src.crs, "EPSG:3035", src.width, src.height, *src.bounds,
                                                      resolution=20)
        out = np.full((h, w), NODATA, np.float32)
        reproject(rasterio.band(src, 1), out, dst_transform=transform, dst_crs="EPSG:3035", dst_nodata=NODATA,
                  resampling=Resampling.average)
    with rasterio.open(tmp_path / "chm3035.tif", "w", driver="GTiff", width=w, height=h, count=1, dtype="float32",
                       crs="EPSG:3035", transform=transform, nodata=NODATA) as dst:
        dst.write(out, 1)
    assert assess(tmp_path / "b", map_path, tmp_path / "chm3035.tif") == 0
    warped = json.loads((tmp_path / "b" / "assessment.json").read_text())["statistics"]
    assert warped["bias"]["estimate"] == pytest.approx(0.5, abs=0.2) and warped["r2"]["estimate"] > 0.8


def test_class_and_value_mix_ups_are_refused_in_one_line(tmp_path, maps, capsys):
    folder, truth, mapped, map_path = maps
    # the class map on the value map's ground: refused for the mix-up, not for lying elsewhere ("values" in err or
    # "classes" in err held for any error naming T32_values.tif, and the class map lay 20 km west of the value map)
    class_map = write_map(tmp_path / "T32_landcover.tif", blocky_codes(120, 150), origin=ORIGIN)
    values = write_values(tmp_path / "chm.tif", truth)
    for argv, reason in (([class_map, values], "holds continuous values, not class codes"),
                         ([map_path, class_map], "holds classes (a colour table or class tags), not values"),
                         ([map_path, values, "--classes", "classes.csv"], "holds values, not classes: --classes")):
        capsys.readouterr()
        assert assess(tmp_path / "out", *argv[:2], *argv[2:]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and reason in err, err
        assert not (tmp_path / "out").exists()
    pd.DataFrame({"x": [ORIGIN[0] + 5], "y": [ORIGIN[1] - 5], "value": ["tall"]}).to_csv(tmp_path / "p.csv", index=False)
    assert assess(tmp_path / "out", map_path, tmp_path / "p.csv") == 2
    assert "not a number" in capsys.readouterr().err


def test_a_value_map_is_assessed_with_tracking_on(tmp_path, maps, monkeypatch, capsys):
    """docs/how-to/regression.md's `eoscale assess MAP --reference RASTER` (tracking on, as by default) stopped with
    "UnboundLocalError: cmap": the MLflow step named the class branch's map."""
    folder, truth, _, map_path = maps
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    reference = write_values(tmp_path / "heights.tif", truth)
    assert main(["assess", str(map_path), "--reference", str(reference), "--output", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "assessment.json").is_file() and (tmp_path / "a" / "mlflow.db").is_file()
    assert "MLflow run" in capsys.readouterr().out
