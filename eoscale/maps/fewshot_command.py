"""`eoscale fewshot`: a land-cover map from an embedding field and a handful of labelled pixels::

    eoscale embed --checkpoint best.ckpt --input scene.tif --output fields/
    eoscale fewshot fields/scene_embedding.tif --points labels.csv --column class --output fewshot/
    eoscale fewshot fields/scene_embedding.tif --labels nlcd.tif --per-class 10 --seed 0 --output fewshot/

The field may be one of `eoscale embed`'s or a downloaded Satellite Embedding tile (64 int8 bands, nodata −128). A
light head (`--head logistic|knn|mlp`) is fitted on the labelled pixels' vectors and maps every pixel; see
`eoscale.maps.fewshot` for the files written.
"""

from __future__ import annotations

import argparse

from eoscale.maps import fewshot as module
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("field", metavar="FIELD", help="an embedding field: int8 COG of one band a dimension (eoscale "
                                                       "embed's, or the Satellite Embedding's layout), or float32")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--points", action=Paths, metavar="FILE", help="labelled places: CSV (lon, lat or x, y in the field's CRS) or a "
                                                         "vector file (points or polygons)")
    source.add_argument("--labels", action=Paths, metavar="RASTER", help="a label raster of class codes on the field's grid")
    parser.add_argument("--column", default="class", help="the points' column of class codes (default: %(default)s)")
    parser.add_argument("--per-class", type=int, default=None, metavar="N",
                        help="use N labelled pixels a class, drawn at random with --seed (default: all)")
    parser.add_argument("--head", default="logistic", choices=module.HEADS, help="the head (default: %(default)s)")
    parser.add_argument("--classes", default=None, action=Paths, metavar="CSV", help="class table (code,name,color) for the map "
                        "(default: the label raster's, else one made from the codes)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw and the head (default: %(default)s)")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder for fewshot.tif, fewshot_areas.csv, "
                                                                       "fewshot.json")
    parser.add_argument("--overwrite", action="store_true", help="replace a few-shot map in DIR")


def run(args: argparse.Namespace) -> int:
    record = module.fewshot(args.field, args.output, labels=args.labels, points=args.points, column=args.column,
                            classes=args.classes, head=args.head, per_class=args.per_class, seed=args.seed,
                            overwrite=args.overwrite)
    names = {c["code"]: c["name"] for c in record["classes"]}
    used = ", ".join(f"{names.get(c, c)} {n}" for c, n in record["points_per_class"].items())
    print(f"fewshot: {args.head} head on {sum(record['points_per_class'].values())} pixels ({used}) → {record['map']}")
    for code, area in record["areas"].items():
        print(f"  {int(code):>5}  {names[int(code)][:40]:<40} {area['hectares']:>14.2f} ha")
    return 0
