"""`eoscale mosaic`: one land-cover COG from the maps of several scenes, in any CRSs (UTM zones 32N and 33N, say)::

    eoscale mosaic maps/*_landcover.tif --output alps_landcover.tif
    eoscale mosaic a_landcover.tif b_landcover.tif --output alps_landcover.tif --crs EPSG:3035 --resolution 10

Beside the output it writes `<name>_confidence.tif` (when every map has its `<scene>_confidence.tif`) and
`<name>_areas.csv/.json` (class areas on the ground, measured on the WGS 84 ellipsoid). The rules (grid, CRS,
overlaps) are in `eoscale.maps.mosaic`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from eoscale.maps import mosaic as mosaic_module
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("maps", nargs="+", action=Paths, metavar="MAP",
                        help="land-cover maps (<scene>_landcover.tif, as eoscale predict writes them); where they "
                             "overlap, the higher confidence wins, or without confidence rasters the earlier map")
    parser.add_argument("--output", required=True, metavar="MOSAIC.tif", help="the mosaic COG to write")
    parser.add_argument("--crs", default=None,
                        help="CRS of the mosaic (EPSG:32632, EPSG:3035, a WKT or PROJ string); default: the maps' "
                             "CRS if they share one, else that of the map covering the most ground")
    parser.add_argument("--resolution", type=float, default=None, metavar="R",
                        help="pixel size in the CRS's units; default: the finest of the maps' in that CRS")
    parser.add_argument("--window", type=int, default=mosaic_module.WINDOW, metavar="PIXELS",
                        help="output pixels a side made at a time: memory stays at a few such windows (default: "
                             "%(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing mosaic")
    parser.epilog = ("Class codes are reprojected by nearest neighbour. Memory does not grow with the mosaic: it is "
                     "made --window × --window pixels at a time.")


def run(args: argparse.Namespace) -> int:
    # the mosaic's warnings (which CRS was chosen, how overlaps were decided) as `eoscale mosaic: warning: …` lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("eoscale mosaic: warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger(mosaic_module.__name__)
    logger.addHandler(handler)
    try:
        result = mosaic_module.mosaic(args.maps, args.output, crs=args.crs, resolution=args.resolution,
                                      overwrite=args.overwrite, window=args.window)
    finally:
        logger.removeHandler(handler)
    grid, areas = result.grid, result.areas
    print(f"mosaic of {result.maps} maps: {result.outputs.landcover} ({grid.width}×{grid.height} px, "
          f"{mosaic_module.crs_label(grid.crs)}, {grid.transform.a:g} {grid.crs.units_factor[0]} pixels; overlaps by "
          f"{result.overlap})")
    for path in result.outputs.files()[:-1]:
        print(f"  {path}")
    print(f"{areas['valid_hectares']:.1f} ha mapped (areas on the WGS 84 ellipsoid):")
    for r in areas["classes"]:
        print(f"  {r['code']:>5}  {r['name']:<28} {r['hectares']:>14.2f} ha  {r['percent']:6.2f} %")
    return 0
