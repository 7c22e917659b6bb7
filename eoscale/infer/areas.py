"""Class areas of a land-cover map: pixels, hectares and percent of the valid (not nodata) area per class.

The summary of a class map (the "classes" output writer, `eoscale.infer.outputs.classes`). Counted block by
block as the map is made, so nothing reads the map again. In a projected CRS every pixel
has the same area (the transform's determinant, in metres through the CRS's unit); in a geographic CRS a
pixel's area shrinks towards the poles, so each row's pixels are measured on the CRS's ellipsoid.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from affine import Affine
from rasterio.crs import CRS

from eoscale.classes import ClassTable
from eoscale.raster.pixel_area import M2_PER_HECTARE, pixel_area_m2, row_areas_m2


@dataclass
class AreaCounter:
    """Per-class pixel counts (and, in a geographic CRS, areas) of the blocks added so far."""

    classes: int
    crs: CRS
    transform: Affine
    pixels: np.ndarray = field(init=False)
    area_m2: np.ndarray = field(init=False)  # used in geographic CRSs only

    def __post_init__(self) -> None:
        self.pixels = np.zeros(self.classes, dtype=np.int64)
        self.area_m2 = np.zeros(self.classes, dtype=np.float64)
        self._pixel_m2 = pixel_area_m2(self.crs, self.transform)

    def add(self, row: int, index: np.ndarray, valid: np.ndarray) -> None:
        """Count block rows starting at scene row `row`: class indices `index` where `valid`."""
        self.pixels += np.bincount(index[valid].ravel(), minlength=self.classes)[: self.classes]
        if self._pixel_m2 is None and index.size:
            per_row = row_areas_m2(self.crs, self.transform, np.arange(row, row + index.shape[0]))
            for r in range(index.shape[0]):
                self.area_m2 += per_row[r] * np.bincount(index[r][valid[r]], minlength=self.classes)[: self.classes]

    def state(self) -> dict:
        return {"pixels": self.pixels.tolist(), "area_m2": self.area_m2.tolist()}

    def merge(self, state: dict) -> None:
        self.pixels += np.asarray(state["pixels"], dtype=np.int64)
        self.area_m2 += np.asarray(state["area_m2"], dtype=np.float64)

    def hectares(self) -> np.ndarray:
        m2 = self.area_m2 if self._pixel_m2 is None else self.pixels * self._pixel_m2
        return m2 / M2_PER_HECTARE


def area_table(counter: AreaCounter, table: ClassTable, *, scene: str) -> dict:
    """The area table of a map as plain data: totals and one record per class, in class-table order."""
    hectares = counter.hectares()
    valid = int(counter.pixels.sum())
    records = [
        {
            "code": c.code,
            "name": c.name,
            "color": c.color,
            "pixels": int(counter.pixels[i]),
            "hectares": round(float(hectares[i]), 4),
            "percent": round(100.0 * int(counter.pixels[i]) / valid, 4) if valid else 0.0,
        }
        for i, c in enumerate(table.classes)
    ]
    return {
        "scene": scene,
        "valid_pixels": valid,
        "valid_hectares": round(float(hectares.sum()), 4),
        "pixel_area_m2": counter._pixel_m2,
        "classes": records,
    }


def write_area_table(areas: dict, csv_path: Path, json_path: Path) -> None:
    """The table as CSV (`code,name,pixels,hectares,percent`) and as JSON (with totals)."""
    with Path(csv_path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["code", "name", "pixels", "hectares", "percent"])
        for r in areas["classes"]:
            writer.writerow([r["code"], r["name"], r["pixels"], f"{r['hectares']:.4f}", f"{r['percent']:.4f}"])
    Path(json_path).write_text(json.dumps(areas, indent=2) + "\n")


def top_classes(areas: dict, n: int = 3) -> list[dict]:
    """The `n` classes covering most of the valid area."""
    return sorted(areas["classes"], key=lambda r: -r["pixels"])[:n]
