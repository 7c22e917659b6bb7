"""The embedding-field writer: what `eoscale embed` writes for a scene, from the blended feature maps of a backbone.

Per scene, in the output folder:

    <scene>_embedding.tif          COG, int8, one band a dimension (`A00`, `A01`, …), unit-length vectors quantised as
                                   Google's Satellite Embedding is: `(v/127.5)² · sign(v)` de-quantises, nodata −128
                                   (`eoscale.sensors.embedding`); tags: the de-quantisation, the backbone, the layer,
                                   the dimensions, the field's stride (`EMBEDDING_STRIDE`: pixels of the scene a
                                   side of a cell, 1 unless `--field-stride`), the checkpoint and its sha256, the
                                   lineage; nearest overviews (an average of quantised values is no quantised average)
    <scene>_embedding_float.tif    with `--float`: the same vectors as float32, nodata NaN
    <scene>_embedding_item.json    the field's STAC Item

Not registered for a target kind: a field is made from any checkpoint's features, whatever its target; `eoscale embed`
builds this writer itself (`eoscale.infer.run.prepare`). Out of core as the other writers: each process's parts hold
their rows pixel-interleaved (`.int8`, `.float`), copied into the COGs in `finish`; the int8 COG is renamed into place
last (its presence marks the scene as done).
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pystac
from affine import Affine
from torch import Tensor

from eoscale.catalog.digest import file_sha256
from eoscale.catalog.stac import AssetInfo, map_item, to_json, write_json
from eoscale.contract import BandContract
from eoscale.errors import OutputExistsError
from eoscale.infer.embed import Layer
from eoscale.infer.outputs.base import MapContext, OutputWriter
from eoscale.infer.outputs.field_cog import write_interleaved_cog
from eoscale.infer.outputs.rasters import Georef, PartFiles, Piece, partial
from eoscale.sensors.embedding import DEQUANTISATION, DEQUANTISATION_TAG, NODATA, SCALE, band_names

FLOAT_NODATA = float("nan")


@dataclass(frozen=True)
class EmbeddingFiles:
    field: Path
    float_field: Path | None
    item: Path

    @classmethod
    def for_scene(cls, folder: Path, scene_id: str, *, float_field: bool) -> EmbeddingFiles:
        folder = Path(folder)
        return cls(folder / f"{scene_id}_embedding.tif",
                   folder / f"{scene_id}_embedding_float.tif" if float_field else None,
                   folder / f"{scene_id}_embedding_item.json")

    def files(self) -> list[Path]:
        return [p for p in (self.float_field, self.item) if p is not None] + [self.field]

    def check(self, *, overwrite: bool) -> None:
        if self.field.exists() and not overwrite:
            raise OutputExistsError(f"{str(self.field)!r} exists: pass --overwrite to replace it")


def normalise_(vectors: np.ndarray) -> np.ndarray:
    """`vectors` (dimensions, rows, columns), float32, made unit length along dimension 0 in place, as `unit_vectors`
    does (divided by the larger of their norm and 1e-12, the squares summed dimension after dimension, so a pixel's
    result does not depend on where it lies in the block); returns where every component is finite."""
    squares = np.add.reduce(np.square(vectors), axis=0)
    norm = np.sqrt(squares)
    np.maximum(norm, np.float32(1e-12), out=norm)
    with np.errstate(invalid="ignore"):  # a non-finite vector stays non-finite
        np.divide(vectors, norm, out=vectors)
    return np.isfinite(squares)


def quantise_unit(vectors: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """`eoscale.sensors.embedding.quantise` of unit vectors (dimensions, rows, columns) along dimension 0, the same
    int8 bit for bit (float32 `sign(v)·√|v|·127.5` rounded half to even, within ±127), nodata where `keep` (rows,
    columns) is False; in fewer passes over the block than the general function (measured on a block of 96 × 1,024
    pixels of 64 dimensions: normalising and quantising 32 ms, where `unit_vectors` and `quantise` took 90-110 ms)."""
    q = np.abs(vectors)
    np.sqrt(q, out=q)
    q *= np.float32(SCALE)
    np.rint(q, out=q)
    np.minimum(q, 127, out=q)
    np.copysign(q, vectors, out=q)
    with np.errstate(invalid="ignore"):  # a non-finite vector's components: nodata below
        q = q.astype(np.int8)
    q[:, ~keep] = NODATA
    return q


class EmbeddingPart:
    """One process's rows of one column tile of a scene's field: int8 (and float32) vectors, pixel after pixel."""

    def __init__(self, path: Path, *, float_field: bool) -> None:
        self._float = float_field
        self._files = PartFiles(path, [".int8", ".float"] if float_field else [".int8"])
        self.valid = 0

    def write(self, block: Any) -> None:
        # numpy, not torch: this runs beside the forward passes (run.predict_part), and a torch kernel here would start
        # a second team of OpenMP threads on the cores the forward's own team is using (as the class writer says)
        self._files.start(block.row, block.col, int(block.probs.shape[2]))
        vectors = (block.probs.cpu() if block.probs.is_cuda else block.probs).numpy()
        keep = normalise_(vectors) & block.valid  # blended: unit length again
        self.valid += int(block.valid.sum())
        # (rows, columns, dimensions): a pixel's vector is contiguous; transposed as int8, 4× fewer bytes than float32
        rows = {".int8": quantise_unit(vectors, keep).transpose(1, 2, 0)}
        if self._float:
            vectors[:, ~block.valid] = FLOAT_NODATA
            rows[".float"] = vectors.transpose(1, 2, 0)
        self._files.append(rows)

    def close(self, **meta: object) -> None:
        self._files.close({"valid_pixels": self.valid}, **meta)

    def abort(self) -> None:
        self._files.abort()


def field_compression(dtype: str) -> dict[str, str]:
    """The field COG's creation options: ZSTD at level 1 where this GDAL writes it, else deflate at level 1; integers
    with horizontal differencing first (every TIFF reader decodes it; float32 vectors gain nothing from it).

    Measured on the 1,024² int8 field of 64 dimensions of `eoscale bench embed` (2-core VM, one-pass writer, median of
    5): ZSTD 0.57 CPU s and 38.1 MB, deflate 0.87 CPU s and 42.8 MB (without differencing 58.9 MB); deflate's
    default level 6 took 1.5× the time of level 1 for 2 % less (vectors compress little). Reading ZSTD takes a GDAL
    built with it (rasterio's and conda-forge's wheels, QGIS, GDAL ≥ 2.3 as the distributions build it); a field
    written where GDAL has no ZSTD is deflated, which every TIFF reader reads."""
    predictor = {"PREDICTOR": "2"} if np.issubdtype(np.dtype(dtype), np.integer) else {}
    return {"COMPRESS": "ZSTD" if gdal_writes("ZSTD") else "DEFLATE", "LEVEL": "1", **predictor}


@functools.cache
def gdal_writes(codec: str) -> bool:
    """Whether this GDAL compresses GeoTIFFs with `codec` (a GDAL without it warns and writes the file uncompressed)."""
    from rasterio.io import MemoryFile
    from rasterio.transform import from_origin

    with MemoryFile() as memory, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GDAL's warning of an unknown codec is the answer no
        with memory.open(driver="GTiff", width=1, height=1, count=1, dtype="int8", crs="EPSG:4326",
                         transform=from_origin(0, 0, 1, 1), COMPRESS=codec) as probe:
            probe.write(np.zeros((1, 1, 1), dtype=np.int8))
        with memory.open() as probe:
            return probe.compression is not None and probe.compression.name == codec.lower()


def write_field_cog(pieces: list[Piece], suffix: str, dst: Path, context: MapContext, *, dtype: str,
                    dimensions: int, nodata: float, tags: dict) -> None:
    """A field's COG (bands `A00`…, nearest overviews, `field_compression`) from the pieces' pixel-interleaved files,
    in one pass (`eoscale.infer.outputs.field_cog`)."""
    write_interleaved_cog(pieces, suffix, dst, context, dtype=dtype, dimensions=dimensions, nodata=nodata, tags=tags,
                          descriptions=list(band_names(dimensions)), compression=field_compression(dtype))


class EmbeddingWriter(OutputWriter):
    """Embedding fields: the int8 COG (and the float32 one with `float_field`), and the STAC Item."""

    kind = "embedding"
    summary_column = "field"
    files_note = "embedding fields in {output}/ (<scene>_embedding.tif)"

    def __init__(self, contract: BandContract, *, layer: Layer, float_field: bool = False) -> None:
        super().__init__(contract)
        self.layer = layer
        self.float_field = float_field

    def channels(self) -> int:
        return self.layer.dimensions

    def cell(self) -> int:
        return self.layer.cell

    def activate(self, logits: Tensor) -> Tensor:
        return logits.float()  # unit vectors already (`eoscale.infer.embed.UnitVectors`): each window weighs alike

    def scene_files(self, folder: Path, scene_id: str) -> EmbeddingFiles:
        return EmbeddingFiles.for_scene(folder, scene_id, float_field=self.float_field)

    def part(self, path: Path, scene: Any) -> EmbeddingPart:
        return EmbeddingPart(path, float_field=self.float_field)

    def tags(self, context: MapContext) -> dict[str, str]:
        """The field's identity: how to de-quantise it and which model and layer made it."""
        return {**context.tags, DEQUANTISATION_TAG: DEQUANTISATION, "EMBEDDING_MODEL": self.layer.backbone,
                "EMBEDDING_LAYER": self.layer.name, "EMBEDDING_DIMENSIONS": str(self.layer.dimensions),
                "EMBEDDING_NODATA": str(NODATA), "EMBEDDING_STRIDE": str(self.layer.cell)}

    def field_context(self, context: MapContext) -> MapContext:
        """`context` on the field's grid: the scene's, or its cells of `cell` × `cell` pixels (the last row and column
        of cells reaching past the scene's edge where its size is not a multiple of `cell`)."""
        cell = self.layer.cell
        if cell == 1:
            return context
        g = context.georef
        grid = Georef(g.crs, g.transform * Affine.scale(cell), -(-g.width // cell), -(-g.height // cell))
        return replace(context, georef=grid)

    def finish(self, scene: Any, pieces: list[Piece], described: list[dict], files: EmbeddingFiles,
               context: MapContext) -> dict:
        d = self.layer.dimensions
        context = self.field_context(context)
        grid = context.georef
        tags = self.tags(context)
        write_field_cog(pieces, ".int8", partial(files.field), context, dtype="int8", dimensions=d, nodata=NODATA,
                        tags=tags)
        if files.float_field is not None:
            float_tags = {k: v for k, v in tags.items() if k != DEQUANTISATION_TAG}
            write_field_cog(pieces, ".float", partial(files.float_field), context, dtype="float32", dimensions=d,
                            nodata=FLOAT_NODATA, tags=float_tags)
        summary = {"scene": scene.id, "dimensions": d, "layer": self.layer.name, "backbone": self.layer.backbone,
                   "valid_pixels": sum(int(x["valid_pixels"]) for x in described)}
        field = {"nodata": NODATA, "data_type": "int8"}
        assets = {"embedding": AssetInfo(f"{d}-dimensional embedding field ({self.layer.backbone}, {self.layer.name}), "
                                         f"int8, de-quantised as {DEQUANTISATION}", pystac.MediaType.COG, ["data"],
                                         raster=field),
                  "embedding_float": AssetInfo(f"{d}-dimensional embedding field, float32", pystac.MediaType.COG,
                                               ["data"], raster={"data_type": "float32"})}
        paths = {"embedding": files.field, "embedding_float": files.float_field}
        item = map_item(scene.id, crs=grid.crs, transform=grid.transform, width=grid.width, height=grid.height,
                        files=paths, lineage=context.lineage, assets=assets, product="embedding",
                        title=f"embedding field of {scene.id}", checksums={"embedding": file_sha256(partial(files.field))})
        item.properties["eoscale:embedding"] = {k: v for k, v in tags.items() if k.startswith("EMBEDDING")}
        write_json(partial(files.item), to_json(item))
        return json.loads(json.dumps(summary))

    @classmethod
    def describe(cls, summary: dict) -> str:
        return f"{summary['dimensions']}-d ({summary['layer']}), {summary['valid_pixels']:,} pixels"
