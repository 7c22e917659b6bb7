"""The `eoscale fit`, `eoscale validate` and `eoscale test` entries of the command table.

The argparse layer adds nothing: everything after the subcommand goes to LightningCLI unchanged, so
`eoscale fit --help` is LightningCLI's help (with the launcher's options, `eoscale.train.launch.options`) and `--config a.yaml --config b.yaml --model.init_args.lr 3e-4`
works as it does there.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="LightningCLI arguments (see --help)")
    # the command's name is the last word of its prog ("eoscale fit"); one module serves all three
    parser.set_defaults(subcommand=parser.prog.split()[-1])
    # no option of our own: let '--config', '--help', ... through to LightningCLI as positionals
    parser.prefix_chars = "\0"


def run(args: argparse.Namespace) -> int:
    from eoscale.train.launch.main import main

    main([args.subcommand, *args.rest])
    return 0
