"""Opening a reference raster: the one place that checks a raster given as the truth before anything reads it.

`assess` (a class map against a census of class codes, a value map against measured values) and `label` (a sample's
points from a reference map) each take a raster a user made; each refused the same faults in its own words. Here they
are refused once: unreadable, no CRS, more than one band, classes where values are meant (or the reverse), and no
overlap with the map being assessed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Protocol

import rasterio
from rasterio.crs import CRS

from eoscale.contract import TARGET_TAG
from eoscale.errors import InputError


class _Map(Protocol):
    path: Path
    crs: CRS
    bounds: tuple[float, float, float, float]


@contextmanager
def open_reference_raster(path: Path, *, holds: Literal["classes", "values"], other_inputs: str = "",
                          over: _Map | None = None) -> Iterator[rasterio.io.DatasetReader]:
    """The raster at `path`, open and checked to hold one band of `holds` in a known CRS (and, with `over`, to overlap
    that map); `other_inputs` names what else the command takes (for the message when it is no raster at all)."""
    try:
        src = rasterio.open(path)
    except rasterio.errors.RasterioIOError as err:
        what = f"neither {other_inputs} nor a readable raster" if other_inputs else "not a readable raster"
        raise InputError(f"reference {str(path)!r} is {what} ({str(err).splitlines()[0]})") from None
    with src:
        if src.crs is None:
            raise InputError(f"reference raster {str(path)!r} has no CRS: it cannot be placed on the map")
        noun = "class codes" if holds == "classes" else "values"
        if src.count != 1:
            raise InputError(f"reference raster {str(path)!r} has {src.count} bands: a reference has one band of {noun}")
        tags = src.tags()
        if holds == "values" and (has_colours(src) or "EOSCALE_CLASSES" in tags
                                  or (tags.get(TARGET_TAG) or "values") != "values"):
            raise InputError(f"reference raster {str(path)!r} holds classes (a colour table or class tags), not values: "
                             "assess a value map against measured values, or a class map against this raster")
        if over is not None:
            _check_overlap(src, path, over)
        yield src


def _check_overlap(src: rasterio.io.DatasetReader, path: Path, over: _Map) -> None:
    from rasterio.warp import transform_bounds

    try:
        left, bottom, right, top = transform_bounds(src.crs, over.crs, *src.bounds, densify_pts=21)
    except Exception:  # a CRS pair pyproj cannot relate: no overlap to speak of
        left = bottom = right = top = float("nan")
    m_left, m_bottom, m_right, m_top = over.bounds
    if not (left < m_right and right > m_left and bottom < m_top and top > m_bottom):
        raise InputError(f"reference raster {str(path)!r} ({crs_name(src.crs.to_wkt())}) does not overlap the map "
                         f"{str(over.path)!r} ({crs_name(over.crs.to_wkt())}): check that it covers the same ground")


def has_colours(src: rasterio.io.DatasetReader) -> bool:
    """Whether band 1 carries a colour table (a class map's mark)."""
    try:
        src.colormap(1)
        return True
    except ValueError:
        return False


def crs_name(crs: str) -> str:
    """A CRS as a user reads it (EPSG:32632), or the start of its WKT when it has no short name."""
    from pyproj import CRS as ProjCRS

    try:
        return ProjCRS.from_user_input(crs).to_string()
    except Exception:
        return crs[:60]
