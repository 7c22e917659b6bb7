"""A synthetic season ingested as a time series: SAFE products and STAC Items give identical tiles with T steps, each
date its own mask, missing dates as masked steps; multi-band files dated by a CSV, another grid warped onto the
reference grid, composites with observation counts, --max-dates; and the bad inputs (one line, exit 2, no store)."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import rasterio
import rasterio.shutil
import xarray as xr
from rasterio.vrt import WarpedVRT

from eoscale.cli import main
from eoscale.store import schema
from eoscale.store.open import open_store
from tests.ingest.test_bad_input import assert_one_line_error

SIZE = 128
DATES = 6


def ingest(capsys, out, *args: str) -> tuple[int, str]:
    code = main(["ingest", "--output", str(out), "--tile-size", "32", "--workers", "1", "-q", "--min-valid", "0.1",
                 *map(str, args)])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def seasons(tmp_path_factory):
    """The same season (2 places, 6 dates, place 0 missing one, clouds) as SAFE products, COGs with STAC Items and
    multi-band files with a dates CSV, written by the CLI as a user writes it."""
    root = tmp_path_factory.mktemp("season")
    for layout in ("safe", "cog", "multiband"):
        assert main(["synth", str(root / layout), "--layout", layout, "--dates", str(DATES), "--scenes", "2",
                     "--size", str(SIZE), "--seed", "2"]) == 0
    return root


@pytest.fixture(scope="module")
def series_stores(seasons, tmp_path_factory):
    out = tmp_path_factory.mktemp("series-stores")
    common = ["--tile-size", "32", "--workers", "1", "-q", "--min-valid", "0.1", "--time-series"]
    labels = ["--labels", str(seasons / "safe" / "labels" / "*.tif"), "--classes", str(seasons / "safe" / "classes.csv")]
    assert main(["ingest", "--scenes", str(seasons / "safe" / "scenes" / "*"), "--output", str(out / "safe.zarr"),
                 *labels, *common]) == 0
    assert main(["ingest", "--stac", str(seasons / "cog" / "scenes" / "*" / "*" / "*.json"),
                 "--output", str(out / "stac.zarr"), *labels, *common]) == 0
    return out


def _load(path) -> xr.Dataset:
    return open_store(path).load()


def test_a_season_from_safe_products_and_from_stac_items_gives_identical_tiles(series_stores, seasons):
    safe, stac = _load(series_stores / "safe.zarr"), _load(series_stores / "stac.zarr")
    assert safe.attrs[schema.ATTR_TIME_STEPS] == DATES == safe.sizes[schema.TIME]
    for name in (schema.IMAGES, schema.LABELS, schema.DATES, schema.DATE_VALID, schema.SCENE, schema.ROW_OFF,
                 schema.SPLIT):
        np.testing.assert_array_equal(safe[name].values, stac[name].values, err_msg=name)
    assert safe.attrs[schema.ATTR_STATISTICS] == stac.attrs[schema.ATTR_STATISTICS]
    manifest = json.loads((seasons / "safe" / "manifest.json").read_text())
    expected = {}
    for record in manifest["scenes"]:
        expected.setdefault(record["place"], []).append(np.datetime64(record["date"], "ns"))
    series = [[np.datetime64(d["date"], "ns") for d in s["series"]] for s in safe.attrs[schema.ATTR_SCENES]]
    assert sorted(map(str, series)) == sorted(map(str, expected.values())), "a place a synthetic place, all its dates"
    for tile in range(safe.sizes[schema.TILE]):
        dates = safe[schema.DATES].values[tile]
        known = list(dates[~np.isnat(dates)])
        assert known == series[int(safe[schema.SCENE][tile])], "each tile holds its place's dates, sorted"
    # place 0 misses a date: its tiles end in a masked step without a date
    short = [k for k, dates in enumerate(series) if len(dates) < DATES]
    place0 = np.isin(safe[schema.SCENE].values, short)
    assert len(expected["place_000"]) < DATES and place0.any()
    assert np.isnat(safe[schema.DATES].values[place0, -1]).all()
    assert (safe[schema.DATE_VALID].values[place0, -1] == 0).all()


def test_each_date_keeps_its_own_mask_and_masked_pixels_are_nodata(series_stores):
    ds = _load(series_stores / "safe.zarr")
    images, date_valid = ds[schema.IMAGES].values, ds[schema.DATE_VALID].values
    nodata = images == ds.attrs[schema.ATTR_NODATA]
    # nodata is in every band or none, and date_valid is the share of pixels with data that date
    assert (nodata.all(axis=2) == nodata.any(axis=2)).all()
    np.testing.assert_allclose(date_valid, 1 - nodata[:, :, 0].mean(axis=(2, 3)), atol=1e-6)
    # clouds differ from date to date: some tiles are clear on one date and masked on another
    partly = (date_valid > 0) & (date_valid < 1)
    assert partly.any() and (date_valid[:, :-1] == 0).any(), "a date entirely cloudy over a tile is a masked step"
    assert (date_valid.max(axis=1) > 0).all()
    # statistics over valid pixels of all dates: no nodata zero counted, and every valid pixel counted once per band
    stats = ds.attrs[schema.ATTR_STATISTICS]
    assert min(stats["min"]) >= 1
    assert stats["valid_pixels"][0] == int((~nodata[:, :, 0]).sum())
    info = ds.attrs[schema.ATTR_SCENES][0]
    assert len(info["series"]) >= DATES - 1 and all(step["scenes"] for step in info["steps"])


def test_multiband_files_dated_by_a_csv_and_another_grid_warped_on(seasons, series_stores, tmp_path, capsys):
    """Plain GeoTIFFs dated by a CSV (their tags removed), one date of place 0 reprojected to EPSG:3035: it is read
    onto place 0's reference grid, where it matches the SAFE products' tiles closely."""
    rows = list(csv.DictReader((seasons / "multiband" / "dates.csv").open()))
    folder = tmp_path / "files"
    folder.mkdir()
    listed = []
    for k, row in enumerate(rows):
        source = seasons / "multiband" / row["path"]
        target = folder / f"{row['place']}-{k}.tif"
        with rasterio.open(source) as src:
            descriptions = src.descriptions
            if k == 2:  # a date in another CRS and grid
                with WarpedVRT(src, crs="EPSG:3035", resampling=rasterio.enums.Resampling.nearest) as vrt:
                    rasterio.shutil.copy(vrt, target, driver="GTiff")
            else:
                rasterio.shutil.copy(src, target, driver="GTiff")
        with rasterio.open(target, "r+") as dst:
            dst.update_tags(ACQUISITIONDATETIME="")  # no date in the file: the CSV gives it
            for i, d in enumerate(descriptions, start=1):
                dst.set_band_description(i, d)
        listed.append([target.name, row["date"], row["place"]])
    csv_path = folder / "dates.csv"
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerows([["path", "date", "place"], *listed])
    code, err = ingest(capsys, tmp_path / "mb.zarr", "--dates-csv", csv_path)
    assert code == 0, err
    mb, safe = _load(tmp_path / "mb.zarr"), _load(series_stores / "safe.zarr")
    assert mb.sizes[schema.TIME] == DATES
    assert {str(d)[:10] for d in np.unique(mb[schema.DATES].values) if not np.isnat(d)} == {r["date"] for r in rows}
    with rasterio.open(folder / "place_000-2.tif") as src:
        assert src.crs.to_epsg() == 3035
    # the reprojected date (step 2 of place 0) on the reference grid: its clear pixels near the SAFE product's
    place0 = mb[schema.SCENE].values == 0
    warped, reference = mb[schema.IMAGES].values[place0, 2], safe[schema.IMAGES].values[place0, 2]
    both = (warped[:, 0] != 0) & (reference[:, 0] != 0)
    assert both.mean() > 0.2
    b08 = 6
    difference = np.abs(warped[:, b08][both].astype(float) - reference[:, b08][both])
    assert np.median(difference) < 0.1 * np.median(reference[:, b08][both])


def test_monthly_composites_record_their_observations(seasons, tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "m.zarr", "--scenes", seasons / "safe" / "scenes" / "*", "--composite",
                       "monthly")
    assert code == 0, err
    ds = _load(tmp_path / "m.zarr")
    months = ds[schema.DATES].values[0].astype("datetime64[M]")
    assert ds.sizes[schema.TIME] == 10 and list(months) == list(np.arange("2024-02", "2024-12", dtype="datetime64[M]"))
    observations = ds[schema.OBSERVATIONS].values
    assert observations.max() == 1 and (observations == 0).any()
    assert (ds[schema.DATE_VALID].values[observations == 0] == 0).all(), "a month without a clear scene is masked"
    assert ds.attrs[schema.ATTR_INGEST]["time_series"]["composite"] == "monthly"


def test_max_dates_keeps_the_clearest_dates(seasons, tmp_path, capsys):
    code, err = ingest(capsys, tmp_path / "x.zarr", "--scenes", seasons / "safe" / "scenes" / "*", "--max-dates", "3")
    assert code == 0, err
    ds = _load(tmp_path / "x.zarr")
    assert ds.sizes[schema.TIME] == 3
    dates = ds[schema.DATES].values
    assert not np.isnat(dates).any() and (np.diff(dates, axis=1) > np.timedelta64(0)).all()


def test_info_shows_the_dates(series_stores, capsys):
    assert main(["info", str(series_stores / "safe.zarr")]) == 0
    out = capsys.readouterr().out
    assert "time steps (6 a tile)" in out and "2024-02-14" in out
    assert main(["info", str(series_stores / "safe.zarr"), "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["dates"]
    assert len(steps) == DATES and steps[0]["dates"] == ["2024-02-14"]


def _undated(tmp_path, name: str, seed: int = 0):
    assert main(["synth", str(tmp_path / name), "--scenes", "2", "--size", "64", "--seed", str(seed)]) == 0
    return tmp_path / name


def _no_store(tmp_path, name: str) -> None:
    assert not (tmp_path / name).exists() and not (tmp_path / f"{name}.partial").exists()


def test_bad_series_inputs_fail_in_one_line(seasons, tmp_path, capsys):
    undated = _undated(tmp_path, "undated")
    capsys.readouterr()
    code, err = ingest(capsys, tmp_path / "a.zarr", "--time-series", "--scenes", undated / "scenes" / "*.tif")
    assert_one_line_error(code, err, "no date can be read")
    _no_store(tmp_path, "a.zarr")
    dated = sorted((seasons / "multiband" / "scenes" / "place_000").glob("*.tif"))[:2]
    code, err = ingest(capsys, tmp_path / "b.zarr", "--time-series", "--scenes", *dated, undated / "scenes" / "scene_000.tif")
    assert_one_line_error(code, err, "dates-csv")
    assert "are dated but 1 are not" in err
    _no_store(tmp_path, "b.zarr")
    # two scenes of one place and date
    shutil.copy(undated / "scenes" / "scene_000.tif", tmp_path / "copy.tif")
    dates = tmp_path / "dates.csv"
    dates.write_text(f"path,date\n{undated / 'scenes' / 'scene_000.tif'},2024-05-01\n{tmp_path / 'copy.tif'},2024-05-01\n")
    code, err = ingest(capsys, tmp_path / "c.zarr", "--dates-csv", dates)
    assert_one_line_error(code, err, "same place and date")
    _no_store(tmp_path, "c.zarr")
    # one series in two CRSs that do not overlap (scene 1 lies elsewhere, and in EPSG:3035)
    with rasterio.open(undated / "scenes" / "scene_001.tif") as src, WarpedVRT(src, crs="EPSG:3035") as vrt:
        rasterio.shutil.copy(vrt, tmp_path / "far.tif", driver="GTiff")
    dates.write_text(f"path,date,place\n{undated / 'scenes' / 'scene_000.tif'},2024-05-01,a\n"
                     f"{tmp_path / 'far.tif'},2024-06-01,a\n")
    code, err = ingest(capsys, tmp_path / "d.zarr", "--dates-csv", dates, "--band-names",
                       "B02,B03,B04,B05,B06,B07,B08,B8A,B11,B12")
    assert_one_line_error(code, err, "does not overlap")
    assert "EPSG:3035" in err and "EPSG:32632" in err
    _no_store(tmp_path, "d.zarr")
    code, err = ingest(capsys, tmp_path / "e.zarr", "--scenes", seasons / "safe" / "scenes" / "*", "--composite", "weekly")
    assert_one_line_error(code, err, "--composite")
    code, err = ingest(capsys, tmp_path / "e.zarr", "--scenes", seasons / "safe" / "scenes" / "*", "--composite", "16d",
                       "--max-dates", "2")
    assert_one_line_error(code, err, "not both")
    _no_store(tmp_path, "e.zarr")
