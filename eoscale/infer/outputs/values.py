"""The "values" output writer: what `eoscale predict` writes for a scene of a per-pixel regression model.

Per scene, in the output folder:

    <scene>_values.tif            COG, float32, the predicted value in the target's units (the contract's
                                  `target_info`: name, units), nodata -9999 (`VALUES_NODATA`; NaN is legal in a
                                  float GeoTIFF, but -9999 is what most GIS tools expect) where the input has no
                                  data; average-resampled overviews
    <scene>_values_quicklook.png  the map in a colour ramp (viridis) with a colour bar
    <scene>_values_summary.json   min, max, mean, std, percentiles (1, 5, 25, 50, 75, 95, 99) and a histogram
                                  of the valid pixels: a continuous map has no class areas
    <scene>_values_item.json      the map's STAC Item (raster extension: float32, nodata, units)

Out of core as the class writer: each process's parts hold the raw float32 rows (`.values`) and a running
summary (count, sums, min, max and a histogram over fixed bins), merged in `finish`; the value COG is renamed
into place last (its presence marks the scene as done).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pystac
import rasterio
from rasterio.enums import Resampling

from eoscale.catalog.digest import file_sha256
from eoscale.catalog.stac import AssetInfo, map_item, to_json, write_json
from eoscale.contract import TARGET_TAG, BandContract
from eoscale.errors import OutputExistsError
from eoscale.infer.outputs.base import MapContext, OutputWriter, register_writer
from eoscale.infer.outputs.classes import QUICKLOOK_PIXELS
from eoscale.infer.outputs.rasters import PartFiles, Piece, partial, write_cog

VALUES_NODATA = -9999.0
HISTOGRAM_BINS = 1000
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


@dataclass(frozen=True)
class ValueFiles:
    values: Path
    quicklook: Path
    summary: Path
    item: Path

    @classmethod
    def for_scene(cls, folder: Path, scene_id: str) -> ValueFiles:
        folder = Path(folder)
        return cls(folder / f"{scene_id}_values.tif", folder / f"{scene_id}_values_quicklook.png",
                   folder / f"{scene_id}_values_summary.json", folder / f"{scene_id}_values_item.json")

    def files(self) -> list[Path]:
        return [self.quicklook, self.summary, self.item, self.values]

    def check(self, *, overwrite: bool) -> None:
        if self.values.exists() and not overwrite:
            raise OutputExistsError(f"{str(self.values)!r} exists: pass --overwrite to replace it")


class ValueSummary:
    """Count, sum, sum of squares, min, max and a histogram over `[low, high)` (with under- and overflow bins)
    of the valid values: parts' summaries add up, percentiles come from the histogram."""

    def __init__(self, low: float, high: float, bins: int = HISTOGRAM_BINS) -> None:
        self.low, self.high = float(low), float(high) if high > low else float(low) + 1.0
        self.counts = np.zeros(bins + 2, dtype=np.int64)
        self.count, self.total, self.squares = 0, 0.0, 0.0
        self.min, self.max = float("inf"), float("-inf")

    def add(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)].astype(np.float64)
        if not v.size:
            return
        self.count += int(v.size)
        self.total += float(v.sum())
        self.squares += float(np.square(v).sum())
        self.min, self.max = min(self.min, float(v.min())), max(self.max, float(v.max()))
        bins = len(self.counts) - 2
        index = np.floor((v - self.low) / (self.high - self.low) * bins).astype(np.int64) + 1
        self.counts += np.bincount(np.clip(index, 0, bins + 1), minlength=bins + 2)

    def state(self) -> dict:
        return {"low": self.low, "high": self.high, "counts": self.counts.tolist(), "count": self.count,
                "total": self.total, "squares": self.squares, "min": self.min if self.count else None,
                "max": self.max if self.count else None}

    def merge(self, state: dict) -> None:
        self.counts += np.asarray(state["counts"], dtype=np.int64)
        self.count += state["count"]
        self.total += state["total"]
        self.squares += state["squares"]
        if state["count"]:
            self.min, self.max = min(self.min, state["min"]), max(self.max, state["max"])

    def table(self, *, scene: str, name: str, units: str | None) -> dict:
        """The scene's summary: what `<scene>_values_summary.json` holds."""
        out: dict[str, Any] = {"scene": scene, "name": name, "units": units, "valid_pixels": self.count}
        if not self.count:
            return {**out, "min": None, "max": None, "mean": None, "std": None, "percentiles": {}, "histogram": {}}
        mean = self.total / self.count
        bins = len(self.counts) - 2
        edges = np.linspace(self.low, self.high, bins + 1)
        cumulative = np.cumsum(self.counts)
        percentiles = {}
        for q in PERCENTILES:
            k = int(np.searchsorted(cumulative, q / 100 * self.count))  # 0: below low, bins + 1: above high
            value = self.min if k == 0 else self.max if k > bins else (edges[k - 1] + edges[k]) / 2
            percentiles[f"p{q:02d}"] = float(np.clip(value, self.min, self.max))
        # the histogram shown: 50 bins over the values' range (merged from the fine bins)
        coarse = 50
        inside = self.counts[1:-1].reshape(coarse, bins // coarse).sum(axis=1) if bins % coarse == 0 else self.counts[1:-1]
        return {**out, "min": self.min, "max": self.max, "mean": mean,
                "std": float(np.sqrt(max(self.squares / self.count - mean * mean, 0.0))), "percentiles": percentiles,
                "histogram": {"edges": np.linspace(self.low, self.high, len(inside) + 1).tolist(),
                              "counts": inside.tolist(), "below": int(self.counts[0]), "above": int(self.counts[-1])}}


class ValuePart:
    """One process's rows of one column tile of a scene's value map, appended block by block (`.values`)."""

    def __init__(self, path: Path, summary: ValueSummary) -> None:
        self.summary = summary
        self._files = PartFiles(path, [".values"])

    def write(self, block: Any) -> None:
        self._files.start(block.row, block.col, int(block.probs.shape[2]))
        if block.probs.shape[1] == 0:
            return
        values = block.probs[0].float().cpu().numpy().astype(np.float32, copy=True)
        values[~block.valid | ~np.isfinite(values)] = VALUES_NODATA
        self._files.append({".values": values})
        self.summary.add(values[values != VALUES_NODATA])

    def close(self, **meta: object) -> None:
        self._files.close({"values": self.summary.state()}, **meta)

    def abort(self) -> None:
        self._files.abort()


def write_value_quicklook(tif: Path, png: Path, summary: dict, *, title: str) -> None:
    """A PNG of the value map (from its overviews, so memory does not grow with the scene) in a colour ramp
    from the 2nd to the 98th percentile, with a colour bar."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with rasterio.open(tif) as src:
        factor = max(1, int(np.ceil(max(src.width, src.height) / QUICKLOOK_PIXELS)))
        shape = (max(1, src.height // factor), max(1, src.width // factor))
        values = src.read(1, out_shape=shape, resampling=Resampling.average, masked=True)
    p = summary.get("percentiles") or {}
    low, high = p.get("p01", summary.get("min") or 0.0), p.get("p99", summary.get("max") or 1.0)
    figure = Figure(figsize=(8, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.03, 0.05, 0.78, 0.88))
    image = axes.imshow(values, cmap="viridis", vmin=low, vmax=high if high > low else low + 1, interpolation="nearest")
    axes.set_axis_off()
    axes.set_title(title, fontsize=10)
    bar = figure.colorbar(image, cax=figure.add_axes((0.84, 0.15, 0.03, 0.7)))
    bar.set_label(f"{summary.get('name', 'value')}" + (f" ({summary['units']})" if summary.get("units") else ""))
    figure.savefig(png, format="png")


class ValueWriter(OutputWriter):
    """Value maps: the float32 COG, a colour-ramp quick-look, a summary with percentiles and a histogram, and
    the STAC Item."""

    kind = "values"
    summary_column = "values"
    files_note = "value maps, quick-looks and summaries in {output}/ (<scene>_values.tif, _values_quicklook.png, _values_summary.json)"

    def __init__(self, contract: BandContract, *, confidence: bool = False) -> None:
        if confidence:
            from eoscale.errors import InputError

            raise InputError("--confidence writes the mapped class's probability: this model maps values "
                             f"({(contract.target_info or {}).get('name') or 'a regression'}), with no classes, class "
                             "areas or confidence; drop --confidence")
        super().__init__(contract, confidence=confidence)
        info = contract.target_info or {}
        self.name, self.units = str(info.get("name") or "value"), info.get("units")
        low, high = info.get("min"), info.get("max")
        if low is None or high is None or not high > low:
            low, high = -1.0, 1.0
        margin = (float(high) - float(low)) * 0.5  # predictions may leave the training range a little
        self.bounds = (float(low) - margin, float(high) + margin)

    def channels(self) -> int:
        return 1

    def scene_files(self, folder: Path, scene_id: str) -> ValueFiles:
        return ValueFiles.for_scene(folder, scene_id)

    def part(self, path: Path, scene: Any) -> ValuePart:
        return ValuePart(path, ValueSummary(*self.bounds))

    def finish(self, scene: Any, pieces: list[Piece], described: list[dict], files: ValueFiles,
               context: MapContext) -> dict:
        merged = ValueSummary(*self.bounds)
        for d in described:
            merged.merge(d["values"])
        summary = merged.table(scene=scene.id, name=self.name, units=self.units)
        tags = {**context.tags, TARGET_TAG: self.kind, "EOSCALE_TARGET_NAME": self.name,
                "EOSCALE_TARGET_UNITS": self.units or "", "EOSCALE_NODATA": str(VALUES_NODATA)}
        write_cog(pieces, ".values", partial(files.values), context.georef, dtype="float32", nodata=VALUES_NODATA,
                  overview="average", tags=tags,
                  description=self.name + (f" ({self.units})" if self.units else ""))
        partial(files.summary).write_text(json.dumps(summary, indent=1))
        write_value_quicklook(partial(files.values), partial(files.quicklook), summary, title=context.title)
        raster = {"nodata": VALUES_NODATA, "data_type": "float32", **({"unit": self.units} if self.units else {})}
        assets = {
            "values": AssetInfo(f"predicted {self.name}", pystac.MediaType.COG, ["data"], raster=raster),
            "quicklook": AssetInfo("quick-look with colour bar", pystac.MediaType.PNG, ["overview", "visual"]),
            "summary": AssetInfo("value summary: percentiles and histogram", pystac.MediaType.JSON, ["metadata"]),
        }
        paths = {"values": files.values, "quicklook": files.quicklook, "summary": files.summary}
        item = map_item(scene.id, crs=scene.crs, transform=scene.transform, width=scene.width, height=scene.height,
                        files=paths, lineage=context.lineage, assets=assets, product="values",
                        title=f"{self.name} of {scene.id}",
                        checksums={"values": file_sha256(partial(files.values))})
        write_json(partial(files.item), to_json(item))
        return summary

    @classmethod
    def describe(cls, summary: dict) -> str:
        if not summary.get("valid_pixels"):
            return "no valid pixel"
        units = f" {summary['units']}" if summary.get("units") else ""
        p = summary["percentiles"]
        return (f"{summary['name']} mean {summary['mean']:.2f}{units}, median {p['p50']:.2f}, "
                f"{summary['min']:.2f}–{summary['max']:.2f}")


register_writer(ValueWriter.kind, ValueWriter)
