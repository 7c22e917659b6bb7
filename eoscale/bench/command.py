"""`eoscale bench NAME …`: run one benchmark; each is a module with configure(parser) and run(args).

Benchmark modules are imported only when they run (some import torch, which is slow to import).
"""

from __future__ import annotations

import argparse
import importlib

from eoscale.bench.record import invoked_as

BENCHMARKS = {
    "acquire": ("eoscale.bench.acquire", "staging a season's STAC Items from a local HTTP server and reading the cache vs a direct odc.stac.load of the same items and bands (alternated); peak RSS of staging 20 and 200 items over one tile"),
    "active": ("eoscale.bench.active", "active learning: held-out accuracy per label added, uncertainty sampling (eoscale sample --by mixed) against random sampling"),
    "adapters": ("eoscale.bench.adapters", "MAE backbone: scratch vs full fine-tuning vs LoRA vs linear probe (all and 10% labels); LoRA's parameters, step time, memory"),
    "bnsync": ("eoscale.bench.bnsync", "BatchNorm's running statistics under FSDP2 on 2 CPU ranks: no sync vs DDP's broadcast before each forward vs eoscale's broadcast before evaluating vs SyncBatchNorm's collectives; step time ÷ no sync's, and how far the ranks' outputs and buffers end apart"),
    "calibration": ("eoscale.bench.calibration", "temperature scaling: test-split ECE before/after (fitted on val); entropy on wrong vs right pixels and its AUROC for errors, also from predict's uncertainty COG on an unseen scene"),
    "embed": ("eoscale.bench.embed", "eoscale embed's throughput against eoscale predict's on the same backbone and scene, alternated: the ratio of median windows/s (goal >= 0.9)"),
    "fewshot": ("eoscale.bench.fewshot", "a few-shot head (10 points a class) on the embedding field of an encoder trained on other synthetic scenes against a random forest on the raw bands given the same points, over seeds"),
    "fusion": ("eoscale.bench.fusion", "Sentinel-1 beside Sentinel-2 under 0/50/90 % cloud on the optical scenes: S2 alone vs S1 alone vs S1 + S2 (per-sensor stems, sensor dropout), val mIoU on the same pixels at equal steps; with --dates N seasons of S1 + S2 vs S2 vs S1 (U-TAE, 3 seeds)"),
    "gpu": ("eoscale.bench.gpu", "one accelerator: bf16 ViT-B/16 training samples/s and MFU, the loader's data-wait share at that speed, an FSDP2 step (scripts/gpu-check.sh)"),
    "ingest": ("eoscale.bench.ingest", "ingest throughput against reading + compressing the same windows without Zarr/Dask"),
    "loader": ("eoscale.bench.loader", "training loader throughput against decode-only, random zarr reads and rasterio windows"),
    "learning": ("eoscale.bench.learning", "ResNet-18 val mIoU after a CPU budget against a per-pixel random forest"),
    "regression": ("eoscale.bench.regression", "canopy heights (synth --heights): a regression network against a per-pixel random forest at equal CPU time, val RMSE/MAE/bias/R²"),
    "predict": ("eoscale.bench.predict", "predict throughput against the model's own forward on in-memory windows; cost of each overlap"),
    "launchers": ("eoscale.bench.launchers", "the same config on 2 workers under torchrun and Ray Train: steady-state samples/s ratio, start-up overhead"),
    "serve": ("eoscale.bench.serve", "Triton server (eoscale serve) throughput against the in-process forward at batch 16; 1-window latency; 1/4/16 clients"),
    "strategies": ("eoscale.bench.strategies", "DDP, FSDP2, ZeRO-2, ZeRO-3 at W=2 on one ViT-S: per-rank state bytes and step time ÷ DDP's, eoscale plan's prediction beside each"),
    "temporal": ("eoscale.bench.temporal", "a synthetic season: the temporal model (U-TAE) on the stack vs the same network on the best single date vs a per-pixel random forest on the stacked series and on one date, val mIoU over all and the seasonal classes at equal steps"),
    "train": ("eoscale.bench.train", "fit vs a plain PyTorch loop, DDP 2×1 vs 1×1 samples/s, FSDP2 vs DDP per-rank memory"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "benchmarks: " + "; ".join(f"{name}: {text}" for name, (_, text) in BENCHMARKS.items())
    parser.add_argument("benchmark", choices=BENCHMARKS, metavar="NAME", help=f"one of {', '.join(BENCHMARKS)}")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's options ('eoscale bench NAME --help')")


def run(args: argparse.Namespace) -> int:
    module_name, help_text = BENCHMARKS[args.benchmark]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"eoscale bench {args.benchmark}", description=help_text)
    module.configure(parser)
    parser.add_argument("--record", default="benchmarks", metavar="DIR",
                        help="folder to record the figures in (default: %(default)s; '' to not record)")
    with invoked_as(["eoscale", "bench", args.benchmark, *args.options]):
        return module.run(parser.parse_args(args.options))
