"""`bench_loader` runs every measurement on a tiny store and returns the figures (timings are not judged)."""

from __future__ import annotations

import argparse

import pytest

from eoscale.bench.loader import _gdal_cache_dropper, _libgdal, bench_loader, configure


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_bench_loader_returns_every_figure(store):
    report = bench_loader(store, workers=1, batch_size=8, seconds=0.2, repeats=2, torchgeo=False, show=False)
    for key in ("loader", "loader_compact", "shared_memory_off", "direct_decode_off", "zarr_shards", "decode_only",
                "random_zarr", "rasterio_windows"):
        assert report[key]["tiles_per_s"] > 0 and report[key]["mb_per_s"] > 0 and report[key]["processes"] == 1
        runs = report[key]["tiles_per_s_runs"]
        assert len(runs) == 2 and report[key]["tiles_per_s"] == min(runs)  # the lower middle of two
    assert report["repeats"] == 2 and set(report["switches_vs_compact"]) == {"shared_memory_off", "direct_decode_off",
                                                                             "zarr_shards"}
    assert report["torchgeo"] is None and report["source_windows"] == "rasterio_windows"
    assert set(report["ratios"]) == set(report["goals"]) == {"decode_only", "random_zarr", "source_windows"}
    assert all(r > 0 for r in report["ratios"].values())
    assert report["loader"]["epochs"] >= 1 and report["tile_size"] == 16 and report["bands"] == 10
    # no accelerator here: the ratios use the compact batches (normalising would take a worker's core)
    assert report["loader"]["device"] == "cpu" and report["ratio_loader"] == "loader_compact"
    assert report["ratios"]["decode_only"] == report["loader_compact"]["tiles_per_s"] / report["decode_only"]["tiles_per_s"]
    for key in ("loader", "loader_compact", "decode_only"):
        assert report[key]["tiles_per_cpu_s"] > 0
    assert set(report["cpu_ratios"]) == {"loader", "loader_compact"} and all(r > 0 for r in report["cpu_ratios"].values())


def test_gdal_block_cache_is_emptied_between_source_reads(store):
    import ctypes

    import rasterio
    from rasterio.windows import Window

    from eoscale.data import read_store_attrs

    drop, gdal = _gdal_cache_dropper(), _libgdal()
    assert drop is not None and gdal is not None  # found on Linux
    gdal.GDALGetCacheUsed64.restype = ctypes.c_int64
    with rasterio.open(read_store_attrs(store)["scenes"][0]["paths"][0]) as src:
        src.read(window=Window(0, 0, 16, 16))
        assert gdal.GDALGetCacheUsed64() > 0
        drop()
        assert gdal.GDALGetCacheUsed64() == 0


def test_bench_loader_measures_torchgeo_when_installed(store):
    pytest.importorskip("torchgeo")
    report = bench_loader(store, workers=0, batch_size=8, seconds=0.5, torchgeo=True, show=False)
    assert report["torchgeo"]["tiles_per_s"] > 0 and report["source_windows"] == "torchgeo"


def test_command_line_options():
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["tiles.zarr", "--workers", "3", "--seconds", "1", "--no-torchgeo"])
    assert (args.store, args.workers, args.seconds, args.no_torchgeo, args.batch_size, args.repeats) == (
        "tiles.zarr", 3, 1.0, True, 32, 3)
