"""`eoscale label`: a sample's reference column filled from a raster in another CRS and resolution, both files;
labels already there kept unless --overwrite; points off the raster's data left empty and said."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import rasterio
from rasterio.warp import Resampling, calculate_default_transform, reproject

from eoscale.cli import main
from tests.maps.maps import NODATA, blocky_codes, truth_of, write_map


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("label")
    codes = blocky_codes(200, 260)
    truth = truth_of(codes, error_rate=0.1)
    write_map(folder / "map.tif", codes)
    write_map(folder / "truth.tif", truth)
    assert main(["sample", str(folder / "map.tif"), "--n", "80", "--allocation", "min-per-class", "10", "--seed", "2",
                 "--output", str(folder / "s")]) == 0
    return folder, codes, truth


def test_labels_come_from_the_raster_under_each_point(tmp_path, sampled):
    folder, codes, truth = sampled
    for name in ("s.csv", "s.gpkg", "s_design.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    assert main(["label", str(tmp_path / "s.csv"), "--reference", str(folder / "truth.tif")]) == 0
    csv = pd.read_csv(tmp_path / "s.csv")
    gpkg = gpd.read_file(tmp_path / "s.gpkg")
    expected = truth[csv["row"], csv["col"]]
    assert (csv["reference"] == expected).all()
    assert (gpkg["reference"].astype(int).to_numpy() == truth[gpkg["row"], gpkg["col"]]).all()
    assert gpkg.crs is not None and len(gpkg) == 80


def test_a_raster_in_another_crs_and_resolution_labels_the_same(tmp_path, sampled):
    folder, codes, truth = sampled
    for name in ("s.csv", "s_design.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    with rasterio.open(folder / "truth.tif") as src:
        transform, width, height = calculate_default_transform(src.crs, "EPSG:3035", src.width, src.height,
                                                               *src.bounds, resolution=5.0)
        profile = src.profile
        warped = np.full((height, width), NODATA, dtype=np.uint8)
        reproject(truth, warped, src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                  dst_crs="EPSG:3035", resampling=Resampling.nearest, src_nodata=NODATA, dst_nodata=NODATA)
    profile.update(crs="EPSG:3035", transform=transform, width=width, height=height)
    with rasterio.open(tmp_path / "ref3035.tif", "w", **profile) as dst:
        dst.write(warped, 1)
    assert main(["label", str(tmp_path / "s.csv"), "--reference", str(tmp_path / "ref3035.tif")]) == 0
    csv = pd.read_csv(tmp_path / "s.csv", dtype={"reference": "Int64"})
    agree = (csv["reference"] == truth[csv["row"], csv["col"]]).mean()
    assert agree >= 0.95  # a 5 m grid in another CRS: only points near a boundary may fall on a neighbour


def test_existing_labels_are_kept_unless_overwrite_and_nodata_stays_empty(tmp_path, sampled, capsys):
    folder, codes, truth = sampled
    for name in ("s.csv", "s_design.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    holes = truth.copy()
    holes[:, :130] = NODATA  # the western half has no reference
    write_map(tmp_path / "holes.tif", holes)
    assert main(["label", str(tmp_path / "s.csv"), "--reference", str(tmp_path / "holes.tif")]) == 0
    captured = capsys.readouterr()
    csv = pd.read_csv(tmp_path / "s.csv", dtype={"reference": "Int64"})
    west = csv["col"] < 130
    assert csv.loc[west, "reference"].isna().all() and csv.loc[~west, "reference"].notna().all()
    assert f"{int(west.sum())} points fall on the reference's nodata" in captured.err
    before = (tmp_path / "s.csv").read_bytes()
    assert main(["label", str(tmp_path / "s.csv"), "--reference", str(folder / "truth.tif")]) == 2
    assert "labelled already: pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "s.csv").read_bytes() == before
    assert main(["label", str(tmp_path / "s.csv"), "--reference", str(folder / "truth.tif"), "--overwrite"]) == 0
    assert pd.read_csv(tmp_path / "s.csv")["reference"].notna().all()


def test_drop_unlabelled_removes_the_points_off_the_reference(tmp_path, sampled):
    folder, codes, truth = sampled
    for name in ("s.csv", "s.gpkg", "s_design.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    holes = truth.copy()
    holes[:, :130] = NODATA
    write_map(tmp_path / "holes.tif", holes)
    west = int((pd.read_csv(tmp_path / "s.csv")["col"] < 130).sum())
    assert main(["label", str(tmp_path / "s.gpkg"), "--reference", str(tmp_path / "holes.tif"), "--drop-unlabelled"]) == 0
    csv, gpkg = pd.read_csv(tmp_path / "s.csv"), gpd.read_file(tmp_path / "s.gpkg")
    assert len(csv) == len(gpkg) == 80 - west and (csv["col"] >= 130).all() and csv["reference"].notna().all()
