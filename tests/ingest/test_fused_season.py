"""A season of Sentinel-2 and Sentinel-1 with a DEM in one store (`eoscale.ingest.fused_series`): `eoscale synth --dates
--sensors s2,s1,dem` → `ingest --time-series --static` → images (tile, T, C, y, x) with C = S2 + S1 + the DEM's
layers as band groups, T one calendar of both sensors' dates; each sensor present on its own dates only; composites
per sensor (S2: median of its clear observations; S1: median in linear power); the DEM's layers those of the
single-date `--static` path; the loader reads it and U-TAE fits on it. On main every test here failed at its fixture:
a season was refused with --sensors, and ingest refused --time-series of several sensors and with --static."""

from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from eoscale.sensors.sentinel1 import DB_FLOOR, STORE_AT_0_DB, STORE_PER_DB
from eoscale.store import schema
from eoscale.store.open import open_store

S2 = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
S1 = ["VV", "VH"]
DEM = ["ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"]
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def season(tmp_path_factory) -> Path:
    """One place seen on 8 optical dates (one missing, clouds as nodata 0) and 4 radar passes, and its DEM."""
    root = tmp_path_factory.mktemp("fused-season") / "set"
    assert main(["synth", str(root), "--dates", "8", "--scenes", "1", "--size", "96", "--sensors", "s2,s1,dem",
                 "--seed", "1"]) == 0
    return root


def _manifest(season: Path) -> dict:
    return json.loads((season / "manifest.json").read_text())


def _inputs(season: Path, optical: list[str] | None = None, radar: list[str] | None = None) -> list[str]:
    manifest = _manifest(season)
    optical = optical if optical is not None else [str(season / s["image"]) for s in manifest["scenes"]]
    radar = radar if radar is not None else [str(season / p["folder"]) for p in manifest["sentinel1"]]
    return ["--scenes", *optical, *radar, "--labels", str(season / manifest["scenes"][0]["labels"]),
            "--classes", str(season / "classes.csv"), "--tile-size", "32", "--workers", "1", "-q"]


def _ingest(out: Path, season: Path, *extra: str, **inputs) -> Path:
    assert main(["ingest", *_inputs(season, **inputs), "--output", str(out), *extra]) == 0
    return out


@pytest.fixture(scope="module")
def dated(season, tmp_path_factory) -> Path:
    """The season as it is: a step a date of either sensor."""
    return _ingest(tmp_path_factory.mktemp("dated") / "s.zarr", season, "--time-series", "--static",
                   str(season / _manifest(season)["dems"][0]["file"]))


def _tiles(store):
    """(row_off, col_off) of each tile."""
    return list(zip(store[schema.ROW_OFF].values.tolist(), store[schema.COL_OFF].values.tolist(), strict=True))


def test_the_store_holds_both_sensors_and_the_dem_on_one_calendar(dated, season):
    store = open_store(dated)
    attrs = store.attrs
    manifest = _manifest(season)
    s2_dates = sorted(s["date"] for s in manifest["scenes"])
    s1_dates = sorted(p["date"] for p in manifest["sentinel1"])
    calendar = sorted(s2_dates + s1_dates)
    assert not set(s2_dates) & set(s1_dates)  # the synth's passes lie between the optical dates
    assert attrs[schema.ATTR_BANDS] == S2 + S1 + DEM
    assert attrs[schema.ATTR_SENSORS] == [{"name": "sentinel-2", "bands": S2}, {"name": "sentinel-1", "bands": S1},
                                          {"name": "copdem", "bands": DEM}]
    images = store[schema.IMAGES].values
    assert images.shape == (len(store[schema.IMAGES]), len(calendar), 16, 32, 32)
    dates = [str(d)[:10] for d in store[schema.DATES].values[0]]
    assert dates == calendar
    steps = attrs[schema.ATTR_SCENES][0]["steps"]
    assert [s["sensors"] for s in steps] == [["sentinel-2"] if d in s2_dates else ["sentinel-1"] for d in calendar]
    nodata = attrs[schema.ATTR_NODATA]
    for k, date in enumerate(calendar):
        optical, radar = images[:, k, :10], images[:, k, 10:12]
        if date in s1_dates:  # a pass: radar everywhere (no swath edge in the synthetic passes), no optical band
            assert (optical == nodata).all() and (radar != nodata).all(), date
        else:  # an optical date: no radar band, the optical bands where it is clear
            assert (radar == nodata).all() and (optical != nodata).any(), date
    # a step is valid where any sensor has data: the passes' steps are whole
    assert (store[schema.DATE_VALID].values[:, [calendar.index(d) for d in s1_dates]] == 1).all()


def test_s2_bands_on_a_date_are_the_scenes_pixels(dated, season):
    """Guards the optical group: each optical step holds its own scene's pixels, nodata exactly where it is cloudy."""
    store = open_store(dated)
    images, nodata = store[schema.IMAGES].values, store.attrs[schema.ATTR_NODATA]
    calendar = [str(d)[:10] for d in store[schema.DATES].values[0]]
    for scene in _manifest(season)["scenes"]:
        k = calendar.index(scene["date"])
        with rasterio.open(season / scene["image"]) as src:
            pixels = src.read()
        for i, (row, col) in enumerate(_tiles(store)):
            expected = pixels[:, row : row + 32, col : col + 32]
            cloudy = (expected == 0).all(axis=0)
            got = images[i, k, :10]
            np.testing.assert_array_equal(got[:, ~cloudy], expected[:, ~cloudy])
            assert (got[:, cloudy] == nodata).all()


def test_the_radar_and_the_dem_equal_the_single_date_paths(dated, season, tmp_path):
    """Guards the other groups against the single-date code paths that users already trust: a pass's radar bands are
    what a single-date fused ingest of it with the optical scene of the same grid stores, and the DEM's layers are
    what a single-date `--static` ingest stores."""
    manifest = _manifest(season)
    first = str(season / manifest["scenes"][0]["image"])
    dem = str(season / manifest["dems"][0]["file"])
    single = open_store(_ingest(tmp_path / "one.zarr", season, "--static", dem, "--min-valid", "0",
                                optical=[first], radar=[str(season / manifest["sentinel1"][0]["folder"])]))
    store = open_store(dated)
    assert single.attrs[schema.ATTR_BANDS] == S2 + S1 + DEM
    at = {tile: i for i, tile in enumerate(_tiles(single))}
    calendar = [str(d)[:10] for d in store[schema.DATES].values[0]]
    k = calendar.index(manifest["sentinel1"][0]["date"])
    images, reference = store[schema.IMAGES].values, single[schema.IMAGES].values[:, 0]
    assert all(tile in at for tile in _tiles(store))
    for i, tile in enumerate(_tiles(store)):
        np.testing.assert_array_equal(images[i, k, 10:12], reference[at[tile], 10:12])
        # the DEM's layers, the same on every step where a sensor has data (the pass's step: everywhere)
        np.testing.assert_array_equal(images[i, k, 12:], reference[at[tile], 12:])
        has_data = (images[i, :, :12] != 0).any(axis=1)
        layers = images[i, :, 12:].transpose(1, 0, 2, 3)
        np.testing.assert_array_equal(layers[:, has_data],
                                      np.broadcast_to(reference[at[tile], 12:, None], (4, *has_data.shape))[:, has_data])
        assert (layers[:, ~has_data] == 0).all()  # and nodata where no sensor has data on a step
    # statistics per group over its own pixels: the radar bands' mean is over the passes' pixels only
    radar = images[:, :, 10].astype(np.float64)
    assert np.isclose(store.attrs[schema.ATTR_STATISTICS]["mean"][10], radar[radar != 0].mean())


def _store_db_to_power(values: np.ndarray) -> np.ndarray:
    return 10.0 ** ((values - STORE_AT_0_DB) / STORE_PER_DB / 10.0)


def test_composites_are_each_sensors_median_on_one_calendar(season, tmp_path):
    """Guards the composite rule: per interval, the optical bands are the median of the clear optical observations
    (computed here with numpy from the files), the radar bands the median in linear power of the passes (not the
    median of their decibels), and an interval without a pass has no radar while its optical bands are present."""
    store = open_store(_ingest(tmp_path / "c.zarr", season, "--time-series", "--composite", "100d"))
    manifest = _manifest(season)
    images = store[schema.IMAGES].values
    starts = [str(d)[:10] for d in store[schema.DATES].values[0]]
    assert starts == ["2024-02-14", "2024-05-24", "2024-09-01"]  # 100 days from the first date of either sensor
    bounds = [dt.date.fromisoformat(s) for s in starts] + [dt.date.max]

    def interval(date: str) -> int:
        day = dt.date.fromisoformat(date)
        return next(k for k in range(len(starts)) if bounds[k] <= day < bounds[k + 1])

    optical: dict[int, list[np.ndarray]] = {}
    for scene in manifest["scenes"]:
        with rasterio.open(season / scene["image"]) as src:
            optical.setdefault(interval(scene["date"]), []).append(src.read().astype(np.float64))
    radar: dict[int, list[np.ndarray]] = {}
    for p in manifest["sentinel1"]:
        power = []
        for band in S1:
            with rasterio.open(season / p["bands"][band]) as src:
                power.append(src.read(1).astype(np.float64))
        radar.setdefault(interval(p["date"]), []).append(np.stack(power))
    assert sorted(len(v) for v in radar.values()) == [1, 1, 2]  # an interval of two passes: an even median
    linear_differs = False
    for k in range(len(starts)):
        stack = np.stack([np.where((o == 0).all(axis=0), np.nan, o) for o in optical[k]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels: cloudy on every date of the interval
            s2_median = np.nanmedian(stack, axis=0)
        if k in radar:
            power = np.median(np.stack(radar[k]), axis=0)
            s1_expected = np.rint(10 * np.log10(np.maximum(power, 10 ** (DB_FLOOR / 10))) * STORE_PER_DB + STORE_AT_0_DB)
        for i, (row, col) in enumerate(_tiles(store)):
            window = (slice(None), slice(row, row + 32), slice(col, col + 32))
            expected = s2_median[window]
            clear = ~np.isnan(expected).any(axis=0)
            np.testing.assert_array_equal(images[i, k, :10][:, clear], np.rint(expected[:, clear]))
            assert (images[i, k, :10][:, ~clear] == 0).all()
            if k not in radar:
                assert (images[i, k, 10:12] == 0).all()
                continue
            got = images[i, k, 10:12].astype(np.float64)
            # the passes are stored at 0.01 dB before their median is taken: within one store step of the exact one
            assert np.abs(got - s1_expected[window]).max() <= 1
            if len(radar[k]) == 2:
                db_median = np.mean([np.rint(10 * np.log10(r[window]) * STORE_PER_DB + STORE_AT_0_DB)
                                     for r in radar[k]], axis=0)
                linear_differs |= bool((np.abs(got - db_median) > 5).any())
    assert linear_differs, "the radar median in dB and in linear power differ over speckle"


def test_the_loader_reads_it_and_utae_fits(dated, tmp_path):
    """Guards the contract with training: the loader's sensor groups are the store's, a pass's step reads 0 in the
    optical channels, and `fit` of the U-TAE config runs 2 steps on it."""
    from eoscale.data import TileDataModule

    dm = TileDataModule(str(dated), batch_size=2, num_workers=0)
    dm.setup("fit")
    assert [(g.name, g.start, g.stop) for g in dm.sensor_groups] == [("sentinel-2", 0, 10), ("sentinel-1", 10, 12),
                                                                    ("copdem", 12, 16)]
    batch = dm.normalise(next(iter(dm.val_dataloader())))
    store = open_store(dated)
    calendar = [str(d)[:10] for d in store[schema.DATES].values[0]]
    passes = [k for k, s in enumerate(store.attrs[schema.ATTR_SCENES][0]["steps"]) if s["sensors"] == ["sentinel-1"]]
    assert batch["image"].shape[1:] == (len(calendar), 16, 32, 32)
    assert (batch["image"][:, passes, :10] == 0).all() and (batch["image"][:, passes, 10:12] != 0).any()
    assert main(["fit", "--config", str(CONFIGS / "temporal_utae.yaml"), "--data.init_args.store", str(dated),
                 "--data.init_args.batch_size", "2", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
                 "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false"]) == 0
    assert list(tmp_path.rglob("last.ckpt"))
