"""`eoscale bench embed`: `eoscale embed`'s throughput against `eoscale predict`'s on the same backbone and scene.

In one run, on one synthetic scene and one checkpoint (the architecture with random weights: speed does not depend
on training; decoder width 64, so the field has the Satellite Embedding's 64 dimensions), three commands run in
turns, `--repeats` times each, their order rotated each turn (predict, embed, embed at the field stride; then embed,
embed at the stride, predict; …): `eoscale predict`, `eoscale embed` (a vector a pixel) and `eoscale embed
--field-stride N` (a vector a cell of N × N pixels, N = `--field-stride`, the decoder's own stride 4 by default: the
network's features, not upsampled), each through `eoscale.infer.run.predict` as the commands call it (model loading,
reading, blending, part files, COGs, STAC Item; MLflow and the console summary left out), after one untimed run of
each (the first run of a process pays for torch's kernels and GDAL's drivers, and predict's for matplotlib, once).
The figures are the ratios of the medians of windows/s, each embed over predict (goal ≥ 0.9): the same windows,
forward passes and reading, but the pixel field blends and writes 64 channels a pixel where the class map blends one
per class (9) and writes one band, and the field at the stride 64 channels a cell (1/16 of the pixels). Each run's
process CPU seconds are recorded beside its wall seconds (this benchmark shares its machine: CPU seconds say what a
run cost when others slowed its wall clock), with torch's threads (`OMP_NUM_THREADS` unset: one a core).

    eoscale bench embed --size 1024 --repeats 3

Recorded in benchmarks/embed.json with the commit and the command line.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=1024, help="scene size in 10 m pixels, square (default: %(default)s)")
    parser.add_argument("--backbone", default="resnet18", help="timm backbone of the model (default: %(default)s)")
    parser.add_argument("--tile", type=int, default=128, help="the model's tile size = the window (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per forward pass (default: %(default)s)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="(default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command, in turns (default: %(default)s)")
    parser.add_argument("--field-stride", type=int, default=4, metavar="PX",
                        help="the stride of the third command's field, eoscale embed --field-stride (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    import torch

    from eoscale.bench.predict import _synthetic_scene, write_random_checkpoint
    from eoscale.bench.record import record
    from eoscale.infer.config import PredictConfig
    from eoscale.infer.embed_config import EmbedConfig
    from eoscale.infer.run import predict

    with tempfile.TemporaryDirectory(prefix="eoscale-bench-embed-") as tmp:
        tmp = Path(tmp)
        scene = _synthetic_scene(tmp / "synthetic", args.size)
        checkpoint = write_random_checkpoint(tmp / "model.ckpt", scene, backbone=args.backbone, tile=args.tile)
        common = dict(checkpoint=str(checkpoint), inputs=[str(scene)], batch_size=args.batch_size, device=args.device,
                      overwrite=True, progress=False)
        strided = f"embed_field_stride_{args.field_stride}"
        configs = {"predict": PredictConfig(output=str(tmp / "maps"), **common),
                   "embed": EmbedConfig(output=str(tmp / "fields"), **common),
                   strided: EmbedConfig(output=str(tmp / "cells"), field_stride=args.field_stride, **common)}
        for config in configs.values():  # warm-up, untimed: what a first run pays, it pays once per process
            predict(config)
        seconds: dict[str, list[float]] = {name: [] for name in configs}
        cpu: dict[str, list[float]] = {name: [] for name in configs}
        sizes = _output_bytes(configs)
        windows = 0
        names = list(configs)
        for turn in range(args.repeats):
            for name in names[turn % 3 :] + names[: turn % 3]:  # each command first, second and third in turn
                started, cpu_started = time.perf_counter(), time.process_time()
                result = predict(configs[name])
                seconds[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
                windows = result.scenes[0].windows
        dimensions = result.scenes[0].areas["dimensions"] if "dimensions" in result.scenes[0].areas else None
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    figures = {
        "command": "eoscale bench embed " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "embed"] else sys.argv[1:]),
        "commit": _commit(),
        "model": {"backbone": args.backbone, "tile": args.tile, "decoder_channels": 64, "batch_size": args.batch_size},
        "scene": {"size": args.size, "windows": windows}, "device": args.device, "repeats": args.repeats,
        "dimensions": dimensions, "field_stride": args.field_stride, "warmup_runs": 1,
        "torch_threads": torch.get_num_threads(),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "output_bytes": sizes,
        "cpu_ratio_embed_vs_predict": statistics.median(cpu["predict"]) / statistics.median(cpu["embed"]),
        "cpu_ratio_embed_field_stride_vs_predict": statistics.median(cpu["predict"]) / statistics.median(cpu[strided]),
        "windows_per_s": {name: windows / m for name, m in medians.items()},
        "ratio_embed_vs_predict": medians["predict"] / medians["embed"],
        "ratio_embed_field_stride_vs_predict": medians["predict"] / medians[strided],
    }
    print(f"embed vs predict on a {args.size}² scene, {args.backbone} at {args.tile} px, {windows} windows, "
          f"{args.repeats} runs each in turns:")
    for name, m in medians.items():
        print(f"  {name:22s} median {m:.2f} s = {windows / m:.1f} windows/s  (runs: "
              f"{', '.join(f'{s:.2f}' for s in seconds[name])}; writes {sizes[name] / 1e6:.1f} MB)")
    print(f"  embed / predict throughput: {figures['ratio_embed_vs_predict']:.3f} a vector a pixel, "
          f"{figures['ratio_embed_field_stride_vs_predict']:.3f} a vector a cell of {args.field_stride}² pixels "
          f"(goal ≥ 0.9); in CPU seconds {figures['cpu_ratio_embed_vs_predict']:.3f} and "
          f"{figures['cpu_ratio_embed_field_stride_vs_predict']:.3f}, {figures['torch_threads']} torch threads")
    if args.record:
        print(f"recorded in {record('embed', figures, directory=args.record)}")
    return 0


def _output_bytes(configs: dict) -> dict[str, int]:
    """The bytes of the files each command wrote in its output folder (maps or field, quick-look, Item, tables)."""
    return {name: sum(p.stat().st_size for p in Path(config.output).iterdir() if p.is_file() and p.suffix != ".db")
            for name, config in configs.items()}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
