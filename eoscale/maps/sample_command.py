"""`eoscale sample`: a stratified random sample of a map's pixels, for labelling with reference classes.

    eoscale sample maps/T32UNE_landcover.tif --n 600 --allocation min-per-class 50 --seed 1 --output samples/T32UNE
    eoscale sample map.tif --n 500 --allocation neyman --expected-accuracy 0.8,80=0.95

Writes `<prefix>.gpkg`, `<prefix>.csv` (fill the `reference` column with class codes) and `<prefix>_design.json`
(`eoscale.maps.samplefile`); then `eoscale assess MAP --reference <prefix>.csv` estimates accuracy and areas.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from eoscale.errors import InputError
from eoscale.maps.design import ALLOCATIONS

USAGE_EPILOG = ("Strata are the map's classes (nodata excluded); points are pixel centres, drawn without "
                "replacement. Olofsson et al. (2014) advise at least 50–100 points in each rare class: "
                "--allocation min-per-class 50.")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = USAGE_EPILOG
    parser.add_argument("map", metavar="MAP", help="the land-cover map (a COG from 'eoscale predict')")
    parser.add_argument("--n", type=int, required=True, help="the number of sample points in all")
    parser.add_argument("--allocation", nargs="+", default=["proportional"], metavar="METHOD",
                        help=f"how points are divided among classes: {', '.join(ALLOCATIONS[:3])}, or "
                             "'min-per-class K' (proportional with at least K per class); default proportional")
    parser.add_argument("--expected-accuracy", metavar="U",
                        help="anticipated user's accuracies for neyman: one number (0.8), CODE=VALUE pairs "
                             "(10=0.9,80=0.6), or both (the number is the default)")
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, recorded in the design)")
    parser.add_argument("--output", metavar="PREFIX",
                        help="output prefix (default: <map without .tif>_sample beside the map)")
    parser.add_argument("--classes", metavar="CSV", help="class table (code,name,color) for a map without "
                                                         "the EOSCALE_CLASSES tag")
    parser.add_argument("--overwrite", action="store_true", help="replace existing sample files")


def allocation_from_args(args: argparse.Namespace, codes: list[int]):
    from eoscale.maps.design import Allocation, parse_expected

    method, *rest = args.allocation
    if method not in ALLOCATIONS:
        raise InputError(f"--allocation {method!r}: choose one of {', '.join(ALLOCATIONS[:3])} or 'min-per-class K'")
    if method == "min-per-class":
        try:
            (k,) = rest
            k = int(k)
        except ValueError:
            raise InputError(f"--allocation min-per-class needs one whole number K, got {rest}") from None
        if k < 1:
            raise InputError(f"--allocation min-per-class {k}: K must be at least 1")
        return Allocation(method, min_per_class=k)
    if rest:
        raise InputError(f"--allocation {method} takes no value, got {rest}")
    expected = parse_expected(args.expected_accuracy, codes)
    if expected is not None and method != "neyman":
        raise InputError("--expected-accuracy is used by --allocation neyman only")
    return Allocation(method, expected=expected)


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.classmap import open_map
    from eoscale.maps.design import draw
    from eoscale.maps.samplefile import SampleFiles, write_sample

    cmap = open_map(args.map, classes=args.classes)
    allocation = allocation_from_args(args, cmap.table.codes)
    prefix = Path(args.output) if args.output else cmap.path.with_name(cmap.path.stem + "_sample")
    files = SampleFiles.for_prefix(prefix)
    files.check(overwrite=args.overwrite)  # before reading the map twice
    if args.n <= 0:
        raise InputError(f"--n {args.n}: the sample needs at least one point")
    seed = args.seed if args.seed is not None else secrets.randbits(63)
    sample = draw(cmap, args.n, allocation, seed=seed)
    design = write_sample(cmap, sample, allocation, seed=seed, files=files, overwrite=args.overwrite)
    thin = [s["name"] for s in design["strata"] if s["pixels"] > 0 and s["n"] < 2]
    print(f"{design['n']} points in {sum(1 for s in design['strata'] if s['n'])} classes "
          f"({allocation.method}, seed {seed}): {files.csv}, {files.gpkg}, {files.design}")
    for s in design["strata"]:
        if s["pixels"]:
            print(f"  {s['code']:>5}  {s['name']:<28} n={s['n']:<5} W={s['weight']:.4f}  {s['area_ha']:.1f} ha")
    if thin:
        print(f"warning: classes {thin} have fewer than 2 points: their accuracy has no standard error; "
              "use --allocation min-per-class K", file=sys.stderr)
    return 0
