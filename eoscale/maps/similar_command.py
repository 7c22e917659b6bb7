"""`eoscale similar`: how like a few examples each pixel of an embedding field is, as a similarity COG::

    eoscale similar fields/scene_embedding.tif --points quarries.gpkg --output quarries_similarity.tif
    eoscale similar fields/scene_embedding.tif --points labels.csv --column class --code 4 --output forest.tif

The map holds the cosine (float32, −1…1, NaN without a vector) of each pixel's vector with the mean of the examples'
vectors (points, or every pixel a polygon covers). Change between two fields of one place is `eoscale change FIELD_A
FIELD_B` (1 − cosine).
"""

from __future__ import annotations

import argparse

from eoscale.maps.similarity import similarity
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("field", metavar="FIELD", help="an embedding field (eoscale embed's, or the Satellite "
                                                       "Embedding's layout)")
    parser.add_argument("--points", required=True, action=Paths, metavar="FILE", help="the examples: CSV (lon, lat or x, y) or a "
                                                                        "vector file of points or polygons")
    parser.add_argument("--column", default=None, help="with --code: the column that selects the examples")
    parser.add_argument("--code", type=int, default=None, help="use the places whose --column holds this code")
    parser.add_argument("--output", required=True, metavar="TIF", help="the similarity COG")
    parser.add_argument("--overwrite", action="store_true", help="replace TIF")


def run(args: argparse.Namespace) -> int:
    if (args.code is None) != (args.column is None):
        from eoscale.errors import InputError

        raise InputError("--column and --code go together: the examples are the places whose COLUMN holds CODE")
    record = similarity(args.field, args.output, points=args.points, column=args.column, code=args.code,
                        overwrite=args.overwrite)
    print(f"similar: cosine to the mean of {record['examples_used']} examples → {args.output}")
    return 0
