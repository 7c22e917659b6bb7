"""`eoscale change`: what changed between two land-cover maps of one place, as a from–to change map::

    eoscale change maps/2018_landcover.tif maps/2024_landcover.tif --output change/2018-2024
    eoscale sample change/2018-2024/change.tif --n 600 --allocation min-per-class 50 --output samples/change
    # … fill the 'reference' column of samples/change.csv with transition codes (transitions.csv names them) …
    eoscale assess change/2018-2024/change.tif --reference samples/change.csv

Two embedding fields of one place (`eoscale embed`, or Satellite Embedding tiles of two years on one grid) give
`field_change.tif` instead: 1 − the cosine of the two vectors at each pixel (0 the same, 2 opposite), and
`field_change.json` (mean, share over 0.5; `eoscale.maps.similarity.field_change`).

Writes `change.tif` (COG, one code per transition, a colour each), `transitions.csv/.json` (pixels and hectares
of each transition) and `change_quicklook.png`; the rules (codes, grid, colours) are in `eoscale.maps.change`.
"""

from __future__ import annotations

import argparse

from eoscale.maps import change as change_module
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("map_a", action=Paths, metavar="MAP_A", help="the earlier land-cover map (a class COG of 'eoscale predict' "
                                                       "or 'eoscale mosaic'), or an embedding field (eoscale embed's "
                                                       "or the Satellite Embedding's): then MAP_B is the later field of "
                                                       "the same grid and the output field_change.tif holds 1 − cosine")
    parser.add_argument("map_b", action=Paths, metavar="MAP_B", help="the later map, of the same class table (any grid and CRS that "
                                                       "overlaps MAP_A: it is put on MAP_A's grid by nearest neighbour)")
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="folder for change.tif, transitions.csv/.json and change_quicklook.png")
    parser.add_argument("--window", type=int, default=change_module.WINDOW, metavar="PIXELS",
                        help="output pixels a side made at a time: memory stays at a few such windows "
                             "(default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing change map in DIR")
    parser.epilog = ("Transition i → j (class-table indices, C classes) has code i*C + j + 1; 0 is nodata (either map "
                     "without a class). The change map's class table names every transition, so 'eoscale sample' "
                     "stratifies on them and 'eoscale assess' estimates change areas with 95 % CIs.")


def run(args: argparse.Namespace) -> int:
    if _is_field(args.map_a) or _is_field(args.map_b):
        return _field_change(args)
    result = change_module.change(args.map_a, args.map_b, args.output, overwrite=args.overwrite,
                                  window=args.window)
    summary, grid = result.table, result.grid
    print(f"change {summary['map_a']} → {summary['map_b']}: {result.outputs.change} ({grid.width}×{grid.height} px, "
          f"{change_module.crs_label(grid.crs)}); {summary['changed_hectares']:.1f} of "
          f"{summary['valid_hectares']:.1f} ha changed")
    for row in sorted(summary["transitions"], key=lambda r: (not r["changed"], -r["hectares"])):
        name = f"{row['from_name']} → {row['to_name']}" if row["changed"] else f"{row['from_name']} (unchanged)"
        print(f"  {row['code']:>5}  {name[:48]:<48} {row['hectares']:>14.2f} ha  {row['percent']:6.2f} %")
    print(f"  {result.outputs.csv}, {result.outputs.json}, {result.outputs.quicklook}")
    return 0


def _is_field(path: str) -> bool:
    """Whether `path` is an embedding field (several bands) rather than a land-cover map (one band of codes)."""
    import rasterio

    try:
        with rasterio.open(path) as src:
            return src.count > 1
    except rasterio.errors.RasterioIOError:
        return False  # the map reader says what is wrong with it


def _field_change(args: argparse.Namespace) -> int:
    """Two embedding fields of one place: `field_change.tif`, 1 − the cosine of their vectors at each pixel."""
    import json
    from pathlib import Path

    from eoscale.maps.publish import partial, published
    from eoscale.maps.similarity import field_change

    output = Path(args.output)
    summary = output / "field_change.json"
    with published([summary]):
        record = field_change(args.map_a, args.map_b, output / "field_change.tif", overwrite=args.overwrite)
        partial(summary).write_text(json.dumps(record, indent=1))
    print(f"change {args.map_a} → {args.map_b}: {output / 'field_change.tif'} (1 − cosine); mean "
          f"{record['mean_distance']:.3f} over {record['valid_pixels']:,} pixels, {100 * record['share_over_0.5']:.1f} % "
          "over 0.5")
    return 0
