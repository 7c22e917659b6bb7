"""`eoscale pretrain`: `eoscale fit` with the pretraining tasks' checkpoint defaults (MAE, DINO: `configs/*_pretrain.yaml`).

    eoscale pretrain --config configs/mae_pretrain.yaml --data.init_args.store runs/tiles.zarr

Several GPUs, FSDP2, Slurm, Ray: as `eoscale fit`; the launcher options are the same (`--launcher`, `--workers`, …).
"""

from __future__ import annotations

import argparse

# the best checkpoint is the lowest validation loss (there is no mIoU to rank by)
PRETRAIN_DEFAULTS = [
    "--checkpoint.monitor", "val_loss", "--checkpoint.mode", "min",
    "--checkpoint.filename", "epoch{epoch:03d}-step{step:06d}-loss{val_loss:.4f}",
]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="LightningCLI arguments (see --help)")
    parser.prefix_chars = "\0"  # let '--config', '--help', ... through to LightningCLI


def run(args: argparse.Namespace) -> int:
    from eoscale.train.launch.main import main

    # the defaults come first so that --config files and flags after them override them
    main(["fit", *PRETRAIN_DEFAULTS, *args.rest])
    return 0
