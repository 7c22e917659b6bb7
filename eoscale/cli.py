"""The `eoscale` command line: one table of subcommands, each implemented in its stage's package.

Each entry names a module with `configure(parser)` (adds the command's arguments) and `run(args) -> int`.
Modules are imported only when their command runs, so `eoscale --help` stays fast (torch is slow to import).
A `UserError` prints one line and exits with code 2; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from collections.abc import Sequence

from eoscale import __version__
from eoscale.errors import UserError

# name -> (module, one-line help). The order is the data flow.
COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("eoscale.synth.command", "generate synthetic Sentinel-2 scenes and land-cover labels (the embedded default data)"),
    "search": ("eoscale.acquire.search_command", "search a STAC API (collections, area, dates, filters) into a frozen item list (stac-geoparquet or ItemCollection)"),
    "stage": ("eoscale.acquire.stage_command", "download a frozen item list's assets into a cache the offline compute nodes read (retries, resume, checksums, signing)"),
    "ingest": ("eoscale.ingest.command", "cut GeoTIFF/COG scenes and label rasters into a sharded Zarr v3 tile store"),
    "info": ("eoscale.data.info", "describe a tile store: tiles, shards, bands, classes per split, statistics"),
    "pretrain": ("eoscale.train.launch.pretrain", "self-supervised MAE pretraining of a ViT on a tile store's images (LightningCLI)"),
    "fit": ("eoscale.train.launch.command", "train a segmentation model on a tile store (LightningCLI: --config, DDP/FSDP, MLflow)"),
    "validate": ("eoscale.train.launch.command", "evaluate a checkpoint on a tile store's val split (LightningCLI)"),
    "test": ("eoscale.train.launch.command", "evaluate a checkpoint on a tile store's test split (LightningCLI)"),
    "predict": ("eoscale.infer.command", "map scenes to land-cover COGs with a checkpoint (sliding windows, blended, out-of-core)"),
    "embed": ("eoscale.infer.embed_command", "embedding fields (int8 COGs, one band a dimension) of whole scenes from a checkpoint's or a pretrained backbone's features"),
    "calibrate": ("eoscale.infer.calibrate", "fit a class checkpoint's temperature on a tile store's split so its probabilities are calibrated (ECE before/after)"),
    "plan": ("eoscale.train.planning.plan", "predict each strategy's memory per GPU (DDP, FSDP2, ZeRO-2/3) and traffic for a config before booking nodes"),
    "consolidate": ("eoscale.train.strategies.consolidate", "turn a sharded (FSDP or DeepSpeed) checkpoint folder into one checkpoint file"),
    "adapter": ("eoscale.models.adapter_command", "list a LoRA fit's adapters, or merge one into a plain checkpoint"),
    "slurm": ("eoscale.slurm.command", "render or submit Slurm job scripts from a cluster profile and a template"),
    "pipeline": ("eoscale.slurm.pipeline_command", "run the steps of a pipeline file (synth → ingest → fit → …) in order"),
    "sample": ("eoscale.maps.sample_command", "draw a stratified random sample of a map's pixels for reference labelling, or its most uncertain pixels for training labels (GeoPackage + CSV)"),
    "label": ("eoscale.maps.label_command", "fill a sample's reference column from a reference raster (labels for active learning)"),
    "assess": ("eoscale.maps.assess_command", "accuracy and class areas of a map with 95 %% confidence intervals (Olofsson et al. 2014)"),
    "mosaic": ("eoscale.maps.mosaic_command", "one COG from the maps of several scenes (any UTM zones), overlaps by confidence"),
    "change": ("eoscale.maps.change_command", "a from–to change map (COG, transition areas) between two land-cover maps of one place"),
    "fewshot": ("eoscale.maps.fewshot_command", "a land-cover map from an embedding field and a few labelled pixels (logistic, kNN or MLP head)"),
    "similar": ("eoscale.maps.similar_command", "a similarity map (cosine) of an embedding field to a few example points or polygons"),
    "lineage": ("eoscale.maps.lineage_command", "the chain map → checkpoint → training run → store → scenes, and what changed since"),
    "serve": ("eoscale.serve.command", "serve a checkpoint and its LoRA adapters with Triton Inference Server (HTTP/gRPC, dynamic batching)"),
    "compare": ("eoscale.track.command", "compare MLflow training runs: throughput, scaling efficiency, time to a target mIoU"),
    "bench": ("eoscale.bench.command", "measure eoscale against baselines run on the same data, and record the figures"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eoscale",
        description="Earth-observation imagery to land-cover maps at HPC scale.",
        epilog="Run 'eoscale COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"eoscale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        # help strings are %-formatted by argparse ("95 %%"), descriptions are not
        sub.add_parser(name, help=help_text, description=help_text.replace("%%", "%"), add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help or the 'invalid choice' error and exits
        return 2
    name, rest = argv[0], argv[1:]
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(module_name)
    command_parser = argparse.ArgumentParser(prog=f"eoscale {name}", description=help_text.replace("%%", "%"))
    module.configure(command_parser)
    try:
        args = command_parser.parse_args(rest)  # in here: a file option's glob that matches nothing is a UserError
        return int(module.run(args) or 0)
    except UserError as err:
        print(f"eoscale {name}: error: {one_line(err)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"eoscale {name}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a full disk or a used-up quota (an HPC project's file system) is not a bug: one line, exit 1; outputs are
        # written under temporary names (and ingest resumes), so running the command again is safe
        where = f" ({err.filename})" if err.filename else ""
        again = " with --ckpt_path last (it resumes)" if name in ("fit", "pretrain") else ""
        print(f"eoscale {name}: error: {err.strerror}{where}: free space (or ask for more quota) or write to another "
              f"file system, then run the command again{again}", file=sys.stderr)
        return 1


def one_line(err: UserError) -> str:
    """The error's message; for one raised in a DataLoader worker, which torch re-raises in the main process as
    the same class with "Caught X in DataLoader worker process N. Original Traceback …" around it, the original
    message (the traceback's last line, without its class name)."""
    message = str(err).strip()
    if "\nOriginal Traceback" in message:
        message = message.splitlines()[-1].partition(": ")[2] or message.splitlines()[-1]
    return message


if __name__ == "__main__":
    sys.exit(main())
