"""The "classes" output writer: what `eoscale predict` writes for a scene of a class model, and how.

Per scene, in the output folder:

    <scene>_landcover.tif    COG, class CODES of the class table (WorldCover 10, 20, ...), nodata where the
                             input has nodata, colormap and class names embedded, mode-resampled overviews
    <scene>_confidence.tif   COG (--confidence), the blended probability of the chosen class, 0–100 (uint8)
    <scene>_uncertainty.tif  COG (--uncertainty entropy|margin), 0–100 (uint8), and <scene>_probabilities.tif
                             (--probabilities), one band a class: `eoscale.infer.outputs.uncertainty`
    <scene>_quicklook.png    the map with a legend
    <scene>_areas.csv/.json  pixels, hectares and percent of the valid area per class (`eoscale.infer.areas`)
    <scene>_item.json        the map's STAC Item: footprint, grid, classes, assets and lineage (`eoscale.catalog.stac`)

Codes rather than indices, so the map reads like the product it was trained on; the class table (code,
name, colour) is in the COG's tags. Parts hold the class codes (`.classes`) and confidences (`.confidence`) of
each block's most probable class, and the class areas counted so far (`eoscale.infer.outputs.rasters` turns
parts into COGs); the class map is renamed into place last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import torch
from rasterio.enums import Resampling

from eoscale.catalog.digest import file_sha256
from eoscale.catalog.stac import map_item, to_json, write_json
from eoscale.classes import ClassTable
from eoscale.contract import BandContract
from eoscale.errors import InputError, OutputExistsError
from eoscale.infer.areas import AreaCounter, area_table, top_classes, write_area_table
from eoscale.infer.outputs.base import MapContext, OutputWriter, register_writer
from eoscale.infer.outputs.rasters import PartFiles, Piece, partial, write_cog
from eoscale.infer.outputs.smoothing import BayesSmoothing, check_mmu, refine
from eoscale.infer.outputs.uncertainty import (
    DESCRIPTIONS,
    PROBABILITIES_SUFFIX,
    PROBABILITY_NODATA,
    UNCERTAINTY,
    UNCERTAINTY_NODATA,
    UNCERTAINTY_SUFFIX,
    probability_rows,
    uncertainty_rows,
    write_probabilities_cog,
)

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
    uncertainty: Path | None = None
    probabilities: Path | None = None

    @classmethod
    def for_scene(cls, folder: Path, scene_id: str, *, confidence: bool, uncertainty: bool = False,
                  probabilities: bool = False) -> SceneOutputs:
        folder = Path(folder)
        return cls(
            uncertainty=folder / f"{scene_id}_uncertainty.tif" if uncertainty else None,
            probabilities=folder / f"{scene_id}_probabilities.tif" if probabilities else None,
            landcover=folder / f"{scene_id}_landcover.tif",
            confidence=folder / f"{scene_id}_confidence.tif" if confidence else None,
            quicklook=folder / f"{scene_id}_quicklook.png",
            areas_csv=folder / f"{scene_id}_areas.csv",
            areas_json=folder / f"{scene_id}_areas.json",
            item=folder / f"{scene_id}_item.json",
        )

    def files(self) -> list[Path]:
        """All files, the class map last (its presence marks the scene as done)."""
        return [p for p in (self.confidence, self.uncertainty, self.probabilities, self.quicklook, self.areas_csv, self.areas_json, self.item,
                            self.landcover) if p]

    def check(self, *, overwrite: bool) -> None:
        """A finished result (its class map exists) is kept unless `overwrite`; leftovers of a run that did not
        finish are replaced."""
        if self.landcover.exists() and not overwrite:
            raise OutputExistsError(f"{str(self.landcover)!r} exists: pass --overwrite to replace it")


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

    def __init__(self, path: Path, encoding: MapEncoding, counter: AreaCounter, *, confidence: bool,
                 uncertainty: str = "none", probabilities: bool = False) -> None:
        self.path = path
        self.encoding = encoding
        self.counter = counter
        self.confidence = confidence
        self.uncertainty = uncertainty
        self.probabilities = probabilities
        suffixes = [".classes", *[".confidence"] * confidence, *[UNCERTAINTY_SUFFIX] * (uncertainty != "none"),
                    *[PROBABILITIES_SUFFIX] * probabilities]
        self._files = PartFiles(path, suffixes)

    @property
    def rows(self) -> int:
        return self._files.rows

    def write(self, block: Any) -> None:
        """Turn a block's probabilities (an `eoscale.infer.predict.Block`) into stored values and append them."""
        self._files.start(block.row, block.col, int(block.probs.shape[2]))
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
        rows = {".classes": values}
        if self.confidence:
            percent = np.clip(np.round(confidence * np.float32(100)), 0, 100).astype(np.uint8)
            percent[~valid] = CONFIDENCE_NODATA
            rows[".confidence"] = percent
        if self.uncertainty != "none" or self.probabilities:
            probs = block.probs.cpu().numpy()
            if self.uncertainty != "none":
                rows[UNCERTAINTY_SUFFIX] = uncertainty_rows(probs, valid, self.uncertainty)
            if self.probabilities:
                rows[PROBABILITIES_SUFFIX] = probability_rows(probs, valid)
        self._files.append(rows)
        self.counter.add(block.row, index, valid)

    def close(self, **meta: object) -> None:
        """Finish the part: files renamed into place, then its description (the part's completion mark)."""
        self._files.close({"areas": self.counter.state()}, **meta)

    def abort(self) -> None:
        self._files.abort()


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


# -- the writer -----------------------------------------------------------------------------------------------
class ClassWriter(OutputWriter):
    """Class maps: the class COG (codes, colours, class names), the confidence COG (--confidence), the class
    areas, the quick-look with its legend and the STAC Item (classification extension)."""

    kind = "classes"
    map_description = "land-cover class code"  # the class COG's band description
    map_asset = "landcover"  # the map's key among its STAC Item's assets
    summary_column = "largest classes"
    files_note = "maps, quick-looks and area tables in {output}/ (<scene>_landcover.tif, _quicklook.png, _areas.csv)"

    def __init__(self, contract: BandContract, *, confidence: bool = False, uncertainty: str = "none",
                 probabilities: bool = False, smooth: str | None = None, mmu: int = 0) -> None:
        super().__init__(contract, confidence=confidence)
        if uncertainty not in UNCERTAINTY:
            raise InputError(f"--uncertainty {uncertainty!r} is not one of {', '.join(UNCERTAINTY)}")
        self.uncertainty, self.probabilities = uncertainty, probabilities
        # post-classification (eoscale.infer.outputs.smoothing): the parts keep the probabilities for the smoothing
        self.smooth, self.mmu = BayesSmoothing.parse(smooth), check_mmu(int(mmu))
        self.table = ClassTable.from_records(list(contract.classes))
        self.encoding = MapEncoding.from_table(self.table)

    def scene_files(self, folder: Path, scene_id: str) -> SceneOutputs:
        return SceneOutputs.for_scene(folder, scene_id, confidence=self.confidence,
                                      uncertainty=self.uncertainty != "none", probabilities=self.probabilities)

    def part(self, path: Path, scene: Any) -> PartWriter:
        counter = AreaCounter(len(self.table), scene.crs, scene.transform)
        return PartWriter(path, self.encoding, counter, confidence=self.confidence, uncertainty=self.uncertainty,
                          probabilities=self.probabilities or self.smooth is not None)

    def finish(self, scene: Any, pieces: list[Piece], described: list[dict], files: SceneOutputs,
               context: MapContext) -> dict:
        """The COG(s), area table, quick-look and STAC Item of a scene from its part files; returns the area table."""
        table, encoding, georef = self.table, self.encoding, context.georef
        counter = AreaCounter(len(table), scene.crs, scene.transform)
        mapped = layers = pieces
        if self.smooth is not None or self.mmu > 1:  # the map (and its layers, when smoothed) made anew; areas recounted
            refined = refine(pieces, pieces[0].path.parent, height=georef.height, width=georef.width,
                             values=encoding.values, nodata=encoding.nodata, dtype=encoding.dtype, smooth=self.smooth,
                             mmu=self.mmu, uncertainty=self.uncertainty, counter=counter)
            mapped = [refined]
            layers = [refined] if self.smooth is not None else pieces
        else:
            for d in described:
                counter.merge(d["areas"])
        tags, band_tags = map_tags(table, encoding, {**context.tags, **self.refinement_tags()})
        write_cog(mapped, ".classes", partial(files.landcover), georef, dtype=encoding.dtype,
                  nodata=encoding.nodata, overview="mode", colormap=encoding.colormap(table), tags=tags,
                  band_tags=band_tags, description=self.map_description)
        if files.confidence is not None:
            write_cog(layers, ".confidence", partial(files.confidence), georef,
                      dtype="uint8", nodata=CONFIDENCE_NODATA, overview="average",
                      tags={"EOSCALE_CHECKPOINT": context.checkpoint},
                      description="probability of the mapped class, percent")
        calibration = {"EOSCALE_CHECKPOINT": context.checkpoint,
                       "EOSCALE_TEMPERATURE": f"{self.contract.temperature:.6g}"}
        if files.uncertainty is not None:
            write_cog(layers, UNCERTAINTY_SUFFIX, partial(files.uncertainty), georef, dtype="uint8",
                      nodata=UNCERTAINTY_NODATA, overview="average",
                      tags={**calibration, "EOSCALE_UNCERTAINTY": self.uncertainty},
                      description=DESCRIPTIONS[self.uncertainty])
        if files.probabilities is not None:
            write_probabilities_cog(layers, partial(files.probabilities), georef, [c.name for c in table.classes],
                                    tags=calibration)
        areas = area_table(counter, table, scene=scene.id)
        write_area_table(areas, partial(files.areas_csv), partial(files.areas_json))
        write_quicklook(partial(files.landcover), partial(files.quicklook), table, encoding, areas,
                        title=context.title)
        assets = {self.map_asset: files.landcover, "confidence": files.confidence, "quicklook": files.quicklook,
                  "areas_csv": files.areas_csv, "areas_json": files.areas_json, "uncertainty": files.uncertainty,
                  "probabilities": files.probabilities}
        checksums = {k: file_sha256(partial(assets[k])) for k in (self.map_asset, "confidence", "uncertainty",
                                                                   "probabilities") if assets[k] is not None}
        item = map_item(scene.id, crs=scene.crs, transform=scene.transform, width=scene.width, height=scene.height,
                        table=table, dtype=encoding.dtype, nodata=encoding.nodata, files=assets,
                        lineage=context.lineage, areas=areas, confidence_nodata=CONFIDENCE_NODATA,
                        checksums=checksums, assets=self.assets(), product=self.map_asset,
                        title=None if self.map_asset == "landcover" else f"{self.map_asset} of {scene.id}")
        write_json(partial(files.item), to_json(item))
        return areas

    def refinement_tags(self) -> dict[str, str]:
        """What the map's tags say of its post-classification (none: no tag)."""
        tags = {}
        if self.smooth is not None:
            tags["EOSCALE_SMOOTH"] = f"bayes:{self.smooth.window}:{self.smooth.smoothness:g}"
        if self.mmu > 1:
            tags["EOSCALE_MMU_PIXELS"] = str(self.mmu)
        return tags

    def assets(self) -> dict:
        """What the Item says of each file: a class map's (`class_map_assets`) and the uncertainty layers."""
        import pystac
        from pystac.extensions.raster import DataType

        from eoscale.catalog.stac import AssetInfo, class_map_assets

        described = class_map_assets(self.encoding.dtype, self.encoding.nodata, CONFIDENCE_NODATA)
        if self.map_asset != "landcover":
            described[self.map_asset] = replace(described.pop("landcover"), title=f"{self.map_description}s")
        if self.uncertainty != "none":
            described["uncertainty"] = AssetInfo(DESCRIPTIONS[self.uncertainty], pystac.MediaType.COG, ["metadata"],
                                                 raster={"nodata": UNCERTAINTY_NODATA, "data_type": DataType.UINT8,
                                                         "unit": "percent"})
        if self.probabilities:
            described["probabilities"] = AssetInfo("class probabilities, one band a class (x 0.005)",
                                                   pystac.MediaType.COG, ["metadata"],
                                                   raster={"nodata": PROBABILITY_NODATA, "data_type": DataType.UINT8,
                                                           "scale": 0.005})
        return described

    @classmethod
    def describe(cls, summary: dict) -> str:
        return ", ".join(f"{c['name']} {c['percent']:.1f}% ({c['hectares']:.0f} ha)" for c in top_classes(summary))


register_writer(ClassWriter.kind, ClassWriter)
