"""What `eoscale predict` writes for a scene, and how: part files, the Cloud-Optimized GeoTIFFs, the quick-look.

Per scene, in the output folder:

    <scene>_landcover.tif    COG, class CODES of the class table (WorldCover 10, 20, ...), nodata where the
                             input has nodata, colormap and class names embedded, mode-resampled overviews
    <scene>_confidence.tif   COG (--confidence), the blended probability of the chosen class, 0–100 (uint8)
    <scene>_quicklook.png    the map with a legend
    <scene>_areas.csv/.json  pixels, hectares and percent of the valid area per class (`eoscale.infer.areas`)
    <scene>_item.json        the map's STAC Item: footprint, grid, classes, assets and lineage (`eoscale.catalog.stac`)

Codes rather than indices, so the map reads like the product it was trained on; the class table (code,
name, colour) is in the COG's tags. Each process appends the rows it finishes to its *part* files (raw
rows of one column tile, written in order); the process that finalises the scene copies every part into its
place in a tiled GeoTIFF and turns that into the COG with GDAL's COG driver. Everything is written under a
hidden `.partial` name and renamed at the end, the class map last: an interrupted run leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
import torch
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling

from eoscale.classes import ClassTable
from eoscale.errors import InputError, OutputExistsError
from eoscale.infer.areas import AreaCounter
from eoscale.infer.predict import Block

BLOCKSIZE = 256  # COG tiles; also the strips in which parts are copied into the intermediate GeoTIFF
CONFIDENCE_NODATA = 255
QUICKLOOK_PIXELS = 1000  # longest side of the quick-look's map, in pixels


@dataclass(frozen=True)
class SceneOutputs:
    """The files of one scene's result."""

    landcover: Path
    confidence: Path | None
    quicklook: Path
    areas_csv: Path
    areas_json: Path
    item: Path

    @classmethod
    def for_scene(cls, folder: Path, scene_id: str, *, confidence: bool) -> SceneOutputs:
        folder = Path(folder)
        return cls(
            landcover=folder / f"{scene_id}_landcover.tif",
            confidence=folder / f"{scene_id}_confidence.tif" if confidence else None,
            quicklook=folder / f"{scene_id}_quicklook.png",
            areas_csv=folder / f"{scene_id}_areas.csv",
            areas_json=folder / f"{scene_id}_areas.json",
            item=folder / f"{scene_id}_item.json",
        )

    def files(self) -> list[Path]:
        """All files, the class map last (its presence marks the scene as done)."""
        return [p for p in (self.confidence, self.quicklook, self.areas_csv, self.areas_json, self.item,
                            self.landcover) if p]

    def check(self, *, overwrite: bool) -> None:
        """A finished result (its class map exists) is kept unless `overwrite`; leftovers of a run that did not
        finish are replaced."""
        if self.landcover.exists() and not overwrite:
            raise OutputExistsError(f"{str(self.landcover)!r} exists: pass --overwrite to replace it")


def partial(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed into place."""
    return path.with_name(f".{path.name}.partial")


def publish(paths: list[Path]) -> None:
    """Rename the `.partial` files of `paths` into place, in the order given."""
    for path in paths:
        os.replace(partial(path), path)


@dataclass(frozen=True)
class MapEncoding:
    """How class indices are stored: as the class table's codes, in the smallest type with a free nodata value."""

    dtype: str
    nodata: int
    values: np.ndarray  # values[index] = code

    @classmethod
    def from_table(cls, table: ClassTable) -> MapEncoding:
        codes = np.asarray(table.codes, dtype=np.int64)
        if codes.min() < 0 or codes.max() > 65534:
            raise InputError(f"class codes {table.codes} do not fit an unsigned map: codes must lie in 0..65534")
        dtype, top = ("uint8", 255) if codes.max() <= 255 else ("uint16", 65535)
        free = [v for v in (0, top) if v not in set(codes.tolist())]
        if not free:
            dtype, top, free = "uint16", 65535, [65535]
        return cls(dtype, free[0], codes.astype(dtype))

    def colormap(self, table: ClassTable) -> dict[int, tuple[int, int, int, int]]:
        colours = {int(v): (*c.rgb, 255) for v, c in zip(self.values, table.classes, strict=True)}
        colours[self.nodata] = (0, 0, 0, 0)
        return colours


def map_tags(table: ClassTable, encoding: MapEncoding, extra: dict[str, str]) -> tuple[dict, dict]:
    """Dataset tags (the class table as JSON, and `extra`) and band tags (`CLASS_<code>=<name>`)."""
    dataset = {"EOSCALE_CLASSES": json.dumps([{"code": c.code, "name": c.name, "color": c.color} for c in table.classes]),
               "EOSCALE_NODATA": str(encoding.nodata), **extra}
    band = {f"CLASS_{c.code}": c.name for c in table.classes}
    return dataset, band


# -- parts ----------------------------------------------------------------------------------------------------
class PartWriter:
    """One process's rows of one column tile of a scene's map (and confidence), appended block by block to raw
    files at `path` (+ `.classes`, `.confidence`; `.json` describes the part once it is finished)."""

    def __init__(self, path: Path, encoding: MapEncoding, counter: AreaCounter, *, confidence: bool) -> None:
        self.path = path
        self.encoding = encoding
        self.counter = counter
        self.rows = 0
        self.first_row: int | None = None
        self.col = 0
        self.columns = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._classes = open(self._tmp(".classes"), "wb")
        self._confidence = open(self._tmp(".confidence"), "wb") if confidence else None

    def _tmp(self, suffix: str) -> Path:
        return self.path.with_suffix(suffix + ".tmp")

    def write(self, block: Block) -> None:
        """Turn a block's probabilities into stored values and append them."""
        if self.first_row is None:
            self.first_row, self.col, self.columns = block.row, block.col, int(block.probs.shape[2])
        if block.probs.shape[1] == 0:
            return
        if block.probs.is_cuda:
            index, confidence = most_probable_on_device(block.probs)
        else:
            # numpy, not torch: this runs beside the forward passes (run.predict_part), and a torch kernel here
            # would start a second team of OpenMP threads on cores the forward's own team is using
            index, confidence = most_probable(block.probs.numpy())
        valid = block.valid
        values = self.encoding.values[index]
        values[~valid] = self.encoding.nodata
        self._classes.write(np.ascontiguousarray(values).tobytes())
        if self._confidence is not None:
            percent = np.clip(np.round(confidence * np.float32(100)), 0, 100).astype(np.uint8)
            percent[~valid] = CONFIDENCE_NODATA
            self._confidence.write(percent.tobytes())
        self.counter.add(block.row, index, valid)
        self.rows += index.shape[0]

    def close(self, **meta: object) -> None:
        """Finish the part: files renamed into place, then its description (the part's completion mark)."""
        for f, suffix in ((self._classes, ".classes"), (self._confidence, ".confidence")):
            if f is not None:
                f.close()
                os.replace(self._tmp(suffix), self.path.with_suffix(suffix))
        piece = {"row": self.first_row or 0, "col": self.col, "rows": self.rows, "columns": self.columns}
        description = {"piece": piece, "areas": self.counter.state(), **meta}
        self._tmp(".json").write_text(json.dumps(description))
        os.replace(self._tmp(".json"), self.path.with_suffix(".json"))

    def abort(self) -> None:
        for f in (self._classes, self._confidence):
            if f is not None:
                f.close()


def most_probable(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pixel's most probable class `(classes, y, x) → (y, x)` and its probability; of equal ones the
    first, as `torch.max` chooses. One `argmax` and one gather are faster than a pass per class."""
    index = np.argmax(probs, axis=0)
    return index, np.take_along_axis(probs, index[None], axis=0)[0]


def most_probable_on_device(probs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """`most_probable` where `probs` lies (on a GPU: 8 + 4 bytes a pixel cross to the host instead of 4 per
    class); `torch.max` also takes the first of equal probabilities."""
    confidence, index = torch.max(probs, dim=0)
    return index.cpu().numpy(), confidence.cpu().numpy()


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
    import rasterio.shutil

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
            rasterio.shutil.copy(staging, dst, driver="COG", COMPRESS="DEFLATE", BLOCKSIZE=BLOCKSIZE,
                                 OVERVIEW_RESAMPLING=overview.upper(), NUM_THREADS="ALL_CPUS", BIGTIFF="IF_SAFER")
    finally:
        staging.unlink(missing_ok=True)


def write_quicklook(landcover: Path, png: Path, table: ClassTable, encoding: MapEncoding, areas: dict,
                    *, title: str) -> None:
    """A PNG of the map (read from its overviews, so memory does not grow with the scene) with a legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    with rasterio.open(landcover) as src:
        factor = max(1, int(np.ceil(max(src.width, src.height) / QUICKLOOK_PIXELS)))
        shape = (max(1, src.height // factor), max(1, src.width // factor))
        values = src.read(1, out_shape=shape, resampling=Resampling.mode)
    lookup = np.full(int(encoding.values.max()) + 2 if encoding.values.size else 1, -1, dtype=np.int64)
    lookup[encoding.values.astype(np.int64)] = np.arange(len(table))
    index = np.where(values == encoding.nodata, -1, lookup[np.minimum(values, len(lookup) - 1)])
    shown = np.ma.masked_less(index, 0)
    figure = Figure(figsize=(9, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.02, 0.05, 0.62, 0.88))
    axes.imshow(shown, cmap=ListedColormap([c.color for c in table.classes]), vmin=-0.5, vmax=len(table) - 0.5,
                interpolation="nearest")
    axes.set_axis_off()
    axes.set_title(title, fontsize=10)
    percent = {r["code"]: r["percent"] for r in areas["classes"]}
    handles = [Patch(facecolor=c.color, edgecolor="black", linewidth=0.3, label=f"{c.name} ({percent.get(c.code, 0):.1f}%)")
               for c in table.classes]
    figure.legend(handles=handles, loc="center left", bbox_to_anchor=(0.66, 0.5), fontsize=8, frameon=False,
                  title=f"{areas['valid_hectares']:.0f} ha mapped", title_fontsize=9)
    figure.savefig(png, format="png")
