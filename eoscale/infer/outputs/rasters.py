"""What every output writer shares: part files, the `.partial` names, and COGs written from parts.

Each process appends the rows it finishes to its *part* files (raw rows of one column tile, written in order;
`part_path`, `read_part`); the process that finalises the scene copies every part into its place in a tiled
GeoTIFF and turns that into the COG with GDAL's COG driver (`write_cog`). Everything is written under a hidden
`.partial` name and renamed at the end (`publish`), the file that marks the scene as done last: an interrupted
run leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS

BLOCKSIZE = 256  # COG tiles; also the strips in which parts are copied into the intermediate GeoTIFF


def partial(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed into place."""
    return path.with_name(f".{path.name}.partial")


def publish(paths: list[Path]) -> None:
    """Rename the `.partial` files of `paths` into place, in the order given."""
    for path in paths:
        os.replace(partial(path), path)


def part_path(folder: Path, part: int, parts: int, tile: int = 0, tiles: int = 1) -> Path:
    """Where process part `part` of `parts` writes column tile `tile` of `tiles` (suffixes added)."""
    return Path(folder) / f"part-{part:04d}-of-{parts:04d}-cols-{tile:03d}-of-{tiles:03d}"


def read_part(path: Path) -> dict | None:
    """A finished part's description, or None while it is not finished."""
    path = Path(path).with_suffix(".json")
    return json.loads(path.read_text()) if path.exists() else None


@dataclass(frozen=True)
class Piece:
    """A part file's place in the map: `rows` × `columns` pixels from scene row `row`, column `col`."""

    path: Path  # without suffix
    row: int
    col: int
    rows: int
    columns: int


def _rows(path: Path, width: int, dtype: str, rows: int) -> Iterator[np.ndarray]:
    """A part file's rows, `rows` at a time (the last chunk shorter)."""
    with open(path, "rb") as f:
        while chunk := f.read(rows * width * np.dtype(dtype).itemsize):
            yield np.frombuffer(chunk, dtype=dtype).reshape(-1, width)


# -- rasters --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Georef:
    crs: CRS
    transform: Affine
    width: int
    height: int


def write_cog(pieces: list[Piece], suffix: str, dst: Path, georef: Georef, *, dtype: str, nodata: int,
              overview: str, colormap: dict | None = None, tags: dict | None = None, band_tags: dict | None = None,
              description: str = "") -> None:
    """Copy the pieces' files (`piece.path` + `suffix`) into their places in a tiled GeoTIFF next to `dst`, then
    write `dst` as a COG (deflate, internal tiles, `overview`-resampled overviews) from it. Memory stays at
    `BLOCKSIZE` rows of one piece.

    The COG is written by GDAL's own COG driver, which compresses each tile once; rio-cogeo's `cog_translate`
    writes a compressed temporary file and recompresses it, which takes longer for a file of the same size (both
    are valid for `rio cogeo validate`). The COG's cost is part of the whole command in benchmarks/predict.json.
    """
    from rasterio import shutil as rio_shutil

    staging = dst.with_name(dst.name + ".tiled.tif")
    profile = dict(driver="GTiff", width=georef.width, height=georef.height, count=1, dtype=dtype, nodata=nodata,
                   crs=georef.crs, transform=georef.transform, tiled=True, blockxsize=BLOCKSIZE,
                   blockysize=BLOCKSIZE, BIGTIFF="IF_SAFER")  # uncompressed: read once, right away, by the COG driver
    try:
        with rasterio.open(staging, "w", **profile) as out:
            pixels = 0
            for piece in pieces:
                row = piece.row
                for strip in _rows(piece.path.with_suffix(suffix), piece.columns, dtype, BLOCKSIZE):
                    out.write(strip, 1, window=rasterio.windows.Window(piece.col, row, piece.columns, strip.shape[0]))
                    row += strip.shape[0]
                pixels += (row - piece.row) * piece.columns
            if pixels != georef.height * georef.width:
                raise RuntimeError(f"parts hold {pixels} pixels of a {georef.height}×{georef.width} map")
            if colormap:
                out.write_colormap(1, colormap)
            out.update_tags(**(tags or {}), OVERVIEW_RESAMPLING=overview.upper())  # as rio-cogeo tags it
            out.update_tags(1, **(band_tags or {}))
            out.set_band_description(1, description)
        # the colour table, nodata, tags and band description travel with the copy
        with rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS"):
            rio_shutil.copy(staging, dst, driver="COG", COMPRESS="DEFLATE", BLOCKSIZE=BLOCKSIZE,
                                 OVERVIEW_RESAMPLING=overview.upper(), NUM_THREADS="ALL_CPUS", BIGTIFF="IF_SAFER")
    finally:
        staging.unlink(missing_ok=True)


# -- parts ----------------------------------------------------------------------------------------------------
class PartFiles:
    """The raw files of one part (one process's rows of one column tile of a scene): one file a suffix, appended
    block by block (`start` with each block, then `append` its rows), renamed into place by `close`, which then
    writes the part's description (`piece`, the writer's `summary` state and `meta`; its completion mark)."""

    def __init__(self, path: Path, suffixes: list[str]) -> None:
        self.path = path
        self.rows = 0
        self.first_row: int | None = None
        self.col = 0
        self.columns = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._files = {suffix: open(self._tmp(suffix), "wb") for suffix in suffixes}

    def _tmp(self, suffix: str) -> Path:
        return self.path.with_suffix(suffix + ".tmp")

    def start(self, row: int, col: int, columns: int) -> None:
        """Note where the part starts (the first block's row and column, its width); later calls do nothing."""
        if self.first_row is None:
            self.first_row, self.col, self.columns = row, col, columns

    def append(self, rows: dict[str, np.ndarray]) -> None:
        """Append a block's rows: `{suffix: (rows, columns) array}`, one array for each file of the part."""
        for suffix, values in rows.items():
            self._files[suffix].write(np.ascontiguousarray(values).tobytes())
        self.rows += next(iter(rows.values())).shape[0]

    def close(self, summary: dict, **meta: object) -> None:
        for suffix, f in self._files.items():
            f.close()
            os.replace(self._tmp(suffix), self.path.with_suffix(suffix))
        piece = {"row": self.first_row or 0, "col": self.col, "rows": self.rows, "columns": self.columns}
        self._tmp(".json").write_text(json.dumps({"piece": piece, **summary, **meta}))
        os.replace(self._tmp(".json"), self.path.with_suffix(".json"))

    def abort(self) -> None:
        for f in self._files.values():
            f.close()
