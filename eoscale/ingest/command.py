"""`eoscale ingest`: the command-line face of `eoscale.ingest.ingest`."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from eoscale.errors import InputError
from eoscale.ingest.skeleton import CODECS
from eoscale.paths import Paths
from eoscale.sensors import parse_band_map


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _classes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(0 <= v <= 11 for v in values):
        raise argparse.ArgumentTypeError(f"expected SCL classes 0-11 separated by commas, like 0,1,3,8,9,10, got {text!r}")
    return values


def _fractions(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three comma-separated fractions like 0.8,0.1,0.1, got {text!r}") from None
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three fractions (train,val,test), got {text!r}")
    return values  # type: ignore[return-value]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Cut GeoTIFF/COG scenes and label rasters into a sharded Zarr v3 tile store that training streams from. "
        "Each scene is a multi-band file (bands named by their descriptions) or a directory with one file per "
        "band (20 m bands are resampled onto the 10 m grid), a Sentinel-2 L2A .SAFE product, a Landsat C2 L2 folder, or "
        "a STAC Item (--stac). Label rasters may be in any CRS and resolution: they "
        "are reprojected onto each scene with nearest neighbour and their codes mapped through the class table. "
        "Interrupted runs resume when rerun with the same arguments and unchanged inputs (path, size and "
        "modification time of every file, or its content with --verify)."
    )
    parser.epilog = (
        "example: eoscale ingest --scenes 'data/synthetic/scenes/*.tif' --labels 'data/synthetic/labels/*.tif' "
        "--classes data/synthetic/classes.csv --output runs/tiles.zarr"
    )
    parser.add_argument("--scenes", nargs="+", default=[], action=Paths, metavar="PATH",
                        help="scene files or band directories, or glob patterns (quote them)")
    parser.add_argument("--stac", nargs="+", action=Paths, metavar="ITEMS",
                        help="scenes as STAC Items: an Item JSON, an ItemCollection JSON or a folder of Item JSON files "
                             "(Sentinel-2 L2A COGs, Landsat C2 L2, RGB/RGBN), assets as local or relative files; "
                             "bands by name, asset key or common name (--bands blue,green,red,nir)")
    parser.add_argument("--items", metavar="LIST",
                        help="scenes as the Items of a frozen item list ('eoscale search'), read from the cache "
                             "'eoscale stage' downloaded them into (offline: nothing is fetched)")
    parser.add_argument("--cache", action=Paths, metavar="DIR",
                        help="with --items: the staging cache (default: beside the list, LIST's name with .cache)")
    parser.add_argument("--reference-sensor", metavar="NAME",
                        help="scenes of several sensors (Sentinel-2 and Sentinel-1 folders or Items, given together): "
                             "the sensor whose scenes are the store's grids, the others' bands warped onto them "
                             "(default: the first given in the registry's order, the optical one)")
    parser.add_argument("--labels", nargs="+", action=Paths, metavar="PATH",
                        help="label rasters of class codes (any CRS) or their STAC Items (e.g. ESA WorldCover's); "
                             "leave out for an unlabelled store (pretraining)")
    parser.add_argument("--targets", nargs="+", action=Paths, metavar="RASTER",
                        help="value rasters of a continuous variable (tree height, cover fraction; any CRS, their own "
                             "nodata): stored as per-pixel regression targets, resampled bilinearly (averaged from a "
                             "finer raster), NaN where unknown")
    parser.add_argument("--target-name", metavar="NAME", help="what --targets hold (e.g. canopy_height)")
    parser.add_argument("--target-units", metavar="UNITS", help="the units of --targets (e.g. m)")
    parser.add_argument("--static", nargs="+", action=Paths, metavar="DEM",
                        help="DEM files (Copernicus DEM COGs, or a VRT of tiles), one covering each scene: its elevation, slope "
                             "and aspect become extra bands ELEVATION, SLOPE, ASPECT_SIN, ASPECT_COS on each "
                             "scene's grid (slope and aspect computed on the DEM's grid in metres, resampled once; "
                             "aspect as its sine and cosine), with their own statistics")
    parser.add_argument("--static-layers", default="elevation,slope,aspect", metavar="elevation,slope,aspect",
                        help="which layers of --static to add (default: %(default)s)")
    parser.add_argument("--dem-datum", metavar="NAME",
                        help="take a DEM whose file notes another vertical datum than EGM2008 (e.g. EVRF2007) as it is")
    parser.add_argument("--classes", action=Paths, metavar="CSV",
                        help="class table (code,name[,color]: colours optional, a default palette else) whose order gives "
                             "the class indices; default: ESA WorldCover")
    parser.add_argument("--output", "-o", required=True, metavar="STORE", help="the tile store to write (a .zarr folder)")
    parser.add_argument("--bands", type=_names, metavar="B02,B03,…", help="keep only these bands, in this order")
    parser.add_argument("--band-names", type=_names, metavar="B02,B03,…",
                        help="names of the bands of multi-band files that carry no band descriptions")
    parser.add_argument("--band-map", metavar="SR_B2=B02,…",
                        help="take one sensor's bands as another's (scene band=store band, e.g. "
                             "SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A for Landsat scenes beside Sentinel-2 ones); "
                             "only the mapped bands are kept")
    parser.add_argument("--scl-classes", type=_classes, metavar="0,1,3,…",
                        help="Sentinel-2 SAFE products and STAC Items: the scene classes (SCL) that make a pixel nodata (default: "
                             "0,1,3,8,9,10: no data, saturated, cloud shadow, cloud medium/high probability, cirrus)")
    parser.add_argument("--tile-size", type=int, default=64, help="tile edge in pixels (default: %(default)s)")
    parser.add_argument("--stride", type=int, help="pixels between tile origins (default: the tile size, no overlap)")
    parser.add_argument("--shard-tiles", type=int, default=256, help="tiles per shard file (default: %(default)s)")
    parser.add_argument("--min-valid", type=float, default=0.5,
                        help="keep a tile when at least this fraction of its pixels is not nodata (default: %(default)s)")
    parser.add_argument("--split", type=_fractions, default=(0.8, 0.1, 0.1), metavar="TRAIN,VAL,TEST",
                        help="split fractions, dealt in spatial blocks (default: 0.8,0.1,0.1)")
    parser.add_argument("--split-block", type=int, default=4,
                        help="edge of a split block in tiles: neighbouring tiles share a split (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default: %(default)s)")
    parser.add_argument("--statistics-from", action=Paths, metavar="CKPT|STORE",
                        help="normalise with the per-band mean and std of this checkpoint (its band contract's) or "
                             "tile store instead of this store's own: a store of new labels to fine-tune that "
                             "checkpoint on (same bands)")
    parser.add_argument("--scale", type=float, metavar="S",
                        help="scenes of float pixels (surface reflectance 0-1 from Earth Engine or openEO, digital "
                             "numbers stored as floats): store = value × S + OFFSET on the store's uint16 scale (e.g. "
                             "--scale 10000 for reflectance 0-1); recorded in the store, and predict applies it to "
                             "float scenes too. Integer scenes are read as they are")
    parser.add_argument("--offset", type=float, metavar="OFFSET", help="with --scale: added after scaling (default: 0)")
    parser.add_argument("--codec", choices=CODECS, default="blosc-zstd", help="compression (default: %(default)s)")
    parser.add_argument("--level", type=int, help="compression level (default: the codec's)")
    parser.add_argument("--workers", type=int, help="local Dask worker processes (default: one per core)")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler (tcp://host:port) instead")
    slurm = parser.add_argument_group("Dask workers as Slurm jobs (dask-jobqueue's SLURMCluster)")
    slurm.add_argument("--slurm-workers", type=int, metavar="N",
                       help="submit Slurm jobs for N Dask worker processes and ingest on them")
    slurm.add_argument("--slurm-profile", action=Paths, metavar="PROFILE",
                       help="cluster profile (slurm/profiles) whose 'dask' section describes a worker job "
                            "(default: dask-jobqueue's own configuration)")
    slurm.add_argument("--slurm-log-dir", default="logs", metavar="DIR",
                       help="folder of the worker jobs' output (default: %(default)s)")
    series = parser.add_argument_group(
        "time series: dated scenes of the same places as tiles with a time axis (eoscale.ingest.series)")
    series.add_argument("--time-series", action="store_true",
                        help="group the scenes by place and stack each place's dates (from the products' metadata: "
                             "SAFE MTD, Landsat MTL, STAC datetime, a GeoTIFF's ACQUISITIONDATETIME) as time steps, "
                             "sorted by date, each date with its own mask; implied by the options below")
    series.add_argument("--dates-csv", action=Paths, metavar="CSV",
                        help="scenes listed with their dates (columns path,date[,place]; paths relative to the CSV), "
                             "for files whose metadata holds no date; a place column groups them")
    series.add_argument("--group-by", choices=("footprint", "grid", "all"), default="footprint",
                        help="which scenes are one place: footprint: overlapping by more than half (other grids are "
                             "warped onto the earliest scene's); grid: the identical grid; all: every scene "
                             "(default: %(default)s)")
    series.add_argument("--max-dates", type=int, metavar="N",
                        help="keep at most N dates a place, the clearest ones (default: all)")
    series.add_argument("--composite", metavar="monthly|16d|Nd",
                        help="regular composites instead of the dates as they are: the per-pixel median of the clear "
                             "observations in each calendar month or interval of N days (as sits' regularisation), "
                             "with the observation count stored")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing store (only once the new one is complete)")
    parser.add_argument("--verify", action="store_true",
                        help="resume only if the inputs' contents are unchanged (sha256 of every file; reads them once "
                             "more). Without it a rerun resumes when the options and every input's path, size and "
                             "modification time are the same: use --verify where a copy or the file system does not "
                             "keep modification times")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


@contextmanager
def _scheduler(args: argparse.Namespace) -> Iterator[str | None]:
    """The scheduler to ingest on: --scheduler's address, a SLURMCluster (--slurm-workers), or none."""
    if not args.slurm_workers:
        yield args.scheduler
        return
    if args.scheduler:
        raise InputError("give --scheduler or --slurm-workers, not both")
    from eoscale.cluster.slurm import slurm_cluster

    with slurm_cluster(args.slurm_workers, profile=args.slurm_profile, log_directory=args.slurm_log_dir) as cluster:
        yield cluster  # the cluster, not its address: the client needs its TLS credentials


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from eoscale.ingest import ingest
    from eoscale.raster.static import parse_layers

    console = Console(stderr=True, soft_wrap=True)
    if args.cache and not args.items:
        raise InputError("--cache is where --items are staged: give --items LIST too")
    stac = args.stac
    if args.items:
        from eoscale.acquire.cache import staged_items

        stac = [*(stac or []), *staged_items(args.items, args.cache)]
    with warnings.catch_warnings(), _scheduler(args) as scheduler:
        warnings.simplefilter("ignore", UserWarning)  # reported below, in one line
        summary = ingest(
            args.scenes, args.output, labels=args.labels, targets=args.targets, target_name=args.target_name,
            target_units=args.target_units, classes=args.classes, bands=args.bands,
            band_names=args.band_names, band_map=parse_band_map(args.band_map),
            scl_classes=args.scl_classes, stac=stac, tile_size=args.tile_size, stride=args.stride, shard_tiles=args.shard_tiles,
            min_valid=args.min_valid, split=args.split, split_block=args.split_block, seed=args.seed,
            codec=args.codec, level=args.level, workers=args.workers, scheduler=scheduler,
            overwrite=args.overwrite, verify=args.verify, progress=not args.quiet,
            time_series=args.time_series, dates_csv=args.dates_csv, group_by=args.group_by, max_dates=args.max_dates,
            composite=args.composite, reference_sensor=args.reference_sensor,
            statistics_from=args.statistics_from,
            input_scale={"scale": args.scale, "offset": args.offset} if (args.scale, args.offset) != (None, None) else None,
            **({"static": args.static, "static_layers": parse_layers(args.static_layers), "dem_datum": args.dem_datum}
               if args.static else {}),
        )
    if summary.skipped:
        from eoscale.raster.sources import describe_skipped

        console.print(f"[yellow]warning:[/] skipped {len(summary.skipped)} file(s) that hold no band: "
                      + ", ".join(describe_skipped(p) for p in summary.skipped))
    if summary.unmapped_label_codes:
        counts = ", ".join(f"code {c}: {n} px" for c, n in sorted(summary.unmapped_label_codes.items()))
        console.print(f"[yellow]warning:[/] label codes not in the class table were set to ignore ({counts})")
    if summary.split_block != args.split_block:
        console.print(f"note: the split is dealt in blocks of {summary.split_block} tile(s), not --split-block "
                      f"{args.split_block}: the scenes are too small for every split to get a block of "
                      f"{args.split_block}; val tiles lie beside train tiles, so val scores read optimistic")
    if summary.tiles_per_split.get("val", 0) == 0 and args.split[1] > 0:
        console.print(f"[yellow]warning:[/] the val split has no tiles ({summary.tiles} tiles in all): 'eoscale fit' "
                      f"cannot validate, stop early or keep a best checkpoint; ingest more scenes or a smaller "
                      f"--tile-size, or give val a larger share with --split")
    splits = ", ".join(f"{k} {v}" for k, v in summary.tiles_per_split.items())
    console.print(
        f"[bold green]wrote[/] {summary.store}: {summary.tiles} tiles in {summary.shards} shards ({splits}) "
        f"from {len(summary.scenes)} scenes"
        + (f", {summary.resumed_shards} shards kept from an earlier run" if summary.resumed_shards else "")
    )
    console.print(
        f"  dropped {summary.dropped_nodata} windows under --min-valid; "
        f"{summary.stored_bytes / 1e6:.1f} MB on disk, compression {summary.compression_ratio:.2f}×; "
        f"{summary.seconds:.1f} s, {summary.tiles_per_second:.0f} tiles/s, {summary.megabytes_per_second:.1f} MB/s"
    )
    console.print(f"  next: eoscale info {summary.store}")
    return 0
