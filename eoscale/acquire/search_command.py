"""`eoscale search`: a STAC API search written as a frozen item list, the input of every later step.

    eoscale search --api https://earth-search.aws.element84.com/v1 --collections sentinel-2-l2a \\
        --area district.gpkg --datetime 2024-03-01/2024-10-31 --filter 'eo:cloud_cover<40' --output s2-2024.parquet
    eoscale stage --items s2-2024.parquet --cache $SCRATCH/cache     # on the login node: downloads
    eoscale ingest --items s2-2024.parquet --cache $SCRATCH/cache …  # on compute nodes: reads the cache only
"""

from __future__ import annotations

import argparse

from eoscale.errors import InputError
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "then: eoscale stage --items LIST (downloads the assets into a cache the compute nodes read)"
    parser.add_argument("--api", required=True, metavar="URL", help="the STAC API's root (e.g. Earth Search's "
                        "https://earth-search.aws.element84.com/v1, the Planetary Computer's "
                        "https://planetarycomputer.microsoft.com/api/stac/v1)")
    parser.add_argument("--collections", required=True, nargs="+", metavar="NAME",
                        help="collections to search (e.g. sentinel-2-l2a sentinel-1-grd)")
    area = parser.add_mutually_exclusive_group(required=True)
    area.add_argument("--bbox", metavar="W,S,E,N", help="the area as a box in degrees")
    area.add_argument("--area", action=Paths, metavar="FILE", help="the area as a vector file (GeoJSON, GeoPackage; the union of its "
                      "shapes, any CRS)")
    parser.add_argument("--datetime", metavar="START/END", help="the date range (RFC 3339 or dates, e.g. "
                        "2024-03-01/2024-10-31; '..' for an open end)")
    parser.add_argument("--filter", nargs="+", default=[], metavar="EXPR",
                        help="property filters NAME OP VALUE, all must hold (e.g. 'eo:cloud_cover<40' "
                             "'s2:nodata_pixel_percentage<=10')")
    parser.add_argument("--max-items", type=int, metavar="N", help="stop after N items (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take (default: %(default)s)")
    parser.add_argument("--output", "-o", required=True, metavar="LIST",
                        help="the frozen item list: .parquet (stac-geoparquet) or .json (an ItemCollection)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing list")


def run(args: argparse.Namespace) -> int:
    from eoscale.acquire.frozen import write_list
    from eoscale.acquire.search import Search, area_geometry, parse_bbox, parse_filter, search

    if args.max_items is not None and args.max_items < 1:
        raise InputError(f"--max-items must be at least 1, got {args.max_items}")
    query = Search(api=args.api, collections=args.collections, datetime=args.datetime,
                   bbox=parse_bbox(args.bbox) if args.bbox else None,
                   intersects=area_geometry(args.area) if args.area else None,
                   filters=[parse_filter(f) for f in args.filter], max_items=args.max_items)
    items = search(query, timeout=args.timeout)
    path = write_list(items, args.output, query.record(len(items)), overwrite=args.overwrite)
    dates = sorted(i.datetime.date().isoformat() for i in items if i.datetime)
    span = f", {dates[0]} to {dates[-1]}" if dates else ""
    print(f"eoscale search: {len(items)} items{span} → {path}")
    if items:
        print(f"  next: eoscale stage --items {path}")
    return 0
