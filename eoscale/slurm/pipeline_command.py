"""`eoscale pipeline run FILE`: the steps of a pipeline YAML, here, in order (see `eoscale.slurm.pipeline`).

On a Slurm cluster, `eoscale slurm submit FILE --profile PROFILE` submits the same steps as chained jobs.
"""

from __future__ import annotations

import argparse

from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the steps of a pipeline file (pipelines/*.yaml) on this machine, in order, stopping at the first "
        "that fails. 'eoscale slurm submit FILE --profile PROFILE' submits them as jobs chained with afterok."
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="run the steps here, in order")
    run.add_argument("file", action=Paths, metavar="FILE", help="the pipeline YAML")
    run.add_argument("--dry-run", "-n", action="store_true", help="print the commands, run nothing")


def run(args: argparse.Namespace) -> int:
    from eoscale.slurm.pipeline import load_pipeline, run_pipeline

    pipeline = load_pipeline(args.file)
    return run_pipeline(pipeline, dry_run=args.dry_run)
