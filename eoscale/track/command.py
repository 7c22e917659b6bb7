"""`eoscale compare`: training runs from MLflow side by side, in the terminal, as CSV/Markdown/PNG, and in MLflow.

    eoscale compare --root-dir runs/smoke                       # the store `eoscale fit` wrote there
    eoscale compare --tracking-uri http://127.0.0.1:5000 --experiment eoscale --target-miou 0.6
    eoscale compare --runs 3f2a... 9bc1... --output runs/compare
"""

from __future__ import annotations

import argparse
import sys

from eoscale.paths import Paths
from eoscale.track.compare import COMPARE_EXPERIMENT, EXPERIMENT, TABLE_COLUMNS, format_value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiment", default=EXPERIMENT,
                        help=f"the MLflow experiment whose training runs to compare (default: {EXPERIMENT!r}, "
                             "where 'eoscale fit' logs)")
    parser.add_argument("--runs", nargs="+", metavar="ID", help="compare these run ids instead (any experiments)")
    parser.add_argument("--tracking-uri",
                        help="the MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///ROOT_DIR/mlflow.db, "
                             "the store 'eoscale fit' writes in its trainer.default_root_dir)")
    parser.add_argument("--root-dir", action=Paths, metavar="DIR",
                        help="the run directory holding mlflow.db when no URI is given (default: the working directory)")
    parser.add_argument("--output", default="runs/compare", help="folder for comparison.csv/.md and the PNG plots "
                                                                 "(default: runs/compare)")
    parser.add_argument("--target-miou", type=float, metavar="X",
                        help="the val mIoU for 'time to target' (default: the lowest best val mIoU of the runs, "
                             "a level every run reached)")
    parser.add_argument("--no-log", action="store_true",
                        help=f"do not log the comparison as a run of experiment {COMPARE_EXPERIMENT!r}")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from eoscale.errors import InputError
    from eoscale.track import compare as cmp

    if args.target_miou is not None and not 0 < args.target_miou <= 1:
        raise InputError(f"--target-miou must be in (0, 1], got {args.target_miou}")
    uri = args.tracking_uri or cmp.default_tracking_uri(args.root_dir)
    client = cmp.connect(uri)
    runs = cmp.find_runs(client, experiment=args.experiment, run_ids=args.runs)
    comparison = cmp.compare_runs(client, runs, target_miou=args.target_miou)
    files = cmp.write_outputs(comparison, args.output)
    run_id = None if args.no_log else cmp.log_comparison(client, comparison, files)

    console = Console(width=None if sys.stdout.isatty() else 240)  # piped or captured: don't squeeze 15 columns
    target = format_value("target_miou", comparison.target_miou)
    table = Table(title=f"{len(comparison.rows)} runs from {uri} (target val mIoU {target})")
    for name, header in TABLE_COLUMNS.items():
        table.add_column(header, justify="left" if name in ("run_name", "model", "strategy", "precision") else "right")
    for row in comparison.rows:
        values = vars(row)
        table.add_row(*(format_value(k, values[k]) for k in TABLE_COLUMNS))
    console.print(table)
    console.print(f"written: {', '.join(str(f) for f in files)}")
    if run_id:
        console.print(f"logged as run {run_id} of experiment {COMPARE_EXPERIMENT!r}")
    return 0
