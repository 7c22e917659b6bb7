"""The COG of an embedding field, written in one pass from its part files, which GDAL reads where they lie.

The parts hold a field's rows pixel-interleaved (`eoscale.infer.outputs.embedding.EmbeddingPart`: rows × columns ×
dimensions, raw): the very layout of a pixel-interleaved raster. So instead of copying them into a tiled GeoTIFF
first (as `rasters.write_cog` does for one band), GDAL is handed a VRT whose sources are the parts themselves,
memory-mapped (`MEM:::DATAPOINTER=…`, what rasterio's own in-memory datasets are), each placed at its row and
column, and whose overviews are nearest samplings of them written the same way. GDAL's COG driver then reads the
field once and compresses each tile once.

Measured on the 1,024² field of 64 dimensions of `eoscale bench embed` (CPU seconds, 2-core VM, median of 3):
the staging GeoTIFF, GDAL's nearest overviews on it and the COG copy took 0.44 + 0.66 + 1.12 s; this path 0.99 s
in all, the same pixels, overviews and tags.

The mapped parts are file pages, clean and read-only, which the kernel may drop and read again; the process's own
memory holds `BLOCKSIZE` overview rows at a time and what GDAL's COG driver buffers (its block cache, sized here).
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import rasterio

from eoscale.infer.outputs.base import MapContext
from eoscale.infer.outputs.rasters import BLOCKSIZE, Piece


def overview_factors(height: int, width: int, block: int = BLOCKSIZE) -> list[int]:
    """The overview levels GDAL's COG driver makes of a `height` × `width` raster by default: halvings until both
    sides fit a block (`size >> level <= block`)."""
    levels = 0
    while height >> levels > block or width >> levels > block:
        levels += 1
    return [2**level for level in range(1, levels + 1)]


def nearest_indices(size: int, factor: int) -> np.ndarray:
    """The source pixels of GDAL's nearest overview of `factor` (a power of 2) along an axis of `size` pixels, as it
    builds them: level after level, each of ⌈size / level⌉ pixels, pixel i of a level taken from pixel
    ⌊0.5 + i · above / count⌋ of the level above it (`GDALResampleChunk_Near`; on sizes that do not halve evenly
    this is not ⌊0.5 + i · size / count⌋ of the field)."""
    index, above, level = np.arange(size), size, 2
    while level <= factor:
        count = -(-size // level)
        index = index[np.minimum((0.5 + np.arange(count) * (above / count)).astype(np.int64), above - 1)]
        above, level = count, 2 * level
    return index


def _mapped(path: Path, shape: tuple[int, int, int], dtype: np.dtype) -> np.ndarray:
    expected = math.prod(shape) * dtype.itemsize
    if path.stat().st_size != expected:
        raise RuntimeError(f"part {path} holds {path.stat().st_size} bytes where its {shape} pixels take {expected}")
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)


def _mem(array: np.ndarray, gdal_type: str) -> str:
    """A GDAL dataset name for a (rows, columns, bands) array, read where it lies (pixel-interleaved)."""
    rows, columns, bands = array.shape
    pointer = array.__array_interface__["data"][0]
    return (f"MEM:::DATAPOINTER={pointer},PIXELS={columns},LINES={rows},BANDS={bands},DATATYPE={gdal_type},"
            f"PIXELOFFSET={array.strides[1]},LINEOFFSET={array.strides[0]},BANDOFFSET={array.strides[2]}")


def _overview(parts: list[tuple[Piece, np.ndarray]], path: Path, height: int, width: int, factor: int,
              dimensions: int, dtype: np.dtype) -> np.ndarray:
    """Level `factor`'s nearest overview of the field the parts tile, written to `path` and mapped from it."""
    rows, cols = nearest_indices(height, factor), nearest_indices(width, factor)
    overview = np.memmap(path, dtype=dtype, mode="w+", shape=(len(rows), len(cols), dimensions))
    for piece, part in parts:
        r = np.flatnonzero((rows >= piece.row) & (rows < piece.row + piece.rows))
        c = np.flatnonzero((cols >= piece.col) & (cols < piece.col + piece.columns))
        if len(r) == 0 or len(c) == 0:
            continue
        for start in range(0, len(r), BLOCKSIZE):  # memory: BLOCKSIZE overview rows of the piece at a time
            chunk = r[start : start + BLOCKSIZE]
            overview[chunk[0] : chunk[-1] + 1, c[0] : c[-1] + 1] = part[np.ix_(rows[chunk] - piece.row,
                                                                               cols[c] - piece.col)]
    overview.flush()
    return overview


def _vrt(parts: list[tuple[Piece, np.ndarray]], overviews: list[np.ndarray], context: MapContext, *,
         gdal_type: str, nodata: float, tags: dict, descriptions: list[str]) -> str:
    """The VRT of the field: each band the parts' band at their places, with the overviews' band as its levels."""
    georef = context.georef
    root = ElementTree.Element("VRTDataset", rasterXSize=str(georef.width), rasterYSize=str(georef.height))
    ElementTree.SubElement(root, "SRS").text = georef.crs.to_wkt()
    ElementTree.SubElement(root, "GeoTransform").text = ", ".join(repr(v) for v in georef.transform.to_gdal())
    metadata = ElementTree.SubElement(root, "Metadata")
    for key, value in tags.items():
        ElementTree.SubElement(metadata, "MDI", key=str(key)).text = str(value)
    sources = [(piece, _mem(part, gdal_type)) for piece, part in parts]
    levels = [_mem(overview, gdal_type) for overview in overviews]
    for band, description in enumerate(descriptions, start=1):
        element = ElementTree.SubElement(root, "VRTRasterBand", dataType=gdal_type, band=str(band))
        ElementTree.SubElement(element, "Description").text = description
        ElementTree.SubElement(element, "NoDataValue").text = repr(nodata)
        for piece, name in sources:
            source = ElementTree.SubElement(element, "SimpleSource")
            ElementTree.SubElement(source, "SourceFilename", relativeToVRT="0").text = name
            ElementTree.SubElement(source, "SourceBand").text = str(band)
            size = dict(xSize=str(piece.columns), ySize=str(piece.rows))
            ElementTree.SubElement(source, "SrcRect", xOff="0", yOff="0", **size)
            ElementTree.SubElement(source, "DstRect", xOff=str(piece.col), yOff=str(piece.row), **size)
        for name in levels:
            overview = ElementTree.SubElement(element, "Overview")
            ElementTree.SubElement(overview, "SourceFilename", relativeToVRT="0").text = name
            ElementTree.SubElement(overview, "SourceBand").text = str(band)
    return ElementTree.tostring(root, encoding="unicode")


def write_interleaved_cog(pieces: list[Piece], suffix: str, dst: Path, context: MapContext, *, dtype: str,
                    dimensions: int, nodata: float, tags: dict, descriptions: list[str],
                    compression: dict[str, str]) -> None:
    """A COG of `dimensions` bands named `descriptions` from the pieces' pixel-interleaved files (`piece.path` +
    `suffix`), with GDAL's nearest overviews (its COG driver's levels: `overview_factors`; an average of quantised
    values is no quantised average), `tags` and `compression` (COG creation options)."""
    from rasterio import shutil as rio_shutil

    from eoscale.raster.reader import gdal_cache

    georef = context.georef
    kind = np.dtype(dtype)
    gdal_type = {"int8": "Int8", "float32": "Float32"}[kind.name]
    if sum(p.rows * p.columns for p in pieces) != georef.height * georef.width:
        raise RuntimeError(f"parts hold {sum(p.rows * p.columns for p in pieces)} pixels of a "
                           f"{georef.height}×{georef.width} field")
    parts = [(p, _mapped(p.path.with_suffix(suffix), (p.rows, p.columns, dimensions), kind))
             for p in pieces if p.rows * p.columns > 0]  # a process given no rows of the scene wrote an empty part
    levels = overview_factors(georef.height, georef.width)
    work = pieces[0].path.parent  # the scene's work folder: removed with the parts
    paths = [work / f"{dst.name}.overview-{factor}{suffix}" for factor in levels]
    try:
        overviews = [_overview(parts, path, georef.height, georef.width, factor, dimensions, kind)
                     for path, factor in zip(paths, levels, strict=True)]
        vrt = _vrt(parts, overviews, context, gdal_type=gdal_type, nodata=nodata,
                   tags={**tags, "OVERVIEW_RESAMPLING": "NEAREST"}, descriptions=descriptions)
        with ExitStack() as stack:
            # the GDAL block cache holds two rows of the COG's tiles while they are written
            stack.enter_context(gdal_cache(2 * BLOCKSIZE * georef.width * dimensions * kind.itemsize))
            # MEM::: names open only where allowed (GDAL 3.10 on; older GDALs open them anyway)
            stack.enter_context(rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS", GDAL_MEM_ENABLE_OPEN="YES"))
            rio_shutil.copy(vrt, dst, driver="COG", BLOCKSIZE=BLOCKSIZE, OVERVIEWS="FORCE_USE_EXISTING",
                            NUM_THREADS="ALL_CPUS", BIGTIFF="IF_SAFER", **compression)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
