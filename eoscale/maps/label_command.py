"""`eoscale label`: fill a sample's `reference` column from a reference raster (a synthetic truth, a national map).

    eoscale sample map.tif --by mixed --uncertainty map_uncertainty.tif --labelling 200 --n 300 --output s/round1
    eoscale label s/round1.csv --reference labels/scene_000_landcover.tif
    eoscale assess map.tif --reference s/round1.csv        # from the stratified (assessment) points only
    eoscale label s/round1.csv --reference labels/scene_000_landcover.tif --training-raster s/round1_labels.tif

Both files of the sample (.csv and .gpkg) are filled; points on the raster's nodata or outside it stay empty
(`eoscale.maps.label`). `--training-raster` also writes the labelling points (never the assessment points) as a
sparse label raster on the map's grid for `eoscale ingest --labels` (`eoscale.maps.training_raster`); without
`--reference` it writes the raster from a sample labelled by hand.
"""

from __future__ import annotations

import argparse
import sys

from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Each point takes the code of the reference pixel it falls in (the raster's own CRS and "
                     "resolution). A census of the whole map against a raster is 'eoscale assess MAP --reference RASTER'.")
    parser.add_argument("sample", action=Paths, metavar="SAMPLE", help="a sample's .csv or .gpkg from 'eoscale sample'")
    parser.add_argument("--reference", action=Paths, metavar="RASTER",
                        help="a raster of class codes (any CRS and resolution) covering the points")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace reference values already filled in, and an existing --training-raster")
    parser.add_argument("--drop-unlabelled", action="store_true",
                        help="remove the points on the reference's nodata or outside it, instead of leaving them empty")
    parser.add_argument("--training-raster", metavar="OUT.tif",
                        help="also write the labelling points (set=labelling; never the assessment points) as a label "
                             "raster on the map's grid, nodata elsewhere: training labels for 'eoscale ingest --labels'")
    parser.add_argument("--radius", type=int, default=0, metavar="PIXELS",
                        help="with --training-raster: label every pixel within this many pixels of a point with its "
                             "code (default: %(default)s, the point's pixel only)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from eoscale.errors import InputError
    from eoscale.maps.label import label_sample
    from eoscale.maps.training_raster import check_output, check_sample, write_training_raster

    if args.reference is None and args.training_raster is None:
        raise InputError("give --reference RASTER to label the sample, --training-raster OUT.tif to write its "
                         "labelling points as training labels, or both")
    if args.training_raster is None and args.radius:
        raise InputError(f"--radius {args.radius} is for --training-raster: give one, or leave --radius out")
    if args.training_raster is not None:  # refused before the sample is touched
        check_output(Path(args.training_raster), overwrite=args.overwrite)
        check_sample(Path(args.sample))
    if args.reference is not None:
        _label(args, label_sample)
    if args.training_raster is not None:
        made = write_training_raster(args.sample, args.training_raster, radius=args.radius, overwrite=args.overwrite)
        print(f"training raster {str(made.path)!r}: {made.points} labelling points, {made.pixels} labelled pixels "
              f"(radius {args.radius}), nodata elsewhere"
              + (f"; {made.unlabelled} labelling points without a reference left out" if made.unlabelled else "")
              + (f"; {made.withheld} pixels left nodata because assessment points lie on them (a map is never "
                 "assessed on its training labels)" if made.withheld else ""))
    return 0


def _label(args: argparse.Namespace, label_sample) -> None:
    done = label_sample(args.sample, args.reference, overwrite=args.overwrite, drop=args.drop_unlabelled)
    print(f"labelled {done.labelled} of {done.labelled + done.empty} points from {args.reference}: "
          + ", ".join(str(f) for f in done.files))
    if done.empty and args.drop_unlabelled:
        print(f"{done.empty} points on the reference's nodata or outside it removed")
    elif done.empty:
        print(f"warning: {done.empty} points fall on the reference's nodata or outside it and stay unlabelled: "
              "label them by hand or delete their rows before 'eoscale assess'", file=sys.stderr)
