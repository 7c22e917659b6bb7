"""An ingest worker's peak memory does not grow with the scene's area (issue 15: a full 10,980² Sentinel-2
tile must ingest with bounded memory per worker).

The same work at 2,000² and 6,000² pixels (9× the area; two bands: the point is area, not bands), each by
`eoscale ingest` on a fresh one-process Dask worker. Measured: the worker process's own peak resident set,
asked of the worker after the ingest: VmHWM of /proc/self/status, the high-water mark of the process's own
address space. Not `ru_maxrss`: Linux carries it over fork and exec, so a worker spawned by this test's
process reported this process's size (1.7 GB after writing the 6,000² scene). Not tracemalloc: GDAL's block
cache, its warp buffers and the memory-mapped labels are outside Python's allocator, and they are what grew.
The peak is the whole process's (interpreter, Dask, zarr and GDAL included), as an operator sizing a worker
sees it.
"""

from __future__ import annotations

import pytest

from eoscale.ingest import ingest
from tests.rasters import CLASSES_CSV, write_labels, write_scene

SIZES = (2000, 6000)


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        (line,) = [ln for ln in f if ln.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024  # kB


def _ingest_on_fresh_worker(scene, labels, classes, output) -> tuple[int, int]:
    """Ingest on a new single-process worker; returns (the worker's peak RSS in bytes, tiles)."""
    import logging

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster:
        summary = ingest([str(scene)], output, labels=[str(labels)], classes=str(classes), tile_size=128,
                         scheduler=cluster, progress=False)
        with Client(cluster) as client:
            (peak,) = client.run(_peak_rss_bytes).values()
    return peak, summary.tiles


@pytest.fixture(scope="module")
def peaks(tmp_path_factory) -> dict[int, tuple[int, int]]:
    root = tmp_path_factory.mktemp("memory")
    (root / "classes.csv").write_text(CLASSES_CSV)
    out = {}
    for size in SIZES:
        scene = root / f"scene{size}.tif"
        classes = write_scene(scene, height=size, width=size, band_names=["B04", "B08"],
                              nodata_box=(slice(0, size // 4), slice(0, size // 3)))
        write_labels(root / f"labels{size}.tif", scene, classes)
        out[size] = _ingest_on_fresh_worker(scene, root / f"labels{size}.tif", root / "classes.csv",
                                            root / f"store{size}.zarr")
    return out


@pytest.mark.slow
def test_a_workers_peak_memory_does_not_grow_with_the_scenes_area(peaks):
    (small, small_tiles), (large, large_tiles) = peaks[SIZES[0]], peaks[SIZES[1]]
    assert large_tiles > 8 * small_tiles  # the large scene really is ~9x the work
    mib = 2**20
    print(f"worker peak {small / mib:.0f} MiB at {SIZES[0]}², {large / mib:.0f} MiB at {SIZES[1]}²: {large / small:.2f}x")
    # before the strips and the capped cache: label warp and validity scan of the whole scene, ~40 bytes a pixel
    # (1.4 GB at 6,000²), and GDAL's block cache at up to 5 % of RAM
    assert large / small <= 1.3, f"worker peak {large / mib:.0f} MiB at {SIZES[1]}² vs {small / mib:.0f} MiB at {SIZES[0]}²"
    # and the growth is far below the large scene's own pixels (6,000² × 2 bands × 2 bytes = 137 MiB)
    assert large - small < SIZES[1] ** 2 * 2 * 2 / 2, f"{(large - small) / mib:.0f} MiB more at {SIZES[1]}²"
