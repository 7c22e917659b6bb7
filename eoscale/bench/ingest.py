"""`eoscale bench ingest`: tiles/s and MB/s of `eoscale ingest` against the limit of the same work done
plainly: reading the same tile windows with rasterio and compressing the same bytes with the same codec,
with the same number of processes, without Zarr, Dask, labels, statistics or resumability.

Both run on the same synthetic scenes in one run. Figures: the whole command (cluster start and stop,
scans, planning, finishing included) and its shard phase alone (the steady state that large ingests
approach), each as a ratio against the baseline.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import numpy as np


def _baseline_worker(job: tuple[str, list[tuple[int, int]], int]) -> int:
    """Read each tile window of one scene (all bands) and compress it with the store's codec."""
    import rasterio
    from numcodecs import Blosc
    from rasterio.windows import Window

    path, offsets, tile = job
    codec = Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)
    stored = 0
    with rasterio.open(path) as src:
        for row, col in offsets:
            stored += len(codec.encode(np.ascontiguousarray(src.read(window=Window(col, row, tile, tile)))))
    return stored


def _warm(_: int) -> int:
    import numcodecs  # noqa: F401
    import rasterio  # noqa: F401

    return 0


def compare_codecs(store: Path, *, tiles: int = 256) -> dict:
    """Compression ratio and single-process encode/decode speed of each codec on the store's first tiles:
    the measurement behind the default codec."""
    import zarr

    from eoscale.ingest.skeleton import CODECS, make_codec

    images = zarr.open_group(store, mode="r")["images"][:tiles]
    out = {}
    for name in CODECS:
        path = store.parent / f"codec-{name}.zarr"
        array = zarr.create_array(path, shape=images.shape, chunks=(1, *images.shape[1:]), shards=images.shape,
                                  dtype=images.dtype, compressors=make_codec(name, typesize=2), overwrite=True)
        started = time.perf_counter()
        array[:] = images
        write = time.perf_counter() - started
        started = time.perf_counter()
        array[:]
        read = time.perf_counter() - started
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != "zarr.json")
        out[name] = {"ratio": images.nbytes / size, "write_tiles_per_s": len(images) / write,
                     "read_tiles_per_s": len(images) / read}
    return out


def bench_ingest(data: Path, work: Path, *, workers: int, repeats: int = 2) -> dict:
    """Run ingest and the baseline `repeats` times each on the synthetic set in `data`; best time wins."""
    import xarray as xr

    from eoscale.ingest import ingest
    from eoscale.synth import SynthResult

    synth = SynthResult.from_manifest(data)
    scenes = [str(p) for p in synth.scene_paths]
    runs = []
    for r in range(repeats):
        summary = ingest(scenes, work / "bench.zarr", labels=[str(p) for p in synth.label_paths],
                         classes=str(synth.class_table_path), workers=workers, overwrite=True, progress=False)
        runs.append(summary)
        print(f"  ingest run {r + 1}: {summary.seconds:.2f} s, phases "
              + ", ".join(f"{k} {v:.2f}" for k, v in summary.phases.items()))
    best = min(runs, key=lambda s: s.seconds)
    best_shards = min(s.phases["shards"] for s in runs)

    ds = xr.open_zarr(work / "bench.zarr")
    scene_of, rows, cols = ds.scene.values, ds.row_off.values, ds.col_off.values
    tile = int(ds.attrs["tile_size"])
    jobs = [(scenes[s], [(int(r), int(c)) for r, c in zip(rows[scene_of == s], cols[scene_of == s], strict=True)], tile)
            for s in range(len(scenes))]
    tiles = len(rows)
    raw_bytes = tiles * tile * tile * 2 * ds.sizes["band"]
    baseline_times = []
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.map(_warm, range(workers))  # process start-up is not part of the limit
        for r in range(repeats):
            started = time.perf_counter()
            pool.map(_baseline_worker, jobs, chunksize=1)
            baseline_times.append(time.perf_counter() - started)
            print(f"  baseline run {r + 1}: {baseline_times[-1]:.2f} s")
    baseline = min(baseline_times)
    codecs = compare_codecs(work / "bench.zarr")
    for name, c in codecs.items():
        print(f"  codec {name:>10}: ratio {c['ratio']:.2f}, write {c['write_tiles_per_s']:.0f} tiles/s, "
              f"read {c['read_tiles_per_s']:.0f} tiles/s (one process)")
    return {
        "codecs": codecs,
        "data": {"scenes": len(scenes), "tiles": tiles, "tile_size": tile, "bands": int(ds.sizes["band"]),
                 "raw_image_megabytes": raw_bytes / 1e6},
        "workers": workers,
        "baseline": {"seconds": baseline, "tiles_per_s": tiles / baseline, "mb_per_s": raw_bytes / 1e6 / baseline},
        "ingest": {"seconds": best.seconds, "tiles_per_s": tiles / best.seconds, "mb_per_s": raw_bytes / 1e6 / best.seconds,
                   "phases": best.phases, "compression_ratio": best.compression_ratio},
        "ingest_shard_phase": {"seconds": best_shards, "tiles_per_s": tiles / best_shards},
        "ratio_whole_command": baseline / best.seconds,
        "ratio_shard_phase": baseline / best_shards,
        "goal": ">= 0.7 of the baseline",
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="DIR",
                        help="a synthetic set from 'eoscale synth' (default: make the default set in a temporary folder)")
    parser.add_argument("--scenes", type=int, default=5, help="scenes to synthesise when --data is not given (default: 5)")
    parser.add_argument("--workers", type=int, default=None, help="processes for both sides (default: one per core)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side; the best counts (default: 2)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.cluster import default_workers
    from eoscale.synth import synthesize

    workers = args.workers or default_workers()
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-") as tmp:
        data = Path(args.data) if args.data else Path(tmp) / "synthetic"
        if not args.data:
            print(f"synthesising {args.scenes} default scenes in {data}")
            synthesize(data, scenes=args.scenes)
        figures = bench_ingest(data, Path(tmp), workers=workers, repeats=args.repeats)
    print(
        f"ingest of {figures['data']['tiles']} tiles ({figures['data']['raw_image_megabytes']:.0f} MB) with {workers} "
        f"processes:\n"
        f"  baseline (rasterio windows + blosc-zstd, no Zarr/Dask): {figures['baseline']['tiles_per_s']:.0f} tiles/s, "
        f"{figures['baseline']['mb_per_s']:.1f} MB/s\n"
        f"  eoscale ingest, whole command: {figures['ingest']['tiles_per_s']:.0f} tiles/s, "
        f"{figures['ingest']['mb_per_s']:.1f} MB/s = {figures['ratio_whole_command']:.2f}× the baseline\n"
        f"  eoscale ingest, shard phase:   {figures['ingest_shard_phase']['tiles_per_s']:.0f} tiles/s "
        f"= {figures['ratio_shard_phase']:.2f}× the baseline (goal ≥ 0.7)"
    )
    if args.record:
        print(f"recorded in {record('ingest', figures, directory=args.record)}")
    return 0
