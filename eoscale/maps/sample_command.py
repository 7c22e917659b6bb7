"""`eoscale sample`: a stratified random sample of a map's pixels, for labelling with reference classes; or the
map's most uncertain pixels, for training labels (active learning), with a stratified sample beside them.

    eoscale sample maps/T32UNE_landcover.tif --n 600 --allocation min-per-class 50 --seed 1 --output samples/T32UNE
    eoscale sample map.tif --n 500 --allocation neyman --expected-accuracy 0.8,80=0.95
    eoscale sample map.tif --by uncertainty --uncertainty map_uncertainty.tif --n 200 --spacing 10 --per-class 10
    eoscale sample map.tif --by mixed --uncertainty map_uncertainty.tif --labelling 200 --n 300 \
        --allocation min-per-class 30

Writes `<prefix>.gpkg`, `<prefix>.csv` (fill the `reference` column with class codes, by hand or with
`eoscale label`) and `<prefix>_design.json` (`eoscale.maps.samplefile`); then `eoscale assess MAP --reference
<prefix>.csv` estimates accuracy and areas, from the stratified points only (`--by uncertainty` alone gives none).
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from eoscale.errors import InputError
from eoscale.maps.design import ALLOCATIONS
from eoscale.maps.uncertain import QUOTAS
from eoscale.paths import Paths

DESIGNS = ("stratified", "uncertainty", "mixed")

USAGE_EPILOG = ("Strata are the map's classes (nodata excluded); points are pixel centres, drawn without "
                "replacement. Olofsson et al. (2014) advise at least 50–100 points in each rare class: "
                "--allocation min-per-class 50.")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = USAGE_EPILOG
    parser.add_argument("map", action=Paths, metavar="MAP", help="the land-cover map (a COG from 'eoscale predict')")
    parser.add_argument("--n", type=int, required=True,
                        help="the number of sample points: of the stratified sample (stratified, mixed), or of the "
                             "points chosen by uncertainty (--by uncertainty)")
    parser.add_argument("--by", choices=DESIGNS, default="stratified",
                        help="stratified: a stratified random sample (a probability sample, for 'eoscale assess'); "
                             "uncertainty: the most uncertain pixels, for training labels (not for assess); mixed: "
                             "both, as two sets of one sample (column 'set': assessment, labelling); default stratified")
    parser.add_argument("--uncertainty", action=Paths, metavar="RASTER",
                        help="the map's uncertainty (uncertainty, mixed): one band, higher = less sure "
                             "('eoscale predict --uncertainty'), or one band of probabilities per class")
    parser.add_argument("--measure", choices=("entropy", "margin"),
                        help="computed from a raster of class probabilities (default entropy); not for one band")
    parser.add_argument("--labelling", type=int, metavar="N", help="points chosen by uncertainty (--by mixed)")
    parser.add_argument("--spacing", type=int, default=10, metavar="PIXELS",
                        help="points chosen by uncertainty lie at least this far apart (default: %(default)s)")
    parser.add_argument("--per-class", type=int, default=0, metavar="K",
                        help="first give each map class up to K of its most uncertain points (default: 0)")
    parser.add_argument("--interior", type=int, default=0, metavar="PIXELS",
                        help="points chosen by uncertainty lie at least this far inside a patch of one map class, "
                             "off the mixed pixels of its edge (default: 0)")
    parser.add_argument("--quotas", choices=QUOTAS,
                        help="divide the points chosen by uncertainty among the map's classes first: proportional to "
                             "their areas, or equal; each class's most uncertain (default: most uncertain overall)")
    parser.add_argument("--allocation", nargs="+", default=["proportional"], metavar="METHOD",
                        help=f"how points are divided among classes: {', '.join(ALLOCATIONS[:3])}, or "
                             "'min-per-class K' (proportional with at least K per class); default proportional")
    parser.add_argument("--expected-accuracy", metavar="U",
                        help="anticipated user's accuracies for neyman: one number (0.8), CODE=VALUE pairs "
                             "(10=0.9,80=0.6), or both (the number is the default)")
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, recorded in the design)")
    parser.add_argument("--output", metavar="PREFIX",
                        help="output prefix (default: <map without .tif>_sample beside the map)")
    parser.add_argument("--classes", action=Paths, metavar="CSV", help="class table (code,name,color) for a map without "
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


def check_design_args(args: argparse.Namespace) -> None:
    """The options each design needs and takes, refused in one line before anything is read."""
    if args.by == "stratified":
        given = [o for o, v in (("--uncertainty", args.uncertainty), ("--measure", args.measure),
                                ("--labelling", args.labelling)) if v is not None]
        given += [o for o, v in (("--per-class", args.per_class), ("--interior", args.interior),
                                 ("--quotas", args.quotas)) if v]
        if given:
            raise InputError(f"{given[0]} chooses points by uncertainty: add --by uncertainty "
                             "(or --by mixed)")
        return
    if args.uncertainty is None:
        raise InputError(f"--by {args.by} needs --uncertainty RASTER (the map's uncertainty, or its class "
                         "probabilities: 'eoscale predict --uncertainty entropy')")
    if args.by == "mixed" and (args.labelling is None or args.labelling <= 0):
        raise InputError(f"--by mixed needs --labelling N (N ≥ 1 points chosen by uncertainty) beside --n "
                         f"(the stratified sample), got {args.labelling}")
    if args.by == "uncertainty" and (args.labelling is not None or args.allocation != ["proportional"]
                                     or args.expected_accuracy is not None):
        raise InputError("--labelling, --allocation and --expected-accuracy are for the stratified sample of --by mixed; "
                         "with --by uncertainty, --n is the number of points")
    if args.spacing < 1 or args.per_class < 0 or args.interior < 0:
        raise InputError(f"--spacing {args.spacing} --per-class {args.per_class} --interior {args.interior}: the spacing "
                         "is at least 1 pixel, K and the interior at least 0")


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.classmap import open_map
    from eoscale.maps.design import draw
    from eoscale.maps.samplefile import SampleFiles, write_sample

    check_design_args(args)
    cmap = open_map(args.map, classes=args.classes)
    stratified = args.by != "uncertainty"
    allocation = allocation_from_args(args, cmap.table.codes) if stratified else None
    prefix = Path(args.output) if args.output else cmap.path.with_name(cmap.path.stem + "_sample")
    files = SampleFiles.for_prefix(prefix)
    files.check(overwrite=args.overwrite)  # before reading the map twice
    if args.n <= 0:
        raise InputError(f"--n {args.n}: the sample needs at least one point")
    seed = args.seed if args.seed is not None else secrets.randbits(63)
    if args.by == "uncertainty":
        return run_uncertainty(args, cmap, files, seed)
    sample = draw(cmap, args.n, allocation, seed=seed)
    labelling = None
    if args.by == "mixed":
        labelling = choose_uncertain(args, cmap, args.labelling, seed, exclude=(sample.rows, sample.cols))
    design = write_sample(cmap, sample, allocation, seed=seed, files=files, overwrite=args.overwrite,
                          labelling=labelling)
    if labelling is not None:
        print_labelling(design, cmap)
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


def choose_uncertain(args: argparse.Namespace, cmap, total: int, seed: int, *, exclude=None):
    """The points chosen by uncertainty, their uncertainties and how they were chosen (`eoscale.maps.uncertain`)."""
    from eoscale.maps.uncertain import Selection, choose, open_uncertainty

    path, measure = open_uncertainty(cmap, args.uncertainty, args.measure)
    selection = Selection(path, measure, args.spacing, args.per_class, args.interior, args.quotas)
    points, values = choose(total, cmap, selection, seed=seed, exclude=exclude)
    return points, values, selection.describe()


def run_uncertainty(args: argparse.Namespace, cmap, files, seed: int) -> int:
    from eoscale.maps.samplefile import write_sample

    labelling = choose_uncertain(args, cmap, args.n, seed)
    design = write_sample(cmap, None, None, seed=seed, files=files, overwrite=args.overwrite, labelling=labelling)
    print_labelling(design, cmap)
    print(f"  written: {files.csv}, {files.gpkg}, {files.design}; not a probability sample: label it for training, "
          "assess with a stratified one (--by mixed)")
    return 0


def print_labelling(design: dict, cmap) -> None:
    chosen = design["labelling"]
    print(f"{chosen['n']} points chosen by uncertainty ({chosen['measure']}, {chosen['spacing_pixels']} px apart, "
          f"{chosen['interior_pixels']} px inside a class, up to {chosen['per_class']} a class first, quotas "
          f"{chosen['quotas']}) for labelling:")
    for c in cmap.table.classes:
        if chosen["per_stratum"][str(c.code)]:
            print(f"  {c.code:>5}  {c.name:<28} n={chosen['per_stratum'][str(c.code)]}")
