"""`eoscale sample`: allocations, the drawn pixels (on their strata, without repeats, reproducible, independent of
the strip size), the GeoPackage/CSV/design files, and bad input refused in one line with nothing written."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import rasterio

from eoscale.cli import main
from eoscale.errors import InputError
from eoscale.maps import classmap
from eoscale.maps.design import Allocation, allocate, parse_expected
from tests.maps.maps import NODATA, TABLE, blocky_codes, write_map

CODES = TABLE.codes


@pytest.fixture(scope="module")
def landcover(tmp_path_factory):
    folder = tmp_path_factory.mktemp("map")
    codes = blocky_codes(240, 300)
    return write_map(folder / "T32_landcover.tif", codes), codes


def sample(tmp_path, map_path, *extra):
    return main(["sample", str(map_path), "--output", str(tmp_path / "s"), *extra])


# -- allocation ------------------------------------------------------------------------------------------------
PIXELS = np.array([200_000, 150_000, 3_200_000, 6_450_000])  # Olofsson et al. (2014)'s strata


@pytest.mark.parametrize("allocation", [Allocation("proportional"), Allocation("equal"),
                                        Allocation("min-per-class", min_per_class=75),
                                        Allocation("neyman", expected=dict(zip(CODES, [0.7, 0.6, 0.9, 0.95], strict=True)))])
def test_allocations_sum_to_n(allocation):
    sizes = allocate(641, PIXELS, allocation, CODES)
    assert sizes.sum() == 641 and (sizes >= 0).all()


def test_each_allocation_divides_as_described():
    assert allocate(1000, PIXELS, Allocation("proportional"), CODES).tolist() == [20, 15, 320, 645]
    assert allocate(640, PIXELS, Allocation("equal"), CODES).tolist() == [160] * 4
    # at least K in every stratum, the rest proportional to the large strata's sizes
    assert allocate(1000, PIXELS, Allocation("min-per-class", min_per_class=75), CODES).tolist() == [75, 75, 282, 568]
    u = np.array([0.7, 0.6, 0.9, 0.95])
    neyman = allocate(1000, PIXELS, Allocation("neyman", expected=dict(zip(CODES, u, strict=True))), CODES)
    share = PIXELS * np.sqrt(u * (1 - u))
    assert np.abs(neyman - 1000 * share / share.sum()).max() < 1


def test_allocations_never_ask_more_than_a_stratum_holds():
    pixels = np.array([3, 1000, 0, 20])
    assert allocate(300, pixels, Allocation("equal"), CODES).tolist() == [3, 277, 0, 20]
    assert allocate(1023, pixels, Allocation("proportional"), CODES).tolist() == [3, 1000, 0, 20]  # a census
    assert allocate(40, pixels, Allocation("min-per-class", min_per_class=10), CODES).tolist() == [3, 27, 0, 10]


def test_allocation_errors_say_what_to_give():
    with pytest.raises(InputError, match="larger than the map's 1023 valid pixels"):
        allocate(2000, np.array([3, 1000, 0, 20]), Allocation("proportional"), CODES)
    with pytest.raises(InputError, match="--n 23 or more"):
        allocate(20, np.array([3, 1000, 0, 20]), Allocation("min-per-class", min_per_class=10), CODES)
    with pytest.raises(InputError, match="--expected-accuracy"):
        allocate(20, PIXELS, Allocation("neyman"), CODES)
    assert parse_expected("0.8,80=0.95", CODES) == {10: 0.8, 30: 0.8, 40: 0.8, 80: 0.95}
    with pytest.raises(InputError, match="no value for classes"):
        parse_expected("10=0.9", CODES)


# -- the drawn sample ------------------------------------------------------------------------------------------
def test_sample_files_points_and_design(tmp_path, landcover):
    map_path, codes = landcover
    assert sample(tmp_path, map_path, "--n", "120", "--allocation", "min-per-class", "20", "--seed", "7") == 0
    points = gpd.read_file(tmp_path / "s.gpkg")
    table = pd.read_csv(tmp_path / "s.csv")
    design = json.loads((tmp_path / "s_design.json").read_text())
    assert len(points) == len(table) == 120
    assert list(table.columns) == ["id", "stratum", "stratum_name", "x", "y", "lon", "lat", "row", "col", "reference"]
    assert table["reference"].isna().all()
    with rasterio.open(map_path) as src:
        assert points.crs == src.crs
        rows, cols = rasterio.transform.rowcol(src.transform, points.geometry.x, points.geometry.y)
    # each point lies on a pixel of the stratum it claims; no pixel twice
    assert (codes[rows, cols] == points["stratum"].to_numpy()).all()
    assert (np.asarray(rows) == table["row"].to_numpy()).all() and (np.asarray(cols) == table["col"].to_numpy()).all()
    assert len(set(zip(rows, cols, strict=True))) == 120
    # the design: the map's pixel counts, areas (10 m pixels: 0.01 ha), weights and sizes
    values, counts = np.unique(codes[codes != NODATA], return_counts=True)
    strata = {s["code"]: s for s in design["strata"]}
    assert {c: strata[c]["pixels"] for c in CODES} == dict(zip(values.tolist(), counts.tolist(), strict=True))
    assert strata[80]["area_ha"] == pytest.approx(strata[80]["pixels"] * 0.01)
    assert sum(s["weight"] for s in design["strata"]) == pytest.approx(1.0)
    assert sum(s["n"] for s in design["strata"]) == 120 and min(s["n"] for s in design["strata"]) >= 20
    assert points["stratum"].value_counts().to_dict() == {c: strata[c]["n"] for c in CODES}
    assert design["seed"] == 7 and design["allocation"]["method"] == "min-per-class"
    assert len(design["map"]["sha256"]) == 64 and design["crs"] == "EPSG:32632"
    # the WGS84 coordinates are the same points
    wgs84 = points.to_crs("EPSG:4326")
    assert np.allclose(wgs84.geometry.x, table["lon"], atol=1e-7) and np.allclose(wgs84.geometry.y, table["lat"], atol=1e-7)
    assert not list(tmp_path.glob(".*partial*"))


def test_the_same_seed_draws_the_same_sample_whatever_the_strip_size(tmp_path, landcover, monkeypatch):
    map_path, _ = landcover
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert main(["sample", str(map_path), "--n", "50", "--seed", seed, "--output", str(tmp_path / name)]) == 0
        monkeypatch.setattr(classmap, "STRIP_PIXELS", 300 * 7)  # 7 rows at a time from the second on
    a, b, c = (pd.read_csv(tmp_path / f"{n}.csv") for n in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not a[["row", "col"]].equals(c[["row", "col"]])


def test_a_map_in_a_geographic_crs_has_its_areas_on_the_ellipsoid(tmp_path):
    from pyproj import Geod

    codes = blocky_codes(60, 80)
    map_path = write_map(tmp_path / "geo.tif", codes, crs="EPSG:4326", resolution=0.001, origin=(8.0, 50.0))
    assert sample(tmp_path, map_path, "--n", "10", "--seed", "1") == 0
    design = json.loads((tmp_path / "s_design.json").read_text())
    area, _ = Geod(ellps="WGS84").polygon_area_perimeter([8.0, 8.08, 8.08, 8.0], [50.0, 50.0, 49.94, 49.94])
    valid_share = (codes != NODATA).mean()
    # the rows differ in area by < 0.2 % over 0.06°: the valid share of the box, to that
    assert design["total_area_ha"] == pytest.approx(abs(area) / 1e4 * valid_share, rel=2e-3)


# -- bad input -------------------------------------------------------------------------------------------------
def refused(capsys, tmp_path, code, *, match):
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
    assert not list(tmp_path.glob("s*")) and not list(tmp_path.glob(".s*"))


@pytest.mark.parametrize("n, match", [("0", "at least one point"), ("-3", "at least one point"),
                                      ("10000000", "larger than the map's")])
def test_n_out_of_range_is_refused(tmp_path, landcover, capsys, n, match):
    refused(capsys, tmp_path, sample(tmp_path, landcover[0], "--n", n), match=match)


def test_a_map_without_a_class_table_is_refused_unless_one_is_given(tmp_path, capsys):
    plain = write_map(tmp_path / "plain.tif", blocky_codes(40, 50), tags=False)
    refused(capsys, tmp_path, sample(tmp_path, plain, "--n", "10"), match="EOSCALE_CLASSES")
    TABLE.save(tmp_path / "classes.csv")
    assert sample(tmp_path, plain, "--n", "10", "--classes", str(tmp_path / "classes.csv")) == 0


def test_existing_outputs_are_kept_unless_overwrite(tmp_path, landcover, capsys):
    assert sample(tmp_path, landcover[0], "--n", "10", "--seed", "1") == 0
    before = (tmp_path / "s.csv").read_text()
    assert sample(tmp_path, landcover[0], "--n", "10", "--seed", "2") == 2
    assert "--overwrite" in capsys.readouterr().err and (tmp_path / "s.csv").read_text() == before
    assert sample(tmp_path, landcover[0], "--n", "10", "--seed", "2", "--overwrite") == 0
    assert (tmp_path / "s.csv").read_text() != before


def test_bad_allocations_are_refused(tmp_path, landcover, capsys):
    refused(capsys, tmp_path, sample(tmp_path, landcover[0], "--n", "10", "--allocation", "min-per-class"),
            match="one whole number K")
    refused(capsys, tmp_path, sample(tmp_path, landcover[0], "--n", "10", "--allocation", "neyman"),
            match="--expected-accuracy")
    refused(capsys, tmp_path, sample(tmp_path, landcover[0], "--n", "10", "--allocation", "random"),
            match="choose one of")
