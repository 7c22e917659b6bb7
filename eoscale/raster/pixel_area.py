"""The ground area of a raster's pixels: one constant in a projected CRS, per row on the ellipsoid in a geographic one.

Shared by the areas predict counts as it writes a map and by the sampling design and assessment of a finished
map (eoscale.maps), which must weigh strata by the same areas.
"""

from __future__ import annotations

import numpy as np
from affine import Affine
from rasterio.crs import CRS

M2_PER_HECTARE = 10_000.0


def pixel_area_m2(crs: CRS, transform: Affine) -> float | None:
    """The area of one pixel in m² in a projected CRS; None in a geographic one (it varies by row)."""
    if crs.is_geographic:
        return None
    try:
        _, metres = crs.linear_units_factor
    except Exception:  # a CRS without a linear unit: take its unit as metres
        metres = 1.0
    return abs(transform.a * transform.e - transform.b * transform.d) * metres**2


def row_areas_m2(crs: CRS, transform: Affine, rows: np.ndarray) -> np.ndarray:
    """The area in m² of one pixel in each of `rows` of a map in a geographic CRS (on its ellipsoid)."""
    from pyproj import CRS as ProjCRS

    geod = ProjCRS.from_wkt(crs.to_wkt()).get_geod()
    x0, x1 = transform.c, transform.c + transform.a
    areas = np.empty(len(rows), dtype=np.float64)
    for i, r in enumerate(rows):
        y0, y1 = transform.f + r * transform.e, transform.f + (r + 1) * transform.e
        area, _ = geod.polygon_area_perimeter([x0, x1, x1, x0], [y0, y0, y1, y1])
        areas[i] = abs(area)
    return areas
