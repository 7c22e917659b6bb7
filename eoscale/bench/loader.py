"""`eoscale bench loader STORE`: the training loader's tiles/s and MB/s against baselines run in the same call.

    eoscale bench loader runs/tiles.zarr --workers 4 --batch-size 64 --seconds 20

Every figure reads the store's 'train' split with the same number of processes (`--workers`) for about
`--seconds` each, `--repeats` times in alternating order (forwards, backwards, …), and is the median of its
runs (every run's rate is recorded beside it); MB/s counts uncompressed image and label bytes (uint16 bands, uint8 labels). Beside the
tiles per second of wall time, the loader and the decode-only limit report tiles per CPU second (all their
processes, start-up included): on a machine that other work shares, the loader's main process makes it one
process more than the baseline's, and so it gets a larger share of the cores; the CPU figures and their
ratio (`cpu_ratios`) do not depend on that.

- loader: `TileDataModule.train_dataloader()` epoch after epoch (shuffled, augmented; DataLoader worker
  start-up included), each batch moved to the accelerator and normalised and turned there by
  `TileDataModule.normalise`, as in training. "compact batches": the same without moving and normalising,
  the uint16/uint8 batches as the workers hand them over. The ratios use the first figure where there is an
  accelerator, and the compact one where there is none: there, normalising runs on the CPU, in the main
  process, which then takes a core from the workers (2 shared cores: 3,600–4,100 tiles/s against 4,500–7,600
  compact), while in training it runs on the GPU and costs the loader nothing. Both are printed, and
  `ratio_loader` says which;
- the two switches over private internals, each a "compact" loader with one of them off: `shared_memory=False`
  (plain DataLoader hand-over) and `direct_decode=False` (the loader's whole-shard reads through zarr's public
  API instead of its direct decoder); and whole shards through zarr alone, no loader ("zarr_shards": the same
  reads `direct_decode=False` makes, without the shuffle buffer and hand-over), so that each switch's worth
  is measured, not assumed;
- decode-only limit: the same stored chunks, already in memory, decoded with the same codec in a tight loop;
  goal: the loader reaches at least 0.5 of it;
- random tiles through zarr: one tile (image and label) per read, at random; goal: the loader is 3× faster;
- source windows: what a TorchGeo user does, random tile-sized windows of the source GeoTIFFs (the store's
  `scenes[i].paths`): TorchGeo's `RasterDataset` with a `RandomGeoSampler` when torchgeo is installed (it is
  a benchmark-only extra, not a dependency), and plain rasterio windowed reads always; goal: 10× faster.
  Both empty GDAL's block cache after every read (`_gdal_cache_dropper`), so that each window is decoded from
  its file as each of the loader's tiles is: the files stay in the OS page cache, as the store's do.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from eoscale.errors import InputError
from eoscale.paths import Paths
from eoscale.store import schema

GOALS = {"decode_only": 0.5, "random_zarr": 3.0, "source_windows": 10.0}  # loader ÷ baseline, at least
_MAX_DECODE_TILES = 2048  # chunks held in memory per decode process


def bench_loader(
    store: str | os.PathLike,
    *,
    workers: int = 2,
    batch_size: int = 32,
    seconds: float = 10.0,
    seed: int = 0,
    repeats: int = 3,
    torchgeo: bool | None = None,
    show: bool = True,
) -> dict:
    """Measure the training loader of `store` and the baselines; print a table (with `show`) and return the
    figures: one entry per method with `tiles_per_s`, `mb_per_s`, `processes` (the median of `repeats`
    measurements taken in alternating order, each one's rate in `tiles_per_s_runs`), plus `ratios` (loader ÷
    baseline), `switches_vs_compact` and `goals`. `torchgeo=None` measures TorchGeo when it can be imported, True
    requires it."""
    from eoscale.store.open import read_store_attrs

    if workers < 0 or batch_size < 1 or seconds <= 0 or repeats < 1:
        raise InputError(f"need workers ≥ 0, batch_size ≥ 1, seconds > 0 and repeats ≥ 1, got {workers}, {batch_size}, "
                         f"{seconds}, {repeats}")
    store = str(store)
    attrs = read_store_attrs(store)
    tile_size, bands = int(attrs[schema.ATTR_TILE_SIZE]), len(attrs[schema.ATTR_BANDS])
    tile_bytes = tile_size * tile_size * (2 * bands + 1)
    split = tuple(attrs[schema.ATTR_SPLITS]["train"])
    if split[1] <= split[0]:
        raise InputError(f"the 'train' split of tile store {store!r} has no tiles: benchmark a store that has some")
    processes = max(workers, 1)

    import eoscale.data.datamodule  # noqa: F401  (imported before any CPU time is counted: torch, Lightning)

    def loader(normalise: bool, **options):
        return lambda: _loader(store, workers=workers, batch_size=batch_size, seconds=seconds, seed=seed,
                               normalise=normalise, **options)

    scenes = _scene_paths(store, attrs)
    # name -> (measure, whether its CPU seconds are counted); the two switches over private internals
    # (TileDataModule's Args) are each read against "loader_compact", and "direct_decode_off" against
    # "zarr_shards", the same whole-shard reads through zarr alone
    methods = {
        "loader": (loader(True), True),
        "loader_compact": (loader(False), True),
        "shared_memory_off": (loader(False, shared_memory=False), True),
        "direct_decode_off": (loader(False, direct_decode=False), True),
        "zarr_shards": (lambda: _pool(_shard_worker, store, split, processes, seconds, seed), True),
        "decode_only": (lambda: _pool(_decode_worker, store, split, processes, seconds, seed), True),
        "random_zarr": (lambda: _pool(_random_worker, store, split, processes, seconds, seed), False),
    }
    if scenes:
        methods["rasterio_windows"] = (lambda: _pool(_window_worker, scenes, tile_size, processes, seconds, seed), False)
    if torchgeo or (torchgeo is None and _has_torchgeo()):
        if not scenes:
            raise InputError(f"the source scenes of {store!r} are not where its attributes say: cannot run TorchGeo")
        methods["torchgeo"] = (lambda: _torchgeo(scenes, tile_size, workers=workers, batch_size=batch_size,
                                                 seconds=seconds, seed=seed), False)
    samples: dict[str, list[dict | None]] = {name: [] for name in methods}
    for repeat in range(repeats):
        # the sides alternate: forwards, then backwards, so that no method always runs on a warmer (or busier)
        # machine than another (this VM drifts by ±20 % between runs)
        for name in list(methods) if repeat % 2 == 0 else list(methods)[::-1]:
            measure, count_cpu = methods[name]
            with _cpu_seconds() as cpu:
                entry = measure()
                # LightningDataModule.save_hyperparameters keeps its caller's frames in a reference cycle: collect
                # the data modules now, not in the forked baseline processes
                gc.collect()
            if entry is not None and count_cpu:
                entry["tiles_per_cpu_s"] = entry["tiles"] / cpu()
            samples[name].append(entry)
    results: dict[str, dict | None] = {"torchgeo": None, "rasterio_windows": None}
    results.update({name: _median(runs) for name, runs in samples.items()})
    for entry in results.values():
        if entry is not None:
            entry["mb_per_s"] = entry["tiles_per_s"] * tile_bytes / 1e6
    ratio_loader = "loader" if results["loader"]["device"] != "cpu" else "loader_compact"
    switches = {"shared_memory_off": results["shared_memory_off"]["tiles_per_s"] / results["loader_compact"]["tiles_per_s"],
                "direct_decode_off": results["direct_decode_off"]["tiles_per_s"] / results["loader_compact"]["tiles_per_s"],
                "zarr_shards": (results["zarr_shards"]["tiles_per_s"] / results["loader_compact"]["tiles_per_s"]
                                if results["zarr_shards"] else None)}
    loader = results[ratio_loader]["tiles_per_s"]
    source = results["torchgeo"] or results["rasterio_windows"]
    ratios = {
        "decode_only": loader / results["decode_only"]["tiles_per_s"] if results["decode_only"] else None,
        "random_zarr": loader / results["random_zarr"]["tiles_per_s"],
        "source_windows": loader / source["tiles_per_s"] if source else None,
    }
    decode_cpu = (results["decode_only"] or {}).get("tiles_per_cpu_s")
    cpu_ratios = {key: results[key]["tiles_per_cpu_s"] / decode_cpu if decode_cpu else None
                  for key in ("loader", "loader_compact")}
    report = {
        "store": store, "tile_size": tile_size, "bands": bands, "batch_size": batch_size, "workers": workers,
        "seconds": seconds, "repeats": repeats, **results, "switches_vs_compact": switches, "source_windows": "torchgeo" if results["torchgeo"] else "rasterio_windows",
        "ratio_loader": ratio_loader, "ratios": ratios, "cpu_ratios": cpu_ratios, "goals": dict(GOALS),
    }
    if show:
        _print_table(report)
    return report


def _loader(store: str, *, workers: int, batch_size: int, seconds: float, seed: int, normalise: bool = True,
            **options) -> dict:
    """`TileDataModule`'s training loader; with `normalise`, each batch is moved to the accelerator (pinned,
    when there is one) and normalised there, as `on_after_batch_transfer` does in training."""
    import torch

    from eoscale.data.datamodule import TileDataModule

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dm = TileDataModule(store, batch_size=batch_size, num_workers=workers, seed=seed,
                        pin_memory=normalise and device.type == "cuda", **options)
    dm.setup("fit")
    loader = dm.train_dataloader()
    threads = torch.get_num_threads()
    if device.type == "cpu":
        # the main process stands in for the accelerator: with its default threads, one per core, it fought
        # the workers for the cores (26–54 ms per normalised batch of 32 instead of 1 ms, 2 cores)
        torch.set_num_threads(1)
    try:
        tiles, epochs, started = 0, 0, time.perf_counter()
        while time.perf_counter() - started < seconds or epochs == 0:
            loader.set_epoch(epochs)
            for batch in loader:
                if normalise:
                    batch = dm.normalise({k: v.to(device, non_blocking=True) for k, v in batch.items()})
                tiles += len(batch["tile"])
            epochs += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
    finally:
        torch.set_num_threads(threads)
        loader.close()  # its workers stop (and count) here, not at a later garbage collection
    return {"tiles_per_s": tiles / elapsed, "tiles": tiles, "epochs": epochs,
            "device": device.type if normalise else None, "processes": max(workers, 1)}


def _median(runs: list[dict | None]) -> dict | None:
    """The run of median tiles/s (the lower middle one of an even count), with every run's rate beside it."""
    if any(r is None for r in runs):
        return None
    ordered = sorted(runs, key=lambda r: r["tiles_per_s"])
    middle = dict(ordered[(len(ordered) - 1) // 2])
    middle["tiles_per_s_runs"] = [r["tiles_per_s"] for r in runs]
    if all("tiles_per_cpu_s" in r for r in runs):
        middle["tiles_per_cpu_s"] = float(np.median([r["tiles_per_cpu_s"] for r in runs]))
    return middle


@contextlib.contextmanager
def _cpu_seconds():
    """Yields a function that gives the CPU seconds (user and system) that this process and its children that
    ended took since the block began (children count once they have ended and been waited for)."""
    start = os.times()
    end: list = []
    try:
        yield lambda: sum(end[0][:4]) - sum(start[:4])
    finally:
        end.append(os.times())


def _pool(worker, source, what, processes: int, seconds: float, seed: int) -> dict | None:
    """Run `worker(source, what, share, shares, seconds, seed)` in `processes` processes at once; the rate is
    the sum of their rates."""
    context = mp.get_context("fork")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [pool.submit(worker, source, what, i, processes, seconds, seed) for i in range(processes)]
        done = [f.result() for f in futures]
    if any(d is None for d in done):
        return None
    return {"tiles_per_s": sum(t / s for t, s in done), "tiles": sum(t for t, _ in done), "processes": processes}


def _decode_worker(store: str, split: tuple[int, int], share: int, shares: int, seconds: float, seed: int):
    from eoscale.store.reader import ShardReader

    images, labels = ShardReader(Path(store) / schema.IMAGES), ShardReader(Path(store) / schema.LABELS)
    if not (images.direct and labels.direct):
        return None  # not the layout eoscale ingest writes: no codec to call directly
    chunks, cached = [], (None, None, None)
    per_shard = images.shard_tiles
    for tile in range(split[0] + share, split[1], shares):
        if len(chunks) >= _MAX_DECODE_TILES:
            break
        shard, j = divmod(tile, per_shard)
        if cached[0] != shard:
            first, last = shard * per_shard, min((shard + 1) * per_shard, images.array.shape[0])
            cached = (shard, images.chunks(first, last), labels.chunks(first, last))
        image, label = cached[1], cached[2]
        if image and label and image[j] is not None and label[j] is not None:
            chunks.append((bytes(image[j]), bytes(label[j])))
    image_out = np.empty(images.tile_shape, dtype=images.dtype)
    label_out = np.empty(labels.tile_shape, dtype=labels.dtype)
    tiles, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for image, label in chunks:
            images.decode(image, image_out)
            labels.decode(label, label_out)
        tiles += len(chunks)
    return tiles, time.perf_counter() - started


def _shard_worker(store: str, split: tuple[int, int], share: int, shares: int, seconds: float, seed: int):
    """Whole shards through zarr's public API alone (`array[start:stop]` a shard at a time, images and labels),
    in a random shard order, this process's share of them: what the loader's shard reads cost without it."""
    import zarr

    images = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r")
    labels = zarr.open_array(str(Path(store) / schema.LABELS), mode="r")
    per_shard = int(images.shards[0]) if images.shards else int(images.chunks[0])
    shards = list(range(split[0] // per_shard, -(-split[1] // per_shard)))[share::shares]
    if not shards:
        return None
    rng = np.random.default_rng([seed, share, 2])
    tiles, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for k in rng.permutation(shards).tolist():
            start, stop = max(split[0], k * per_shard), min(split[1], (k + 1) * per_shard)
            images[start:stop], labels[start:stop]
            tiles += stop - start
    return tiles, time.perf_counter() - started


def _random_worker(store: str, split: tuple[int, int], share: int, shares: int, seconds: float, seed: int):
    import zarr

    images = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r")
    labels = zarr.open_array(str(Path(store) / schema.LABELS), mode="r")
    rng = np.random.default_rng([seed, share])
    tiles, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        i = int(rng.integers(*split))
        images[i], labels[i]
        tiles += 1
    return tiles, time.perf_counter() - started


def _window_worker(scenes: list[str], tile_size: int, share: int, shares: int, seconds: float, seed: int):
    import rasterio
    from rasterio.windows import Window

    rng = np.random.default_rng([seed, share, 1])
    sources = [rasterio.open(p) for p in scenes]
    drop_cache = _gdal_cache_dropper()
    try:
        tiles, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            k = int(rng.integers(len(sources)))
            row = int(rng.integers(0, sources[k].height - tile_size + 1))
            col = int(rng.integers(0, sources[k].width - tile_size + 1))
            if drop_cache is None:  # no handle on GDAL's cache: a fresh dataset per read has none of it
                with rasterio.open(scenes[k]) as src:
                    src.read(window=Window(col, row, tile_size, tile_size))
            else:
                sources[k].read(window=Window(col, row, tile_size, tile_size))
                drop_cache()
            tiles += 1
        return tiles, time.perf_counter() - started
    finally:
        for src in sources:
            src.close()


def _gdal_cache_dropper():
    """A function that empties GDAL's block cache in this process (None where libgdal cannot be found).

    The source windows must be decoded from the files on every read, as the loader decodes its chunks: the
    synthetic scenes (5 × 1000² px × 10 bands, 100 MB decoded) fit in GDAL's default cache (5% of RAM), so
    without this every read after the first few seconds was a copy out of the cache (8,600 vs 150–250 reads/s,
    1 process), unlike a real archive of 10,980² px scenes. The files themselves stay in the OS page cache,
    as the tile store's do."""
    gdal = _libgdal()
    if gdal is None:
        return None
    flush = gdal.GDALFlushCacheBlock
    flush.restype = ctypes.c_int

    def drop() -> None:
        while flush():
            pass

    return drop


def _libgdal():
    """The libgdal that rasterio loaded (its wheels bundle their own), through ctypes; None if not found."""
    import rasterio  # noqa: F401  (loads libgdal)

    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if Path(line.split()[-1]).name.startswith("libgdal")})
    except OSError:
        return None
    # other wheels bundle their own libgdal too (pyogrio's, loaded with geopandas): rasterio's is the one in its
    # `rasterio.libs` folder, or the system's where rasterio was built against it
    own = [p for p in paths if Path(p).parent.name == "rasterio.libs"] or [
        p for p in paths if not Path(p).parent.name.endswith(".libs")]
    return ctypes.CDLL(own[0]) if own else None  # dlopen of a loaded library: the same instance


def _has_torchgeo() -> bool:
    try:
        import torchgeo  # noqa: F401
    except ImportError:
        return False
    return True


def _torchgeo(scenes: list[str], tile_size: int, *, workers: int, batch_size: int, seconds: float, seed: int) -> dict:
    """TorchGeo's own way: a RasterDataset over the scenes, random windows from a RandomGeoSampler."""
    import torch
    from torch.utils.data import DataLoader
    from torchgeo.datasets import RasterDataset, stack_samples
    from torchgeo.samplers import RandomGeoSampler

    drop_cache = _gdal_cache_dropper()

    class Uncached(RasterDataset):
        """RasterDataset decoding every sample from the files, as the rasterio baseline (see there)."""

        def __getitem__(self, query):
            sample = super().__getitem__(query)
            if drop_cache is not None:
                drop_cache()
            return sample

    dataset = Uncached(paths=scenes)
    length = max(batch_size, int(seconds * 2000))  # more than can be read in time; the loop stops on the clock
    sampler = RandomGeoSampler(dataset, size=tile_size, length=length, generator=torch.Generator().manual_seed(seed))
    loader = DataLoader(dataset, sampler=sampler, batch_size=batch_size, num_workers=workers, collate_fn=stack_samples)
    tiles, started = 0, time.perf_counter()
    for batch in loader:
        tiles += len(batch["image"])
        if time.perf_counter() - started >= seconds:
            break
    elapsed = time.perf_counter() - started
    return {"tiles_per_s": tiles / elapsed, "tiles": tiles, "processes": max(workers, 1)}


def _scene_paths(store: str, attrs: dict) -> list[str]:
    """The source files of the store's scenes, where they can still be found (relative paths are tried
    against the working directory, then the store's folder)."""
    found = []
    for scene in attrs[schema.ATTR_SCENES]:
        for p in scene.get("paths", []):
            for candidate in (Path(p), Path(store).parent / p):
                if candidate.is_file():
                    found.append(str(candidate))
                    break
    return found


def _print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"loader on {report['store']} ('train', {report['tile_size']} px, {report['bands']} bands, "
                        f"batch {report['batch_size']}, {report['workers']} workers)")
    for col in ("method", "processes", "tiles/s", "MB/s", "tiles/CPU-s", "loader ×", "goal"):
        table.add_column(col, justify="right" if col != "method" else "left")
    used = report["ratio_loader"]
    rows = [(f"loader (normalised on {report['loader']['device']})", "loader", None),
            ("loader, compact batches", "loader_compact", None),
            ("  compact, shared_memory=False", "shared_memory_off", None),
            ("  compact, direct_decode=False (whole shards via zarr)", "direct_decode_off", None),
            ("whole shards via zarr, no loader", "zarr_shards", None),
            ("decode-only limit", "decode_only", "decode_only"),
            ("random tiles (zarr)", "random_zarr", "random_zarr"),
            ("TorchGeo RandomGeoSampler", "torchgeo", "source_windows" if report["torchgeo"] else None),
            ("rasterio windows", "rasterio_windows", None if report["torchgeo"] else "source_windows")]
    for label, key, ratio_key in rows:
        entry = report.get(key)
        if entry is None:
            continue
        ratio = report["ratios"][ratio_key] if ratio_key else None
        if key in ("rasterio_windows", "shared_memory_off", "direct_decode_off", "zarr_shards") and ratio is None:
            ratio = report[used]["tiles_per_s"] / entry["tiles_per_s"]
        cpu = entry.get("tiles_per_cpu_s")
        table.add_row(
            label + (" ← ratios" if key == used else ""), str(entry["processes"]), f"{entry['tiles_per_s']:,.0f}",
            f"{entry['mb_per_s']:,.1f}", "" if cpu is None else f"{cpu:,.0f}",
            "" if ratio is None or key in ("loader", "loader_compact") else f"{ratio:.2f}",
            f"≥ {GOALS[ratio_key]:g}" if ratio_key else "",
        )
    console = Console()
    console.print(table)
    why = ("normalised on the accelerator, as in training" if used == "loader" else
           "compact: without an accelerator, normalising in the main process takes a core from the workers, "
           "while in training it runs on the GPU")
    cpu = "  ".join(f"{k} {v:.2f}" for k, v in report["cpu_ratios"].items() if v is not None)
    console.print(f"ratios use the loader {why}; per CPU second, loader ÷ decode-only: {cpu or 'n/a'}; "
                  f"load average at the end: {os.getloadavg()[0]:.2f}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store written by 'eoscale ingest'")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers, and processes of each baseline")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0, help="time spent on each measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3,
                        help="measurements of each method, in alternating order; the figures are their medians "
                             "(default: %(default)s)")
    parser.add_argument("--no-torchgeo", action="store_true", help="skip TorchGeo even when it is installed")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")


def run(args: argparse.Namespace) -> int:
    report = bench_loader(args.store, workers=args.workers, batch_size=args.batch_size, seconds=args.seconds,
                          seed=args.seed, repeats=args.repeats, torchgeo=False if args.no_torchgeo else None)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if getattr(args, "record", ""):  # `eoscale bench` adds --record
        from eoscale.bench.record import record

        print(f"recorded in {record('loader', report, directory=args.record, seeds={'loader and samplers': args.seed})}")
    return 0
