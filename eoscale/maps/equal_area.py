"""Class areas of a land-cover map on the ground, whatever its CRS: each pixel weighted by its area on the
WGS 84 ellipsoid, measured by projecting pixel corners to an equal-area CRS (EPSG:6933).

A map's grid is not an equal-area grid: degrees shrink towards the poles, and a UTM zone's metres are off by
its scale factor (−0.08 % on the central meridian, +0.2 % and more at and beyond the zone's edges), which a
mosaic across zones runs into. Pixel areas vary smoothly, so corners are projected every `AREA_STEP` pixels
and each cell's area is shared evenly by its pixels.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from affine import Affine
from rasterio.crs import CRS

from eoscale.classes import IGNORE_INDEX, ClassTable
from eoscale.raster.pixel_area import M2_PER_HECTARE

AREA_CRS = "EPSG:6933"  # WGS 84 / NSIDC EASE-Grid 2.0 Global: equal-area, defined everywhere
AREA_STEP = 16  # pixels between the corners projected to measure pixel areas


def ground_m2(crs: CRS, bounds: tuple[float, float, float, float]) -> float:
    """The ground a rectangle (`bounds` in `crs`) covers, in m² on the WGS 84 ellipsoid (to compare maps in any CRS)."""
    from pyproj import Geod, Transformer

    west, south, east, north = bounds
    t = np.linspace(0.0, 1.0, 21)
    xs = np.r_[west + (east - west) * t, np.full(21, east), east - (east - west) * t, np.full(21, west)]
    ys = np.r_[np.full(21, north), north - (north - south) * t, np.full(21, south), south + (north - south) * t]
    lon, lat = Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(xs, ys)
    area, _ = Geod(ellps="WGS84").polygon_area_perimeter(lon, lat)
    return abs(area)


def pixel_areas_m2(transform: Affine, height: int, width: int, to_equal_area) -> np.ndarray:
    """The ground area of each pixel of a window (`height` × `width`, `transform`), in m²: pixel corners every
    `AREA_STEP` pixels projected to the equal-area CRS by `to_equal_area`, each cell's area (half the cross
    product of its diagonals) shared evenly by its pixels."""
    rows = np.unique(np.r_[np.arange(0, height, AREA_STEP), height])
    cols = np.unique(np.r_[np.arange(0, width, AREA_STEP), width])
    cc, rr = (v.astype(np.float64) for v in np.meshgrid(cols, rows))
    t = transform
    x, y = to_equal_area.transform(t.c + t.a * cc + t.b * rr, t.f + t.d * cc + t.e * rr)
    x, y = np.asarray(x), np.asarray(y)
    d1x, d1y = x[1:, 1:] - x[:-1, :-1], y[1:, 1:] - y[:-1, :-1]
    d2x, d2y = x[1:, :-1] - x[:-1, 1:], y[1:, :-1] - y[:-1, 1:]
    cell = 0.5 * np.abs(d1x * d2y - d1y * d2x) / np.outer(np.diff(rows), np.diff(cols))
    return np.repeat(np.repeat(cell, np.diff(rows), axis=0), np.diff(cols), axis=1)


@dataclass
class AreaCounter:
    """Pixels and ground area per class of the windows added so far."""

    table: ClassTable
    crs: CRS
    pixels: np.ndarray = field(init=False)
    area_m2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        from pyproj import Transformer

        self.pixels = np.zeros(len(self.table), dtype=np.int64)
        self.area_m2 = np.zeros(len(self.table), dtype=np.float64)
        self._lut = self.table.lookup_table(max(self.table.codes))
        self._to_equal_area = Transformer.from_crs(self.crs, AREA_CRS, always_xy=True)

    def add(self, codes: np.ndarray, valid: np.ndarray, transform: Affine) -> None:
        """Count a window of class `codes` (valid where `valid`) whose grid is `transform`."""
        index = self._lut[np.minimum(codes, len(self._lut) - 1).astype(np.int64)]
        index[codes.astype(np.int64) >= len(self._lut)] = IGNORE_INDEX
        counted = valid & (index != IGNORE_INDEX)
        if not counted.any():
            return
        areas = pixel_areas_m2(transform, *codes.shape, self._to_equal_area)
        n = len(self.table)
        self.pixels += np.bincount(index[counted], minlength=n)[:n]
        self.area_m2 += np.bincount(index[counted], weights=areas[counted], minlength=n)[:n]

    def table_records(self, *, name: str) -> dict:
        """The area table as plain data, with the fields of `eoscale predict`'s (percent: of the valid area)."""
        hectares = self.area_m2 / M2_PER_HECTARE
        total = float(hectares.sum())
        records = [{"code": c.code, "name": c.name, "color": c.color, "pixels": int(self.pixels[i]),
                    "hectares": round(float(hectares[i]), 4),
                    "percent": round(100.0 * float(hectares[i]) / total, 4) if total else 0.0}
                   for i, c in enumerate(self.table.classes)]
        return {"scene": name, "valid_pixels": int(self.pixels.sum()), "valid_hectares": round(total, 4),
                "pixel_area_m2": None, "area_crs": AREA_CRS, "classes": records}


def write_area_table(areas: dict, csv_path: Path, json_path: Path) -> None:
    """CSV (`code,name,pixels,hectares,percent`, as predict writes) and JSON (with totals)."""
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["code", "name", "pixels", "hectares", "percent"])
        for r in areas["classes"]:
            writer.writerow([r["code"], r["name"], r["pixels"], f"{r['hectares']:.4f}", f"{r['percent']:.4f}"])
    json_path.write_text(json.dumps(areas, indent=2) + "\n")
