"""`eoscale label`: fill a sample's `reference` column from a reference raster (a synthetic truth, a national map).

    eoscale sample map.tif --by mixed --uncertainty map_uncertainty.tif --labelling 200 --n 300 --output s/round1
    eoscale label s/round1.csv --reference labels/scene_000_landcover.tif
    eoscale assess map.tif --reference s/round1.csv        # from the stratified (assessment) points only

Both files of the sample (.csv and .gpkg) are filled; points on the raster's nodata or outside it stay empty
(`eoscale.maps.label`).
"""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Each point takes the code of the reference pixel it falls in (the raster's own CRS and "
                     "resolution). A census of the whole map against a raster is 'eoscale assess MAP --reference RASTER'.")
    parser.add_argument("sample", metavar="SAMPLE", help="a sample's .csv or .gpkg from 'eoscale sample'")
    parser.add_argument("--reference", required=True, metavar="RASTER",
                        help="a raster of class codes (any CRS and resolution) covering the points")
    parser.add_argument("--overwrite", action="store_true", help="replace reference values already filled in")
    parser.add_argument("--drop-unlabelled", action="store_true",
                        help="remove the points on the reference's nodata or outside it, instead of leaving them empty")


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.label import label_sample

    done = label_sample(args.sample, args.reference, overwrite=args.overwrite, drop=args.drop_unlabelled)
    print(f"labelled {done.labelled} of {done.labelled + done.empty} points from {args.reference}: "
          + ", ".join(str(f) for f in done.files))
    if done.empty and args.drop_unlabelled:
        print(f"{done.empty} points on the reference's nodata or outside it removed")
    elif done.empty:
        print(f"warning: {done.empty} points fall on the reference's nodata or outside it and stay unlabelled: "
              "label them by hand or delete their rows before 'eoscale assess'", file=sys.stderr)
    return 0
