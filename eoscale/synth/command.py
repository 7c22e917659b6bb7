"""`eoscale synth`: write the synthetic Sentinel-2 scene set that the rest of the pipeline runs on by default.

    eoscale synth                                  # 5 scenes of 1000x1000 px into data/synthetic
    eoscale synth runs/tiny --scenes 2 --size 256 --seed 1
    eoscale synth --layout perband --nodata-fraction 0 --overwrite
    eoscale synth runs/safe --layout safe --baseline 03.01       # Sentinel-2 L2A SAFE products
    eoscale synth runs/cog --layout cog                          # Sentinel-2 L2A COGs, a STAC Item each
    eoscale synth runs/landsat --layout landsat                  # Landsat 9 C2 L2 folders (30 m), MTL, QA_PIXEL, Item
    eoscale synth runs/fusion --sensors s2,s1,dem                # + Sentinel-1 backscatter and a DEM, COG + STAC each
    eoscale synth runs/pairs --change                            # + each place a year later, with change labels
    eoscale synth runs/season --dates 8 --scenes 2 --layout safe  # a season: 2 places, 8 dated SAFE products each
    eoscale synth runs/chm --heights                             # plus a canopy height COG per scene (regression)
"""

from __future__ import annotations

import argparse
import time

from eoscale.errors import InputError
from eoscale.synth.dataset import DEFAULT_BASELINE, DEFAULT_NODATA_FRACTION, LAYOUTS, MIN_SIZE, synthesize
from eoscale.synth.season import SEASON_CLOUD_FRACTION

DEFAULT_OUTPUT = "data/synthetic"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Generate synthetic but physically grounded Sentinel-2 L2A scenes (10 bands, uint16 reflectance x10000, "
        "UTM 32N around Jülich) with land-cover label rasters (ESA WorldCover codes, EPSG:3035 at 20 m), "
        "a class table and a manifest.json. The same seed gives byte-identical files."
    )
    parser.add_argument(
        "output", nargs="?", metavar="OUTPUT", default=None,
        help=f"directory to write the set into (default: {DEFAULT_OUTPUT}; same as --output)",
    )
    parser.add_argument("--output", dest="output_option", metavar="DIR", default=None, help="directory to write into, as OUTPUT")
    parser.add_argument("--scenes", type=int, default=5, metavar="N", help="number of scenes (default: %(default)s)")
    parser.add_argument(
        "--size", type=_size, default=1000, metavar="N|HxW",
        help=f"scene size in pixels of 10 m: N for NxN, or HEIGHTxWIDTH (e.g. 800x1200); at least {MIN_SIZE} (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="random seed; scene i depends only on the seed and i (default: %(default)s)")
    parser.add_argument(
        "--layout", choices=LAYOUTS, default="multiband",
        help="multiband: one 10-band file per scene at 10 m; perband: one file per band, 20 m bands at 20 m; safe: a "
        "Sentinel-2 L2A SAFE product (MTD_MSIL2A.xml, JPEG 2000 bands under GRANULE/*/IMG_DATA/R10m|R20m, SCL); cog: "
        "Sentinel-2 L2A COGs (10/20 m, SCL) with an Earth Search-like STAC Item; landsat: a Landsat 9 Collection 2 "
        "Level-2 folder at 30 m (SR_B1-SR_B7, QA_PIXEL, MTL .txt/.xml, ST_B10) with a USGS-like STAC Item "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--baseline", default=DEFAULT_BASELINE, metavar="NN.NN",
        help="with --layout safe or cog: the processing baseline; from 04.00 the bands carry BOA_ADD_OFFSET -1000 as ESA's "
        "products do (default: %(default)s)",
    )
    parser.add_argument(
        "--nodata-fraction", type=float, default=None, metavar="F",
        help="mean share of each scene under cloud, written as nodata 0 (0 to 0.5); above 0, some scenes "
        f"also get a nodata wedge beyond the swath edge, and clouds cast shadows (default: {DEFAULT_NODATA_FRACTION}; "
        f"with --dates {SEASON_CLOUD_FRACTION}, the clouds marked by each layout's mask)",
    )
    parser.add_argument(
        "--dates", type=int, default=None, metavar="N",
        help="write a season: each of the --scenes places seen on N dates through 2024 (a few missing), classes whose "
        "spectra change with the year (winter cereal, maize, mown grassland, deciduous and evergreen forest, seasonal "
        "wetland; water, built-up, bare, shrubland), clouds a date; layouts multiband (with dates.csv), safe, cog",
    )
    parser.add_argument(
        "--sensors", type=lambda text: [p.strip() for p in text.split(",") if p.strip()], default=["s2"],
        metavar="s2,s1,dem",
        help="what to write of each scene's ground: s2 (the optical scenes of --layout, always), s1 (Sentinel-1 "
        "backscatter: VV, VH linear gamma0 float32 COGs with a Planetary Computer-like STAC Item, under sar/), dem (a "
        "Copernicus DEM GLO-30-like tile, EPSG:4326, with its Item, under dem/); with --dates, each place's Sentinel-1 "
        "passes on their own dates and its DEM (default: s2)",
    )
    parser.add_argument(
        "--change", action="store_true",
        help="also write each scene a year later with known changes (forest loss, new built-up, cropland expansion, "
        "water gain and loss): scenes/<id>_after.tif, its land cover and the change labels labels/<id>_change.tif "
        "(codes of change_classes.csv); both dates carry their acquisition date; multiband only",
    )
    parser.add_argument(
        "--heights", action="store_true",
        help="also write a canopy height raster per scene (heights/<scene>_height.tif: metres, float32 COG, EPSG:3035 "
        "at 20 m, nodata -9999 over water), a target for 'eoscale ingest --targets'; it depends on the class and on "
        "context (distance to the stand edge, forest cover around, object width), and leaves the other files as they are",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing set in the output directory")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    if args.output and args.output_option and args.output != args.output_option:
        raise InputError(f"two output directories given ({args.output!r} and --output {args.output_option!r}): give one")
    output = args.output or args.output_option or DEFAULT_OUTPUT
    console = Console(highlight=False, soft_wrap=True)
    started = time.perf_counter()
    nodata_fraction = args.nodata_fraction
    if nodata_fraction is None:
        nodata_fraction = DEFAULT_NODATA_FRACTION if args.dates is None else SEASON_CLOUD_FRACTION
    total = args.scenes * (args.dates or 1)
    with console.status(f"writing {total} synthetic scene(s) to {output} ...") as status:

        def progress(index: int, scene_id: str) -> None:
            status.update(f"wrote {scene_id} ({index + 1}/{total}) ...")

        result = synthesize(
            output, scenes=args.scenes, size=args.size, seed=args.seed, layout=args.layout,
            nodata_fraction=nodata_fraction, baseline=args.baseline, overwrite=args.overwrite, on_scene=progress,
            sensors=args.sensors, change=args.change, heights=getattr(args, "heights", False),
            **({"dates": args.dates} if args.dates is not None else {}),
        )
    height, width = (args.size, args.size) if isinstance(args.size, int) else args.size
    console.print(
        f"wrote {len(result.scene_ids)} scene(s) of {height}x{width} px ({args.layout}"
        + (f", {args.scenes} place(s) on up to {args.dates} dates" if args.dates else "") + ") with labels to "
        f"[bold]{result.out_dir}[/bold] in {time.perf_counter() - started:.1f} s"
    )
    console.print(f"  manifest:    {result.manifest_path}")
    console.print(f"  class table: {result.class_table_path}")
    if args.change:
        console.print(f"  change:      {result.out_dir / 'change_classes.csv'} (second dates: scenes/*_after.tif)")
    if result.height_paths:
        console.print(f"  heights:     {result.height_paths[0].parent} (canopy height, m)")
    return 0


def _size(text: str) -> int | tuple[int, int]:
    """'1000' -> 1000; '800x1200' -> (800, 1200)."""
    try:
        parts = [int(p) for p in text.lower().replace("×", "x").split("x")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise argparse.ArgumentTypeError(f"{text!r} is not N or HEIGHTxWIDTH (e.g. 1000 or 800x1200)")
