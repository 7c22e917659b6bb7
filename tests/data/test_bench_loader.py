"""`bench_loader` runs every measurement on a tiny store and returns the figures (timings are not judged)."""

from __future__ import annotations

import argparse

import pytest

from eoscale.bench.loader import bench_loader, configure


def test_bench_loader_returns_every_figure(store):
    report = bench_loader(store, workers=1, batch_size=8, seconds=0.3, torchgeo=False, show=False)
    for key in ("loader", "decode_only", "random_zarr", "rasterio_windows"):
        assert report[key]["tiles_per_s"] > 0 and report[key]["mb_per_s"] > 0 and report[key]["processes"] == 1
    assert report["torchgeo"] is None and report["source_windows"] == "rasterio_windows"
    assert set(report["ratios"]) == set(report["goals"]) == {"decode_only", "random_zarr", "source_windows"}
    assert all(r > 0 for r in report["ratios"].values())
    assert report["loader"]["epochs"] >= 1 and report["tile_size"] == 16 and report["bands"] == 10


def test_bench_loader_measures_torchgeo_when_installed(store):
    pytest.importorskip("torchgeo")
    report = bench_loader(store, workers=0, batch_size=8, seconds=0.5, torchgeo=True, show=False)
    assert report["torchgeo"]["tiles_per_s"] > 0 and report["source_windows"] == "torchgeo"


def test_command_line_options():
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["tiles.zarr", "--workers", "3", "--seconds", "1", "--no-torchgeo"])
    assert (args.store, args.workers, args.seconds, args.no_torchgeo, args.batch_size) == ("tiles.zarr", 3, 1.0, True, 32)
