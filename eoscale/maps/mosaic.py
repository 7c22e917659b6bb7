"""One land-cover map from the maps of several scenes: a COG of class codes on one grid, overlaps decided by
confidence, class areas measured on an equal-area grid.

    mosaic([Path("maps/a_landcover.tif"), Path("maps/b_landcover.tif")], Path("europe_landcover.tif"))

writes, beside the output (`<name>` is its stem without a trailing `_landcover`, as `eoscale predict` names):

    <output>                 COG of class codes, the inputs' colormap, class table tags and nodata
    <name>_confidence.tif    COG, 0–100 (uint8, nodata 255): the confidence of the input each pixel came from
                             (only when every input map has its `<scene>_confidence.tif` beside it)
    <name>_areas.csv/.json   pixels, hectares and percent of the valid area per class

Grid: the inputs' CRS if they share one, else the CRS of the input covering the most ground (a log line says
which; `crs` chooses another); the finest of the inputs' resolutions in that CRS (see `default_resolution`:
maps already in it keep their grid); pixels aligned to multiples of the resolution, so mosaics of the same CRS
and resolution line up. A map that cannot be projected into the CRS (the far side of an orthographic view,
say) is an error, as are differing class tables. Class codes are reprojected by nearest
neighbour (an average of codes is no class), and so is confidence, so every pixel carries the confidence of
the very input pixel it came from. Where maps overlap the higher confidence wins (ties: the earlier map);
without confidence for every map, the earlier map wins, and a warning says so.

Memory is bounded: the mosaic is made `window` × `window` output pixels at a time, each input read through a
`WarpedVRT` onto the mosaic's grid, only for the windows its footprint touches. Areas are counted window by
window too, each pixel weighted by its ground area on the WGS 84 ellipsoid (its corners projected to the
equal-area EPSG:6933), so they are right in a geographic output CRS and free of a UTM zone's scale error.
Everything is written under hidden `.partial` names and renamed at the end, the class map last.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.errors import RasterioIOError
from rasterio.vrt import WarpedVRT
from rasterio.warp import calculate_default_transform, transform_bounds
from rasterio.windows import Window
from rasterio.windows import bounds as window_bounds
from rasterio.windows import transform as window_transform

from eoscale.classes import ClassTable
from eoscale.errors import InputError, InputNotFoundError, OutputExistsError
from eoscale.maps.classmap import check_class_map
from eoscale.maps.equal_area import AreaCounter, ground_m2, write_area_table

log = logging.getLogger(__name__)

WINDOW = 1024  # output pixels a side processed at a time: memory stays at a few arrays of WINDOW² pixels
BLOCKSIZE = 256  # COG tiles
CONFIDENCE_NODATA = 255
COARSEST = 100  # the largest --resolution, in maps' pixels: codes are sampled, not aggregated
MAX_PIXELS = 1 << 40  # a larger grid is a unit mistake (a resolution in metres for a CRS in degrees, or so)


@dataclass(frozen=True)
class MapInput:
    """An eoscale land-cover map as the mosaic needs it: where it lies, its classes, and how it is encoded."""

    path: Path
    confidence: Path | None
    table: ClassTable
    crs: CRS
    transform: Affine
    width: int
    height: int
    dtype: str
    nodata: int
    colormap: dict
    tags: dict
    band_tags: dict

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return rasterio.transform.array_bounds(self.height, self.width, self.transform)


def confidence_beside(path: Path) -> Path | None:
    """`<scene>_confidence.tif` beside `<scene>_landcover.tif`, where it exists (as `eoscale predict` writes)."""
    if not path.name.endswith("_landcover.tif"):
        return None
    beside = path.with_name(path.name[: -len("_landcover.tif")] + "_confidence.tif")
    return beside if beside.is_file() else None


def read_map(path: str | Path) -> MapInput:
    """The description of the eoscale map at `path`; a one-line `InputError` for anything else."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"map {str(path)!r} does not exist: give the '<scene>_landcover.tif' of a map")
    try:
        with rasterio.open(path) as src:
            tags, classes = src.tags(), src.tags().get("EOSCALE_CLASSES")
            check_class_map(path, tags)
            if classes is None:
                raise InputError(f"{str(path)!r} is not an eoscale map (no EOSCALE_CLASSES tag): give maps written "
                                 "by 'eoscale predict' or 'eoscale mosaic'")
            if src.count != 1 or src.crs is None:
                raise InputError(f"map {str(path)!r} has {src.count} bands and CRS {src.crs}: a map has one band "
                                 "and a CRS")
            try:
                table = ClassTable.from_records(json.loads(classes))
            except (ValueError, TypeError, KeyError):
                raise InputError(f"map {str(path)!r}: its EOSCALE_CLASSES tag is not a class table: "
                                 "rewrite the map with 'eoscale predict'") from None
            nodata = tags.get("EOSCALE_NODATA", src.nodata)
            if nodata is None:
                raise InputError(f"map {str(path)!r} has no nodata value (EOSCALE_NODATA tag): a map needs one "
                                 "for the pixels it does not map")
            nodata = int(float(nodata))
            try:
                colormap = src.colormap(1)
            except ValueError:
                colormap = {}
            return MapInput(path, confidence_beside(path), table, src.crs, src.transform, src.width, src.height,
                            src.dtypes[0], nodata, colormap, tags, src.tags(1))
    except RasterioIOError as err:
        raise InputError(f"{str(path)!r} is not a raster GDAL can read ({str(err).splitlines()[0]})") from None


def check_same_classes(maps: Sequence[MapInput]) -> ClassTable:
    """The class table all `maps` share; an `InputError` naming the first map whose table differs."""
    first = maps[0]
    for other in maps[1:]:
        if other.table == first.table:
            continue
        if other.table.codes != first.table.codes:
            difference = f"codes {first.table.codes} vs {other.table.codes}"
        else:
            a, b = next((a, b) for a, b in zip(first.table.classes, other.table.classes, strict=True) if a != b)
            difference = f"class {a.code} is {a.name!r} {a.color} vs {b.name!r} {b.color}"
        raise InputError(f"maps {str(first.path)!r} and {str(other.path)!r} have different class tables "
                         f"({difference}): mosaic maps of one class table only")
    return first.table


# -- the grid ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grid:
    """The mosaic's pixels: CRS, transform and size."""

    crs: CRS
    transform: Affine
    width: int
    height: int

    def windows(self, size: int) -> Iterator[Window]:
        """The grid in `size` × `size` windows, row by row (the last ones smaller)."""
        for row in range(0, self.height, size):
            for col in range(0, self.width, size):
                yield Window(col, row, min(size, self.width - col), min(size, self.height - row))


def parse_crs(text: str) -> CRS:
    """The CRS `text` names; parsed by pyproj first, which fails quietly (GDAL would print its own error line)."""
    from pyproj import CRS as ProjCRS
    from pyproj.exceptions import CRSError

    try:
        return CRS.from_wkt(ProjCRS.from_user_input(text).to_wkt())
    except CRSError:
        raise InputError(f"--crs {text!r} is not a CRS PROJ knows: give one like 'EPSG:32632'") from None


def choose_crs(maps: Sequence[MapInput], crs: CRS | None) -> tuple[CRS, str | None]:
    """`crs` if given; else the maps' CRS if they share one; else that of the map covering the most ground, with
    a note saying so (logged once every input has been checked, so a bad input stays a one-line error)."""
    if crs is not None:
        return crs, None
    if all(m.crs == maps[0].crs for m in maps):
        return maps[0].crs, None
    widest = max(maps, key=lambda m: ground_m2(m.crs, m.bounds))  # max keeps the first of equals
    names = sorted({crs_label(m.crs) for m in maps})
    return widest.crs, (f"maps are in {len(names)} CRSs ({', '.join(names)}): the mosaic is in {crs_label(widest.crs)}, "
                        f"the CRS of the map covering the most ground ({str(widest.path)!r}); pass --crs to choose "
                        "another")


def crs_label(crs: CRS) -> str:
    """A CRS in a few words for messages: its EPSG code, else its PROJ string (a WKT runs to a paragraph)."""
    epsg = crs.to_epsg()
    return f"EPSG:{epsg}" if epsg else crs.to_proj4() or crs.to_string()


def footprint(m: MapInput, crs: CRS) -> tuple[float, float, float, float]:
    """A map's bounds in `crs`; an `InputError` where the map cannot be projected into it."""
    bounds = m.bounds if m.crs == crs else transform_bounds(m.crs, crs, *m.bounds, densify_pts=21)
    if not all(math.isfinite(v) for v in bounds):
        raise InputError(f"map {str(m.path)!r} cannot be projected into {crs_label(crs)} (it lies outside what that "
                         "CRS can show): choose a --crs that covers every map")
    return bounds


def native_resolution(m: MapInput, crs: CRS) -> float:
    """A map's pixel size in `crs`'s units: its own where it is in `crs` (unrotated), else GDAL's estimate."""
    if m.crs == crs and m.transform.b == 0 and m.transform.d == 0:
        return min(abs(m.transform.a), abs(m.transform.e))
    transform, _, _ = calculate_default_transform(m.crs, crs, m.width, m.height, *m.bounds)
    return min(abs(transform.a), abs(transform.e))


def default_resolution(maps: Sequence[MapInput], crs: CRS) -> float:
    """The finest map's pixel size in `crs`. Where a map already in `crs` is within 1 % of it, that map's own
    (GDAL's estimate for a 10 m map in a neighbouring zone is 10.0002 m, say, and would resample every map);
    where no map is in `crs`, the estimate rounded to a round number within 1 % (9.9948 m → 10 m)."""
    sizes = [native_resolution(m, crs) for m in maps]
    finest = min(sizes)
    own = [r for m, r in zip(maps, sizes, strict=True) if m.crs == crs and r <= finest * 1.01]
    if own:
        return min(own)
    for digits in (1, 2, 3):
        rounded = float(f"{finest:.{digits}g}")
        if abs(rounded / finest - 1) <= 0.01:
            return rounded
    return finest


def plan_grid(maps: Sequence[MapInput], crs: CRS, resolution: float | None) -> Grid:
    """The grid covering every map in `crs`, at `resolution` (default: the finest map's), aligned to its multiples."""
    if resolution is not None and not (math.isfinite(resolution) and resolution > 0):
        raise InputError(f"--resolution {resolution} is not a positive pixel size: give one in the CRS's units")
    boxes = [footprint(m, crs) for m in maps]
    finest = default_resolution(maps, crs)
    res = resolution or finest
    if res > COARSEST * finest:  # nearest neighbour would keep one map pixel in COARSEST²: a unit mistake
        unit = crs.units_factor[0]
        raise InputError(f"--resolution {res:g} is {res / finest:.3g} times the maps' pixel size ({finest:.3g} {unit} "
                         f"in {crs_label(crs)}): give it in {unit}, at most {COARSEST} times the maps' pixels")
    west, south = min(b[0] for b in boxes), min(b[1] for b in boxes)
    east, north = max(b[2] for b in boxes), max(b[3] for b in boxes)
    # snap outward to multiples of the resolution (gdalwarp -tap); a hair of tolerance keeps exact edges exact
    x0, y1 = math.floor(west / res + 1e-9) * res, math.ceil(north / res - 1e-9) * res
    width = max(1, math.ceil((east - x0) / res - 1e-9))
    height = max(1, math.ceil((y1 - south) / res - 1e-9))
    if width * height > MAX_PIXELS:
        raise InputError(f"a mosaic at resolution {res:g} in {crs_label(crs)} would be {width}×{height} pixels: "
                         "give a coarser --resolution, in the CRS's units")
    return Grid(crs, Affine(res, 0.0, x0, 0.0, -res, y1), width, height)


# -- the mosaic -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MosaicOutputs:
    """The files of a mosaic; `confidence` is None when the inputs lack confidence rasters."""

    landcover: Path
    confidence: Path | None
    areas_csv: Path
    areas_json: Path

    @classmethod
    def for_output(cls, output: Path, *, confidence: bool) -> MosaicOutputs:
        name = output.name[: -len("_landcover.tif")] if output.name.endswith("_landcover.tif") else output.stem
        return cls(output, output.with_name(f"{name}_confidence.tif") if confidence else None,
                   output.with_name(f"{name}_areas.csv"), output.with_name(f"{name}_areas.json"))

    def files(self) -> list[Path]:
        """All files, the class map last (its presence marks the mosaic as done)."""
        return [p for p in (self.confidence, self.areas_csv, self.areas_json, self.landcover) if p]

    def check(self, maps: Sequence[MapInput], *, overwrite: bool) -> None:
        """Refuse to write over an input, or over an existing file unless `overwrite`."""
        inputs = {p.resolve() for m in maps for p in (m.path, m.confidence) if p}
        for path in [self.landcover, *self.files()[:-1]]:
            if path.resolve() in inputs:
                raise InputError(f"output {str(path)!r} is one of the input maps: choose another --output")
            if path.exists() and not overwrite:
                raise OutputExistsError(f"{str(path)!r} exists: pass --overwrite to replace it")


@dataclass(frozen=True)
class MosaicResult:
    outputs: MosaicOutputs
    grid: Grid
    maps: int
    overlap: str  # "confidence" or "order"
    windows: int
    areas: dict


def partial(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed into place."""
    return path.with_name(f".{path.name}.partial")


def mosaic(maps: Sequence[str | Path], output: str | Path, *, crs: str | CRS | None = None,
           resolution: float | None = None, overwrite: bool = False, window: int = WINDOW) -> MosaicResult:
    """Mosaic the eoscale `maps` into `output` (see the module's docstring); every input is checked before
    anything is written, and a failure leaves no file behind."""
    if not maps:
        raise InputError("no maps given: name at least one '<scene>_landcover.tif'")
    if window < 1:
        raise InputError(f"window {window} is not a positive number of pixels")
    inputs = [read_map(p) for p in maps]
    table = check_same_classes(inputs)
    have = sum(m.confidence is not None for m in inputs)
    overlap = "confidence" if have == len(inputs) else "order"
    output = Path(output)
    outputs = MosaicOutputs.for_output(output, confidence=overlap == "confidence")
    outputs.check(inputs, overwrite=overwrite)
    target, note = choose_crs(inputs, parse_crs(crs) if isinstance(crs, str) else crs)
    grid = plan_grid(inputs, target, resolution)
    if note:
        log.warning("%s", note)
    if overlap == "order" and len(inputs) > 1:
        log.warning("%s: where maps overlap, the first map listed wins",
                    "no map has a confidence raster beside it" if not have
                    else f"only {have} of {len(inputs)} maps have a confidence raster beside them")

    first = inputs[0]
    counter = AreaCounter(table, grid.crs)
    staged = {path: partial(path).with_name(partial(path).name + ".tiled.tif") for path in outputs.files()}
    profile = dict(driver="GTiff", width=grid.width, height=grid.height, count=1, crs=grid.crs,
                   transform=grid.transform, tiled=True, blockxsize=BLOCKSIZE, blockysize=BLOCKSIZE,
                   BIGTIFF="IF_SAFER")  # uncompressed: read once, right away, by the COG driver
    output.parent.mkdir(parents=True, exist_ok=True)
    windows = 0
    try:
        with ExitStack() as stack:
            classes = stack.enter_context(rasterio.open(staged[outputs.landcover], "w", dtype=first.dtype,
                                                        nodata=first.nodata, **profile))
            confidence = None if outputs.confidence is None else stack.enter_context(
                rasterio.open(staged[outputs.confidence], "w", dtype="uint8", nodata=CONFIDENCE_NODATA, **profile))
            boxes = [footprint(m, grid.crs) for m in inputs]
            for w in grid.windows(window):
                codes, percent = compose(inputs, boxes, grid, w, with_confidence=confidence is not None)
                classes.write(codes, 1, window=w)
                if confidence is not None:
                    confidence.write(percent, 1, window=w)
                counter.add(codes, codes != first.nodata, window_transform(w, grid.transform))
                windows += 1
            tags = mosaic_tags(inputs, overlap)
            classes.write_colormap(1, first.colormap or _colormap(table, first.nodata))
            classes.update_tags(**tags, OVERVIEW_RESAMPLING="MODE")
            classes.update_tags(1, **{k: v for k, v in first.band_tags.items() if k.startswith("CLASS_")})
            classes.set_band_description(1, "land-cover class code")
            if confidence is not None:
                confidence.update_tags(EOSCALE_MOSAIC_OF=tags["EOSCALE_MOSAIC_OF"], OVERVIEW_RESAMPLING="AVERAGE")
                confidence.set_band_description(1, "confidence of the mapped class, percent")
        to_cog(staged[outputs.landcover], partial(outputs.landcover), "MODE")
        if outputs.confidence is not None:
            to_cog(staged[outputs.confidence], partial(outputs.confidence), "AVERAGE")
        areas = counter.table_records(name=outputs.areas_csv.name[: -len("_areas.csv")])
        write_area_table(areas, partial(outputs.areas_csv), partial(outputs.areas_json))
        for path in outputs.files():  # the class map last
            os.replace(partial(path), path)
    finally:
        for path in outputs.files():
            staged[path].unlink(missing_ok=True)
            partial(path).unlink(missing_ok=True)
    if outputs.confidence is None and overwrite:
        _remove_old_confidence(MosaicOutputs.for_output(output, confidence=True).confidence)
    log.info("mosaic of %d maps: %s (%d×%d px in %s, overlaps by %s)", len(inputs), output, grid.width,
             grid.height, crs_label(grid.crs), overlap)
    return MosaicResult(outputs, grid, len(inputs), overlap, windows, areas)


def compose(maps: Sequence[MapInput], boxes: Sequence[tuple], grid: Grid, window: Window, *,
            with_confidence: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """One window of the mosaic: class codes (nodata of the first map where no map has a class) and, with
    confidence, the confidence of each pixel's map. Where maps overlap, the higher confidence wins, ties and
    maps without confidence going to the earlier map."""
    first = maps[0]
    shape = (int(window.height), int(window.width))
    codes = np.full(shape, first.nodata, dtype=first.dtype)
    best = np.full(shape, -2, dtype=np.int16)  # -1: a class without a confidence value; -2: no class yet
    west, south, east, north = window_bounds(window, grid.transform)
    for m, (bw, bs, be, bn) in zip(maps, boxes, strict=True):
        if bw >= east or be <= west or bs >= north or bn <= south:
            continue  # the map's footprint misses the window: nothing to read
        values = _warped(m.path, m.nodata, grid, window)
        valid = values != m.nodata
        if with_confidence:
            percent = _warped(m.confidence, CONFIDENCE_NODATA, grid, window).astype(np.int16)
            percent[percent == CONFIDENCE_NODATA] = -1
            take = valid & (percent > best)  # strictly higher: of equal confidences the earlier map's stays
            best[take] = percent[take]
        else:
            take = valid & (best == -2)
            best[take] = -1
        codes[take] = values[take]
    if not with_confidence:
        return codes, None
    return codes, np.where(best >= 0, best, CONFIDENCE_NODATA).astype(np.uint8)


def _warped(path: Path, nodata: int, grid: Grid, window: Window) -> np.ndarray:
    """A window of the mosaic's grid read from the raster at `path`, reprojected by nearest neighbour. The file
    is opened per window, so a mosaic of thousands of maps holds one open file at a time."""
    with rasterio.open(path) as src, WarpedVRT(src, crs=grid.crs, transform=grid.transform, width=grid.width,
                                               height=grid.height, resampling=Resampling.nearest,
                                               src_nodata=nodata, nodata=nodata) as vrt:
        return vrt.read(1, window=window)


def mosaic_tags(maps: Sequence[MapInput], overlap: str) -> dict[str, str]:
    """The mosaic's dataset tags: those every input agrees on (a shared checkpoint, say), the class table, the
    nodata value, the inputs and the overlap rule."""
    first = maps[0]
    shared = {k: v for k, v in first.tags.items()
              if k not in ("AREA_OR_POINT", "OVERVIEW_RESAMPLING") and all(m.tags.get(k) == v for m in maps[1:])}
    return {**shared, "EOSCALE_CLASSES": first.tags["EOSCALE_CLASSES"], "EOSCALE_NODATA": str(first.nodata),
            "EOSCALE_MOSAIC_OF": json.dumps([str(m.path.resolve()) for m in maps]),
            "EOSCALE_MOSAIC_OVERLAP": overlap}


def _colormap(table: ClassTable, nodata: int) -> dict[int, tuple[int, int, int, int]]:
    """The class table's colours, for an input map that carries none."""
    return {**{c.code: (*c.rgb, 255) for c in table.classes}, nodata: (0, 0, 0, 0)}


def to_cog(staging: Path, dst: Path, overview: str) -> None:
    """A COG (deflate, internal tiles, `overview`-resampled overviews) by GDAL's COG driver; the colour table,
    nodata, tags and band description travel with the copy."""
    import rasterio.shutil

    with rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS"):
        rasterio.shutil.copy(staging, dst, driver="COG", COMPRESS="DEFLATE", BLOCKSIZE=BLOCKSIZE,
                             OVERVIEW_RESAMPLING=overview, NUM_THREADS="ALL_CPUS", BIGTIFF="IF_SAFER")


def _remove_old_confidence(path: Path) -> None:
    """After `--overwrite` without confidence: the confidence raster an earlier eoscale mosaic left under this
    name would describe another mosaic; remove it, but only if eoscale wrote it (it carries EOSCALE_MOSAIC_OF)."""
    if not path.is_file():
        return
    try:
        with rasterio.open(path) as src:
            ours = "EOSCALE_MOSAIC_OF" in src.tags()
    except RasterioIOError:
        ours = False
    if ours:
        path.unlink()
    else:
        log.warning("%r was not written by eoscale mosaic and is kept; it does not describe this mosaic", str(path))
