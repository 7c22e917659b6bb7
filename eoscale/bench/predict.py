"""`eoscale bench predict`: windows/s and km²/s of `eoscale predict` against the model's own forward throughput.

On one synthetic scene, in one run:

- baseline: the model alone, on every window of the scene already read, normalised and held in memory,
  in batches of the same size on the same device (the most any prediction loop could reach);
- the whole command (`eoscale.infer.run.predict`: model loading, reading, blending, part files, COG with
  overviews, quick-look and area table; MLflow and the console summary left out) as a ratio against the
  baseline (goal ≥ 0.9: reading runs in threads a few strips ahead and writing the part files in another, so
  both overlap the forward passes; the model's loading, the COG and the quick-look do not, which is the
  command's time less the window loop's in benchmarks/predict.json);
- the window loop alone (read, forward, blend, finalise blocks; no files written);
- the cost of each overlap (0, 0.25, 0.5): windows, time and km²/s, against overlap 0;
- the feed: the window loop with an instant model (zero logits), with 1 reading thread and with the
  device's default (`eoscale.infer.predict.reading_threads`, at least 2): how fast the CPU side alone goes.
  Against the model, it says whether the goal can be met at all: the command cannot outrun its feed, so the
  feed must be well above 1× the model (beside a CPU model the two share the cores, so there it is only a
  measure of the CPU side's cost: 1 / feed is the fraction of the forward time that reading and blending take);
- the peak memory of the command (VmHWM of a process that runs it once at overlap 0.25 and nothing else), and
  whether the map it wrote is a valid COG (rio-cogeo): memory must not grow with the scene (column tiles).

`--memory` measures only that peak, at 4,096² (`MEMORY_REFERENCE`) and at `--size`, and their ratio (goal ≤ 1.3 for
7.2x the area at 10,980², the measure the ingest memory test uses): a few minutes where the whole bench takes ~15.

Scenes larger than `eoscale.bench.fullsize.PIECE` are built from a repeated synthetic piece, strip by strip
(`eoscale synth` renders a scene whole: ~12 GB at 10,980²). `--overlaps 0.25 --repeats 1` keeps a full-size
run within ~15 minutes on 2 cores.

The model is the checkpoint's architecture with random weights (speed does not depend on training).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

OVERLAPS = (0.0, 0.25, 0.5)
MEMORY_REFERENCE = 4096  # px: the scene --memory compares --size against


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=4096,
                        help="scene size in 10 m pixels, square (default: %(default)s, 1,678 km²; a Sentinel-2 tile "
                             "is 10,980 px: the fixed costs of loading the model and writing the COG weigh less there)")
    parser.add_argument("--backbone", default="resnet18", help="timm backbone of the model (default: %(default)s)")
    parser.add_argument("--tile", type=int, default=128, help="the model's tile size = the window (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per forward pass (default: %(default)s)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="(default: %(default)s)")
    parser.add_argument("--overlaps", type=float, nargs="+", default=list(OVERLAPS), metavar="O",
                        help="overlaps whose cost is measured, among 0 0.25 0.5; 0.25 (the command's default) "
                             "is always one (default: all)")
    parser.add_argument("--memory", action="store_true",
                        help=f"measure only the command's peak memory, at {MEMORY_REFERENCE}² and at --size, and their "
                             "ratio (goal ≤ 1.3: flat)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of the baseline, the loop, the command and the feed, in turns; the best counts "
                             "(default: 2)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.errors import InputError

    overlaps = tuple(sorted(set(args.overlaps)))
    if not set(overlaps) <= set(OVERLAPS) or 0.25 not in overlaps:
        raise InputError(f"--overlaps {' '.join(map(str, args.overlaps))}: choose among 0 0.25 0.5, with 0.25")
    if args.memory:
        return _run_memory(args)
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-predict-") as tmp:
        tmp = Path(tmp)
        scene = _synthetic_scene(tmp / "synthetic", args.size)
        checkpoint = write_random_checkpoint(tmp / "model.ckpt", scene, backbone=args.backbone, tile=args.tile)
        figures = bench_predict(scene, checkpoint, tmp / "maps", batch_size=args.batch_size, device=args.device,
                                repeats=args.repeats, overlaps=overlaps)
    figures["model"] = {"backbone": args.backbone, "tile": args.tile}
    base, whole, loop = figures["baseline"], figures["command"], figures["window_loop"]
    print(f"predict on a {args.size}×{args.size} scene ({figures['data']['km2']:.1f} km²), {args.backbone} at "
          f"{args.tile} px, batch {args.batch_size}, {figures['device']}, overlap 0.25 ({whole['windows']} windows):")
    print(f"  model forward on windows in memory: {base['windows_per_s']:.1f} windows/s")
    print(f"  window loop (read, forward, blend):  {loop['windows_per_s']:.1f} windows/s "
          f"= {figures['ratio_window_loop']:.2f}× the model")
    print(f"  whole command (+ COG, quick-look):   {whole['windows_per_s']:.1f} windows/s, {whole['km2_per_s']:.3f} km²/s "
          f"= {figures['ratio_whole_command']:.2f}× the model (goal ≥ 0.9)")
    print(f"  fixed costs of the command (model, COG, quick-look): {whole['seconds'] - loop['seconds']:.2f} s")
    for n, f in figures["feed"].items():
        print(f"  feed, {n} reading thread{'s' if n != '1' else ''} (instant model): {f['windows_per_s']:.0f} windows/s "
              f"= {f['vs_model']:.1f}× the model")
    print(f"  (the command reads with {figures['readers']} thread{'s' if figures['readers'] != 1 else ''} "
          "on this device)")
    for o, f in figures["overlap"].items():
        cost = f"{f['cost_vs_no_overlap']:.2f}× the time of overlap 0" if "cost_vs_no_overlap" in f else ""
        print(f"  overlap {o}: {f['windows']} windows, {f['seconds']:.1f} s, {f['km2_per_s']:.3f} km²/s {cost}")
    memory = figures["command_memory"]
    print(f"  peak memory of the command (a process of its own): {memory['peak_rss_bytes'] / 2**30:.2f} GiB "
          f"({memory['bytes_per_scene_pixel']:.1f} bytes a scene pixel); map a valid COG: {memory['cog_valid']}")
    if args.record:
        print(f"recorded in {record('predict', figures, directory=args.record)}")
    return 0


def _synthetic_scene(folder: Path, size: int) -> Path:
    """One synthetic scene of size² px in `folder` (built from repeated pieces above `eoscale.bench.fullsize.PIECE`)."""
    from eoscale.bench.fullsize import PIECE, synthesize_full_size
    from eoscale.synth import synthesize

    print(f"synthesising a {size}×{size} scene in {folder}")
    if size > PIECE:
        return Path(synthesize_full_size(folder, size)["scenes"][0])
    return Path(synthesize(folder, scenes=1, size=size).scene_paths[0])


def _run_memory(args: argparse.Namespace) -> int:
    """`--memory`: the command's peak memory at MEMORY_REFERENCE² and at --size (each scene in a fresh process)."""
    from eoscale.bench.record import record
    from eoscale.infer.run import PredictConfig

    sizes = sorted({MEMORY_REFERENCE, args.size})
    memory = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="eoscale-bench-predict-") as tmp:
            tmp = Path(tmp)
            scene = _synthetic_scene(tmp / "synthetic", size)
            checkpoint = write_random_checkpoint(tmp / "model.ckpt", scene, backbone=args.backbone, tile=args.tile)
            config = PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(tmp / "maps"),
                                   overlap=0.25, batch_size=args.batch_size, device=args.device, progress=False)
            started = time.perf_counter()
            memory[str(size)] = {**command_memory(config, size * size), "seconds": time.perf_counter() - started}
        print(f"  {size}×{size}: peak memory {memory[str(size)]['peak_rss_bytes'] / 2**30:.2f} GiB, map a valid COG: "
              f"{memory[str(size)]['cog_valid']} ({memory[str(size)]['seconds']:.0f} s)")
    ratio = memory[str(sizes[-1])]["peak_rss_bytes"] / memory[str(sizes[0])]["peak_rss_bytes"]
    area = (sizes[-1] / sizes[0]) ** 2
    print(f"peak memory at {sizes[-1]}² ÷ at {sizes[0]}²: {ratio:.2f}× for {area:.1f}× the area "
          f"(goal ≤ 1.3: {'met' if ratio <= 1.3 else 'NOT met'})")
    figures = {"mode": "memory", "model": {"backbone": args.backbone, "tile": args.tile}, "overlap": 0.25,
               "command_memory_by_size": memory, "memory_ratio": ratio, "area_ratio": area,
               "goal": "peak memory at --size <= 1.3x that at 4096²"}
    if args.record:
        print(f"recorded in {record('predict', figures, directory=args.record)}")
    return 0


def bench_predict(scene: Path, checkpoint: Path, output: Path, *, batch_size: int, device: str, repeats: int,
                  overlaps: tuple[float, ...] = OVERLAPS) -> dict:
    import torch

    from eoscale.infer.model import load_model
    from eoscale.infer.predict import batched, predict_blocks, read_strip, reading_threads
    from eoscale.infer.run import PredictConfig, pick_device, predict
    from eoscale.infer.windows import WindowGrid
    from eoscale.raster.reader import SceneReader
    from eoscale.raster.sources import open_scene

    model = load_model(checkpoint, device=pick_device(device, 0))
    contract = model.contract
    source = model.scene_bands(open_scene(str(scene)))
    grid = WindowGrid.make(source.height, source.width, window=contract.tile_size, overlap=0.25)
    km2 = source.height * source.width * abs(source.transform.a * source.transform.e) / 1e6

    # the baseline: every window in memory first
    with SceneReader(source) as reader:
        windows = [s.windows[k].clone() for j in range(grid.rows.count)
                   for s in [read_strip(reader, grid, j, spec=contract.spec())]
                   for k in range(grid.cols.count)]
    on = model.device
    default_readers = reading_threads(on)
    feed_readers = sorted({1, max(2, default_readers)})
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on.type == "cuda" else torch.autocast("cpu", enabled=False)

    def forward_all(count: int | None = None) -> float:
        started = time.perf_counter()
        with torch.inference_mode(), autocast:
            for batch in batched(windows[:count], batch_size):
                model.network(torch.stack(batch).to(on)).float().softmax(dim=1)
        if on.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def loop_only(network: torch.nn.Module = model.network, readers: int = default_readers) -> float:
        started = time.perf_counter()
        for _ in predict_blocks(network, source, grid, contract=contract,
                                batch_size=batch_size, readers=readers):
            pass  # the blocks are final here; the command hands them to its part-writer thread
        if on.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    instant = instant_model(len(contract.classes)).to(on)

    def config(o: float, run: int | str) -> PredictConfig:
        return PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(output / f"{o}-{run}"),
                             overlap=o, batch_size=batch_size, device=device, progress=False)

    def command(o: float, run: int) -> float:
        started = time.perf_counter()
        predict(config(o, run))
        shutil.rmtree(output / f"{o}-{run}")  # a full-size run's maps would add up
        return time.perf_counter() - started

    forward_all(8 * batch_size)  # warm-up: kernels, allocator
    # the sides take turns, best of `repeats` each, so that a change in the machine's load hits them alike
    runs = [[forward_all(), loop_only(), *(command(o, r) for o in overlaps),
             *(loop_only(instant, readers=n) for n in feed_readers)] for r in range(max(repeats, 1))]
    baseline, loop, *rest = (min(column) for column in zip(*runs, strict=True))
    commands, feeds = rest[: len(overlaps)], rest[len(overlaps) :]
    overlap = {}
    for o, seconds in zip(overlaps, commands, strict=True):
        count = WindowGrid.make(source.height, source.width, window=contract.tile_size, overlap=o).count
        overlap[str(o)] = {"windows": count, "seconds": seconds, "windows_per_s": count / seconds,
                           "km2_per_s": km2 / seconds}
        if 0.0 in overlaps:
            overlap[str(o)]["cost_vs_no_overlap"] = seconds / commands[0]
    whole = overlap["0.25"]
    windows.clear()  # the baseline's windows are not the command's memory; it is measured in a process of its own
    memory = command_memory(config(0.25, "memory"), source.height * source.width)
    return {
        "data": {"height": source.height, "width": source.width, "km2": km2, "bands": len(contract.bands)},
        "device": str(on),
        "batch_size": batch_size,
        "baseline": {"windows": grid.count, "seconds": baseline, "windows_per_s": grid.count / baseline},
        "window_loop": {"windows": grid.count, "seconds": loop, "windows_per_s": grid.count / loop},
        "command": whole,
        "ratio_window_loop": baseline / loop,
        "ratio_whole_command": baseline / whole["seconds"],
        "overlap": overlap,
        "command_memory": memory,
        "readers": default_readers,
        "feed": {str(n): {"seconds": t, "windows_per_s": grid.count / t, "vs_model": baseline / t}
                 for n, t in zip(feed_readers, feeds, strict=True)},
    }


def command_memory(config, pixels: int) -> dict:
    """Run the command once in a fresh process: its peak resident memory (VmHWM) and whether its map is a COG."""
    import multiprocessing

    from rio_cogeo.cogeo import cog_validate

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        peak, maps = pool.apply(_predict_in_process, (config,))
    valid, errors, _ = cog_validate(maps[0], quiet=True)
    return {"peak_rss_bytes": peak, "bytes_per_scene_pixel": peak / pixels, "cog_valid": bool(valid),
            "cog_errors": errors}


def _predict_in_process(config) -> tuple[int, list[str]]:
    from eoscale.infer.run import predict

    predict(config)
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))
    return peak, sorted(str(p) for p in Path(config.output).glob("*_landcover.tif"))


def instant_model(classes: int):
    """Zero logits of the model's shape, at once: the window loop with it costs what feeding a model costs."""
    import torch

    class Instant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))  # the loop finds its device through the parameters

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.new_zeros(x.shape[0], classes, x.shape[2], x.shape[3])

    return Instant()


def write_random_checkpoint(path: Path, scene: Path, *, backbone: str, tile: int) -> Path:
    """A checkpoint as `eoscale fit` writes it (see `eoscale.train.strategies.consolidate`), with untrained weights and
    the scene's own band statistics."""
    import rasterio
    import torch

    from eoscale.contract import CONTRACT_KEY, BandContract
    from eoscale.synth import class_table
    from eoscale.train.tasks.segmentation import SegmentationTask

    with rasterio.open(scene) as src:
        pixels = src.read(out_shape=(src.count, min(src.height, 256), min(src.width, 256))).astype(np.float64)
        bands = tuple(src.descriptions)
    valid = (pixels != 0).all(axis=0)
    table = class_table()
    task = SegmentationTask(backbone=backbone, decoder_channels=64, in_chans=len(bands), num_classes=len(table),
                            img_size=tile)
    network = task.configure_models()
    mean = [float(v) for v in pixels[:, valid].mean(axis=1)]
    std = [float(v) + 1e-6 for v in pixels[:, valid].std(axis=1)]
    contract = BandContract(bands, tuple(mean), tuple(std), tile, tuple(table.to_records()))
    torch.save({"state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, path)
    return path
