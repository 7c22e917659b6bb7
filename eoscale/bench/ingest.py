"""`eoscale bench ingest`: tiles/s and MB/s of `eoscale ingest` against the limit of the same work done
plainly: reading the same tile windows with rasterio and compressing the same bytes with the same codec,
with the same number of processes, without Zarr, Dask, labels, statistics or resumability.

Both run on the same synthetic scenes in one run (`--size 10980`: one whole Sentinel-2 tile, see
`eoscale.bench.fullsize`). Figures: the whole command (cluster start and stop,
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

from eoscale.paths import Paths


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


def baseline_jobs(scenes: list[str], scene_of: np.ndarray, rows: np.ndarray, cols: np.ndarray, tile: int,
                  workers: int) -> list[tuple[str, list[tuple[int, int]], int]]:
    """The baseline's work: each scene's tiles in row-major order, cut into `workers` runs of consecutive rows,
    so that one full-size scene also keeps every process busy (ingest's shard tasks spread a scene over all
    workers too), and each process still reads whole rows of GDAL blocks once."""
    jobs = []
    for s in range(len(scenes)):
        mine = np.flatnonzero(scene_of == s)
        mine = mine[np.lexsort((cols[mine], rows[mine]))]
        for part in np.array_split(mine, min(workers, len(mine))):
            if len(part):
                jobs.append((scenes[s], [(int(rows[i]), int(cols[i])) for i in part], tile))
    return jobs


def compare_shard_writes(store: Path, *, repeats: int = 5) -> dict:
    """Seconds (median of `repeats`, alternating) to write the store's first shard of images through zarr's
    assignment, through `eoscale.store.writer`, and to encode its chunks alone with numcodecs (the floor),
    one process and one thread each: the evidence behind `eoscale.store.writer`."""
    import zarr

    from eoscale._compat import zarr as zarr_compat
    from eoscale.ingest.skeleton import make_codec
    from eoscale.store.writer import write_whole_shard

    source = zarr.open_group(store, mode="r")["images"]
    images = source[: source.shards[0]]
    kw = dict(shape=images.shape, chunks=(1, *images.shape[1:]), shards=images.shape, dtype=images.dtype,
              compressors=make_codec("blosc-zstd", typesize=2), fill_value=0, overwrite=True)
    by_zarr = zarr.create_array(store.parent / "shard-zarr.zarr", **kw)
    direct = zarr.create_array(store.parent / "shard-direct.zarr", **kw)
    encode = zarr_compat.numcodec(by_zarr.metadata.codecs[0].codecs[1]).encode  # the codec object zarr encodes with

    def zarr_write() -> None:
        with zarr.config.set({"threading.max_workers": 1}):
            by_zarr[:] = images

    sides = {"numcodecs_encode": lambda: [encode(np.ascontiguousarray(images[i : i + 1])) for i in range(len(images))],
             "zarr_assignment": zarr_write, "eoscale_shards": lambda: write_whole_shard(direct, 0, images)}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, side in sides.items():
            started = time.perf_counter()
            side()
            times[name].append(time.perf_counter() - started)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    return {"tiles": len(images), "seconds": medians,
            "zarr_assignment_over_encode": medians["zarr_assignment"] / medians["numcodecs_encode"],
            "eoscale_shards_over_encode": medians["eoscale_shards"] / medians["numcodecs_encode"]}


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


def synthetic_inputs(data: Path) -> dict[str, object]:
    """The scenes, label rasters and class table of the synthetic set in `data` (from `eoscale synth`)."""
    from eoscale.synth import SynthResult

    synth = SynthResult.from_manifest(data)
    return {"scenes": [str(p) for p in synth.scene_paths], "labels": [str(p) for p in synth.label_paths],
            "classes": str(synth.class_table_path)}


def bench_ingest(inputs: dict[str, object], work: Path, *, workers: int, repeats: int = 3) -> dict:
    """Run ingest and the baseline `repeats` times each on `inputs` (see `synthetic_inputs`), in turns (so that a
    change in the machine's load hits both sides alike); the medians count."""
    import xarray as xr

    from eoscale.ingest import ingest

    scenes = list(inputs["scenes"])

    def ingest_once(r: int):
        summary = ingest(scenes, work / "bench.zarr", labels=list(inputs["labels"]), classes=str(inputs["classes"]),
                         workers=workers, overwrite=True, progress=False)
        print(f"  ingest run {r + 1}: {summary.seconds:.2f} s, phases "
              + ", ".join(f"{k} {v:.2f}" for k, v in summary.phases.items()))
        return summary

    runs = [ingest_once(0)]  # the baseline reads the tiles this first run planned
    ds = xr.open_zarr(work / "bench.zarr")
    scene_of, rows, cols = ds.scene.values, ds.row_off.values, ds.col_off.values
    tile = int(ds.attrs["tile_size"])
    jobs = baseline_jobs(scenes, scene_of, rows, cols, tile, workers)
    tiles = len(rows)
    raw_bytes = tiles * tile * tile * 2 * ds.sizes["band"]
    baseline_times = []
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.map(_warm, range(workers))  # process start-up is not part of the limit
        for r in range(repeats):
            if r:
                runs.append(ingest_once(r))
            started = time.perf_counter()
            pool.map(_baseline_worker, jobs, chunksize=1)
            baseline_times.append(time.perf_counter() - started)
            print(f"  baseline run {r + 1}: {baseline_times[-1]:.2f} s")
        pool.close()  # and wait for the processes: terminating them leaked a semaphore (a warning at exit)
        pool.join()
    baseline = float(np.median(baseline_times))
    whole = float(np.median([s.seconds for s in runs]))
    shards = float(np.median([s.phases["shards"] for s in runs]))
    phases = {k: float(np.median([s.phases[k] for s in runs])) for k in runs[0].phases}
    codecs = compare_codecs(work / "bench.zarr")
    shard_writes = compare_shard_writes(work / "bench.zarr")
    print(f"  one shard of {shard_writes['tiles']} tiles, one process: zarr's assignment "
          f"{shard_writes['zarr_assignment_over_encode']:.2f}×, eoscale.store.writer "
          f"{shard_writes['eoscale_shards_over_encode']:.2f}× the numcodecs encode of its chunks")
    for name, c in codecs.items():
        print(f"  codec {name:>10}: ratio {c['ratio']:.2f}, write {c['write_tiles_per_s']:.0f} tiles/s, "
              f"read {c['read_tiles_per_s']:.0f} tiles/s (one process)")
    return {
        "codecs": codecs,
        "shard_write": shard_writes,
        "data": {"scenes": len(scenes), "scene_size": [int(ds.attrs["scenes"][0]["height"]), int(ds.attrs["scenes"][0]["width"])],
                 "tiles": tiles, "tile_size": tile,
                 "bands": int(ds.sizes["band"]), "raw_image_megabytes": raw_bytes / 1e6},
        "workers": workers,
        "baseline": {"seconds": baseline, "tiles_per_s": tiles / baseline, "mb_per_s": raw_bytes / 1e6 / baseline},
        "repeats": repeats, "statistic": "median",
        "runs_seconds": {"ingest": [s.seconds for s in runs], "ingest_shard_phase": [s.phases["shards"] for s in runs],
                         "baseline": baseline_times},
        "ingest": {"seconds": whole, "tiles_per_s": tiles / whole, "mb_per_s": raw_bytes / 1e6 / whole,
                   "phases": phases, "compression_ratio": runs[0].compression_ratio},
        "ingest_shard_phase": {"seconds": shards, "tiles_per_s": tiles / shards},
        "ratio_whole_command": baseline / whole,
        "ratio_shard_phase": baseline / shards,
        "goal": "shard phase >= 0.7 and whole command >= 0.6 of the baseline",
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", action=Paths, metavar="DIR",
                        help="a synthetic set from 'eoscale synth', or a folder with one full-size scene from "
                             "eoscale.bench.fullsize.synthesize_full_size (default: make the default set in a "
                             "temporary folder)")
    parser.add_argument("--scenes", type=int, default=None,
                        help="scenes to synthesise when --data is not given (default: 5, or 1 with --size)")
    parser.add_argument("--size", type=int, default=None, metavar="PIXELS",
                        help="side of the synthesised scenes in pixels (default: 1000; 10980 is a whole Sentinel-2 tile)")
    parser.add_argument("--workers", type=int, default=None, help="processes for both sides (default: one per core)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each side, in turns; the medians count (default: 3)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.fullsize import PIECE, full_size_inputs, synthesize_full_size
    from eoscale.bench.record import record
    from eoscale.cluster import default_workers
    from eoscale.errors import InputError
    from eoscale.synth import synthesize
    from eoscale.synth.dataset import MIN_SIZE

    if args.data and (args.size or args.scenes):
        raise InputError("--size and --scenes shape the synthesised scenes: leave them out with --data")
    if args.size is not None and args.size < MIN_SIZE:
        raise InputError(f"--size {args.size}: scenes need at least {MIN_SIZE} pixels on each side")
    scenes, size = args.scenes or (1 if args.size else 5), args.size or 1000
    if size > PIECE and scenes != 1:
        raise InputError(f"--size {size} makes one scene (larger than {PIECE}² px, it is built from repeated "
                         f"pieces): leave out --scenes")
    workers = args.workers or default_workers()
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-") as tmp:
        data = Path(args.data) if args.data else Path(tmp) / "synthetic"
        if args.data:
            inputs = full_size_inputs(data) or synthetic_inputs(data)
        elif size > PIECE:
            print(f"building one scene of {size}² px (10 bands) from synthetic pieces in {data}")
            inputs = synthesize_full_size(data, size)
        else:
            print(f"synthesising {scenes} scene(s) of {size}² px in {data}")
            synthesize(data, scenes=scenes, size=size)
            inputs = synthetic_inputs(data)
        figures = bench_ingest(inputs, Path(tmp), workers=workers, repeats=args.repeats)
    print(
        f"ingest of {figures['data']['tiles']} tiles ({figures['data']['raw_image_megabytes']:.0f} MB) with {workers} "
        f"processes:\n"
        f"  baseline (rasterio windows + blosc-zstd, no Zarr/Dask): {figures['baseline']['tiles_per_s']:.0f} tiles/s, "
        f"{figures['baseline']['mb_per_s']:.1f} MB/s\n"
        f"  eoscale ingest, whole command: {figures['ingest']['tiles_per_s']:.0f} tiles/s, "
        f"{figures['ingest']['mb_per_s']:.1f} MB/s = {figures['ratio_whole_command']:.2f}× the baseline (goal ≥ 0.6)\n"
        f"  eoscale ingest, shard phase:   {figures['ingest_shard_phase']['tiles_per_s']:.0f} tiles/s "
        f"= {figures['ratio_shard_phase']:.2f}× the baseline (goal ≥ 0.7)"
    )
    print(f"  goals: shard phase ≥ 0.7 {'met' if figures['ratio_shard_phase'] >= 0.7 else 'NOT met'}, "
          f"whole command ≥ 0.6 {'met' if figures['ratio_whole_command'] >= 0.6 else 'NOT met'}")
    if args.record:
        print(f"recorded in {record('ingest', figures, directory=args.record)}")
    return 0
