"""Static layers from a DEM onto a grid: elevation, slope and aspect (as its sine and cosine), resampled once.

A DEM (a Copernicus DEM GLO-30/GLO-90 COG, `eoscale.sensors.copdem`, or any single-band float heights in metres) is
read over the grid's footprint with a margin. Slope and aspect are computed on the DEM's own grid, in metres: a
geographic DEM's pixel is `Δφ·M(φ)` tall and `Δλ·N(φ)·cos φ` wide on the WGS84 ellipsoid (M and N its radii of
curvature), row by row, so a 1.5″ × 1″ GLO-30 pixel at 51° N is 29 m × 31 m, not square degrees. The layers are
then resampled onto the grid bilinearly: elevation, slope, and aspect as its sine and cosine (`ASPECT_SIN`,
`ASPECT_COS`: an angle, whose 359° and 1° are neighbours; flat ground, which faces nowhere, is (0, 0)). Stores and
checkpoints from before hold `ASPECT` in degrees, which is still computed on request: the angle of the resampled sine
and cosine (359° and 1° average to 0°, not 180°; flat ground at 180°, as then). Where the DEM has no data (its nodata,
-32767 for Copernicus DEM) the layers are NaN.

Heights are only comparable on one vertical datum. Copernicus DEM heights are above the EGM2008 geoid and its files
say nothing of it; a DEM whose file notes another datum (a compound CRS's vertical part, or a `VERTICAL_DATUM` tag:
EVRF2007, NAVD88, the ellipsoid) is refused in one line unless the user names that datum (`accept_datum`, the
command's `--dem-datum`), which says the heights are wanted as they are and is recorded with the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from affine import Affine
from pyproj import CRS as ProjCRS
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.transform import array_bounds
from rasterio.warp import reproject, transform_bounds
from rasterio.windows import Window, from_bounds

from eoscale.errors import InputError
from eoscale.raster.scene import check_crs, open_raster
from eoscale.sensors.copdem import ASPECT, ASPECT_COS, ASPECT_SIN, ELEVATION, SLOPE, VERTICAL_DATUM

WGS84_A, WGS84_F = 6_378_137.0, 1 / 298.257223563
MARGIN_PX = 2  # DEM pixels read around the footprint: slope needs its neighbours, bilinear its own
DATUM_TAGS = ("VERTICAL_DATUM", "VERTICAL_CS", "VERT_DATUM", "VERTICALDATUM")


@dataclass(frozen=True)
class StaticLayers:
    """Static layers on a grid (float32, NaN without data) and where they came from."""

    layers: dict[str, np.ndarray]
    datum: str
    source: str

    def to_attrs(self) -> dict:
        return {"source": self.source, "vertical_datum": self.datum, "layers": list(self.layers)}


def _key(name: str) -> str:
    return "".join(ch for ch in name.upper() if ch.isalnum())


def noted_datum(path: str) -> str | None:
    """The vertical datum `path` notes: its CRS's vertical part, else a datum tag; None where it notes none."""
    with open_raster(path) as src:
        crs, tags = src.crs, src.tags()
    if crs is not None:
        proj = ProjCRS.from_wkt(crs.to_wkt())
        for sub in proj.sub_crs_list or []:
            if sub.is_vertical:
                return sub.datum.name if sub.datum else sub.name
        if proj.is_vertical:
            return proj.datum.name
    upper = {k.upper(): v for k, v in tags.items()}
    return next((upper[t] for t in DATUM_TAGS if upper.get(t)), None)


def check_datum(path: str, *, accept_datum: str | None = None) -> str:
    """The datum the DEM's heights are on (module docstring); another datum than EGM2008 noted and not accepted by
    the user is a one-line error."""
    noted = noted_datum(path)
    if noted is None:
        return f"{VERTICAL_DATUM} (Copernicus DEM's; the file notes none)"
    if "EGM2008" in _key(noted) or "EGM08" in _key(noted):
        return noted
    if accept_datum is not None and _key(accept_datum) == _key(noted):
        return f"{noted} (taken as it is: --dem-datum)"
    raise InputError(f"DEM {path!r} notes vertical datum {noted!r}, not {VERTICAL_DATUM} (the Copernicus DEM's): convert "
                     f"it to {VERTICAL_DATUM} heights (e.g. gdalwarp -t_srs EPSG:4326+3855), or take its heights as "
                     f"they are with --dem-datum '{noted}'")


def pixel_metres(transform: Affine, crs: CRS, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(width, height) in metres of the pixels of each row of a north-up grid: constant for a projected grid, from
    the WGS84 ellipsoid's radii of curvature at each row's latitude for a geographic one."""
    if not crs.is_geographic:
        return np.full(rows, abs(transform.a)), np.full(rows, abs(transform.e))
    lat = np.radians(transform.f + transform.e * (np.arange(rows) + 0.5))
    e2 = WGS84_F * (2 - WGS84_F)
    w = np.sqrt(1 - e2 * np.sin(lat) ** 2)
    meridional, normal = WGS84_A * (1 - e2) / w**3, WGS84_A / w
    return np.radians(abs(transform.a)) * normal * np.cos(lat), np.radians(abs(transform.e)) * meridional


def slope_aspect(heights: np.ndarray, transform: Affine, crs: CRS) -> tuple[np.ndarray, np.ndarray]:
    """Slope (degrees from horizontal) and aspect (degrees clockwise from north, the way the slope faces) of a north-up
    DEM (NaN where it has none), by central differences in metres (`pixel_metres`)."""
    if transform.b or transform.d:
        raise InputError("the DEM's grid is rotated: warp it north-up first (gdalwarp)")
    dx, dy = pixel_metres(transform, crs, heights.shape[0])
    down, east = np.gradient(heights.astype(np.float64))  # per row index (southward) and per column (eastward)
    east_slope = east / dx[:, None]
    north_slope = -down / dy[:, None]
    slope = np.degrees(np.arctan(np.hypot(east_slope, north_slope)))
    aspect = np.degrees(np.arctan2(-east_slope, -north_slope)) % 360.0  # facing downhill
    return slope.astype(np.float32), aspect.astype(np.float32)


def aspect_components(slope: np.ndarray, aspect: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sine, cosine) of `aspect` (degrees), both 0 where `slope` is 0 (flat ground faces nowhere), NaN where NaN."""
    radians = np.radians(aspect.astype(np.float64))
    flat = slope == 0
    return (np.where(flat, 0.0, np.sin(radians)).astype(np.float32),
            np.where(flat, 0.0, np.cos(radians)).astype(np.float32))


def static_layers(path: str, *, crs: CRS, transform: Affine, width: int, height: int,
                  layers: tuple[str, ...] = (ELEVATION, SLOPE, ASPECT_SIN, ASPECT_COS),
                  accept_datum: str | None = None) -> StaticLayers:
    """`layers` of the DEM at `path` on the grid (`crs`, `transform`, `width` × `height`), NaN where it has no data:
    `ELEVATION`, `SLOPE`, `ASPECT_SIN`, `ASPECT_COS`, and `ASPECT` in degrees (older stores' and checkpoints')."""
    datum = check_datum(path, accept_datum=accept_datum)
    with open_raster(path) as src:
        check_crs(path, src.crs)
        bounds = transform_bounds(crs, src.crs, *array_bounds(height, width, transform), densify_pts=21)
        found = from_bounds(*bounds, transform=src.transform)
        col, row = math.floor(found.col_off) - MARGIN_PX, math.floor(found.row_off) - MARGIN_PX
        window = Window(col, row, math.ceil(found.col_off + found.width) + MARGIN_PX - col,
                        math.ceil(found.row_off + found.height) + MARGIN_PX - row)
        heights = src.read(1, window=window, boundless=True, masked=True).astype(np.float32).filled(np.nan)
        native, dem_crs = src.window_transform(window), src.crs
    if not np.isfinite(heights).any():
        raise InputError(f"DEM {path!r} holds no heights under the grid: give the DEM tile(s) that cover it")
    native_layers = {ELEVATION: heights}
    if {SLOPE, ASPECT_SIN, ASPECT_COS, ASPECT} & set(layers):
        slope, aspect = slope_aspect(heights, native, dem_crs)
        native_layers[SLOPE] = slope
        native_layers[ASPECT_SIN], native_layers[ASPECT_COS] = aspect_components(slope, aspect)
        # the older band as it was computed: the angle of the unit vectors, flat ground included
        radians = np.radians(aspect)
        native_layers["degrees_sin"], native_layers["degrees_cos"] = np.sin(radians), np.cos(radians)
    out: dict[str, np.ndarray] = {}
    for name in layers:
        if name == ASPECT:
            sin, cos = (_onto(native_layers[f"degrees_{k}"], native, dem_crs, crs, transform, width, height)
                        for k in ("sin", "cos"))
            out[name] = (np.degrees(np.arctan2(sin, cos)) % 360.0).astype(np.float32)
        else:
            out[name] = _onto(native_layers[name], native, dem_crs, crs, transform, width, height)
    return StaticLayers(out, datum, path)


def _onto(values: np.ndarray, src_transform: Affine, src_crs: CRS, crs: CRS, transform: Affine, width: int,
          height: int) -> np.ndarray:
    out = np.full((height, width), np.nan, np.float32)
    reproject(values.astype(np.float32), out, src_transform=src_transform, src_crs=src_crs, dst_transform=transform,
              dst_crs=crs, resampling=Resampling.bilinear, src_nodata=np.nan, dst_nodata=np.nan)
    return out


def to_store_values(values: np.ndarray, scale: float, offset: float) -> np.ndarray:
    """Physical values (NaN: none) as uint16 on a store scale (physical = store × scale + offset), 0 for none."""
    stored = np.rint((np.nan_to_num(values, nan=offset) - offset) / scale).clip(1, 65535).astype(np.uint16)
    return np.where(np.isfinite(values), stored, np.uint16(0))


__all__ = ["StaticLayers", "aspect_components", "check_datum", "noted_datum", "pixel_metres", "slope_aspect",
           "static_layers", "to_store_values"]
