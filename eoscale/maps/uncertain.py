"""Points chosen by uncertainty, for labelling (active learning): the map's least sure pixels, spread out.

The uncertainty is a raster on the map's grid: one band, higher = less sure (what `eoscale predict --uncertainty`
writes), or one band a class of probabilities, from which the entropy or the margin is computed here. A pixel is a
candidate where the map has a class and the uncertainty a finite value.

Most-uncertain pixels come in blobs (a field boundary, a cloud edge, one confusing patch), and labelling twenty
neighbours teaches a model little more than labelling one. So the points keep a minimum spacing: the map is cut
into `spacing`×`spacing` cells, each cell keeps its most uncertain pixel of each map class (memory grows with the
cells, not the pixels), and the candidates are then taken, most uncertain first, skipping any within `spacing`
pixels of one already taken. `per_class` first gives each map class up to that many of its own most uncertain
points, so the rare classes get some.

Two more choices, both measured by `eoscale bench active`:
- `interior` R keeps only pixels whose (2R+1)×(2R+1) neighbourhood holds one map class: the most uncertain pixels
  sit on class boundaries, where a pixel is a mixture and its label (from a coarser reference, or a person's click)
  is the least reliable; one pixel in from the edge keeps the confusion between classes and drops the mixtures.
- `quotas` divides the points among the map's classes before ranking by uncertainty: `proportional` to each class's
  mapped area (the class mix of a random sample, which is what overall accuracy weighs, each class's points its
  least sure ones), `equal` (the same number a class: the rare classes' accuracy, mIoU); classes with too few
  candidates leave their share to the rest, most uncertain first.

This is not a probability sample: its points cannot estimate accuracy or area without bias (`eoscale assess`
refuses it); a mixed design (`eoscale sample --by mixed`) draws a stratified sample for that beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window

from eoscale.classes import IGNORE_INDEX
from eoscale.errors import InputError, InputNotFoundError
from eoscale.maps.classmap import STRIP_PIXELS, ClassMap, add_areas, check_values, class_index
from eoscale.maps.design import Sample
from eoscale.raster.pixel_area import M2_PER_HECTARE

MEASURES = ("entropy", "margin")
QUOTAS = ("proportional", "equal")


@dataclass(frozen=True)
class Selection:
    """How the points were chosen, as the design file records it."""

    uncertainty: Path
    measure: str | None  # None: the raster is the uncertainty itself; else computed from its class probabilities
    spacing: int
    per_class: int
    interior: int = 0
    quotas: str | None = None  # None: most uncertain first; "proportional" or "equal" per map class

    def describe(self) -> dict:
        from eoscale.maps.classmap import file_identity

        return {"uncertainty": {"path": str(self.uncertainty.resolve()), **file_identity(self.uncertainty)},
                "measure": self.measure or "as given", "spacing_pixels": self.spacing, "per_class": self.per_class,
                "interior_pixels": self.interior, "quotas": self.quotas or "none"}


def entropy(probabilities: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) over axis 0 of class probabilities (any scale: each pixel is normalised to sum 1)."""
    p = _normalised(probabilities)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=0)


def margin(probabilities: np.ndarray) -> np.ndarray:
    """1 − (p_first − p_second): 0 where one class is certain, 1 where the top two tie (higher = less sure)."""
    p = _normalised(probabilities)
    top = np.sort(p, axis=0)
    return 1.0 - (top[-1] - top[-2])


def _normalised(probabilities: np.ndarray) -> np.ndarray:
    p = np.asarray(probabilities, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return p / p.sum(axis=0, keepdims=True)


def open_uncertainty(cmap: ClassMap, path: str | Path, measure: str | None) -> tuple[Path, str | None]:
    """Check the raster lies on the map's grid; returns its path and the measure to compute (None: as given)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"uncertainty raster {str(path)!r} does not exist")
    try:
        src = rasterio.open(path)
    except rasterio.errors.RasterioIOError as err:
        raise InputError(f"uncertainty {str(path)!r} is not a readable raster ({str(err).splitlines()[0]})") from None
    with src:
        if (src.width, src.height) != (cmap.width, cmap.height) or src.crs != cmap.crs or \
                not src.transform.almost_equals(cmap.transform):
            raise InputError(f"uncertainty {str(path)!r} ({src.width}×{src.height}, {src.crs}) is not on the grid of "
                             f"the map {str(cmap.path)!r} ({cmap.width}×{cmap.height}, {cmap.crs}): use the "
                             "uncertainty 'eoscale predict' wrote beside this map")
        if src.count == 1:
            if measure is not None:
                raise InputError(f"--measure {measure}: {str(path)!r} has one band, already an uncertainty; "
                                 "--measure computes one from a raster of class probabilities (one band a class)")
            return path, None
        if src.count != len(cmap.table):
            raise InputError(f"uncertainty {str(path)!r} has {src.count} bands and the map {len(cmap.table)} classes: "
                             "give one band of uncertainty, or one band of probabilities per class")
    return path, measure or "entropy"


def _read_uncertainty(src, window: Window, measure: str | None) -> np.ndarray:
    values = src.read(window=window, masked=True).astype(np.float64).filled(np.nan)
    if measure is None:
        return values[0]
    return (entropy if measure == "entropy" else margin)(values)


def candidates(cmap: ClassMap, uncertainty: Path, measure: str | None, *, spacing: int, seed: int, interior: int = 0):
    """Each cell's most uncertain pixel of each class: (rows, cols, class index, uncertainty), and the map's areas.
    One pass over the map and the raster, strips of whole cell rows (read `interior` rows beyond each edge to see a
    pixel's neighbourhood); ties are broken by a seeded random key."""
    from eoscale.maps.classmap import ClassAreas

    classes = len(cmap.table)
    lut = cmap.lookup()
    rng = np.random.default_rng(seed)
    pixels = np.zeros(classes, dtype=np.int64)
    area_m2 = np.zeros(classes, dtype=np.float64)
    found: list[tuple[np.ndarray, ...]] = []
    strip = max(1, STRIP_PIXELS // max(cmap.width, 1) // spacing) * spacing
    cell_cols = -(-cmap.width // spacing)
    with rasterio.open(cmap.path) as map_src, rasterio.open(uncertainty) as unc_src:
        for row0 in range(0, cmap.height, strip):
            window = Window(0, row0, cmap.width, min(strip, cmap.height - row0))
            values = map_src.read(1, window=window)
            index = class_index(values, lut)
            check_values(cmap, values, index)
            add_areas(cmap, index, row0, pixels, area_m2)
            u = _read_uncertainty(unc_src, window, measure)
            usable = (index != IGNORE_INDEX) & np.isfinite(u)
            if interior:
                usable &= _interior(map_src, lut, window, interior)
            r, c = np.nonzero(usable)
            if not len(r):
                continue
            h = index[r, c].astype(np.int64)
            key = ((r // spacing) * cell_cols + c // spacing) * classes + h
            order = np.lexsort((rng.random(len(r)), -u[r, c], key))
            first = order[np.unique(key[order], return_index=True)[1]]
            found.append((r[first] + row0, c[first], h[first], u[r[first], c[first]]))
    if not found:
        raise InputError(f"uncertainty {str(uncertainty)!r} has no value where the map {str(cmap.path)!r} has a class: "
                         "nothing to choose from")
    rows, cols, strata, values = (np.concatenate(a) for a in zip(*found, strict=True))
    shuffled = rng.permutation(len(rows))  # equal uncertainties are then taken in a random order
    return (rows[shuffled], cols[shuffled], strata[shuffled], values[shuffled],
            ClassAreas(pixels, area_m2 / M2_PER_HECTARE))


def _interior(src, lut: np.ndarray, window: Window, radius: int) -> np.ndarray:
    """Where the window's pixels have one map class all around them, `radius` pixels each way (the map's edge and
    nodata count as another class)."""
    from scipy.ndimage import maximum_filter, minimum_filter

    top = max(0, window.row_off - radius)
    bottom = min(src.height, window.row_off + window.height + radius)
    index = class_index(src.read(1, window=Window(0, top, src.width, bottom - top)), lut).astype(np.int16)
    index[index == IGNORE_INDEX] = -1
    size = 2 * radius + 1
    same = minimum_filter(index, size, mode="constant", cval=-1) == maximum_filter(index, size, mode="constant", cval=-1)
    same &= index >= 0
    start = window.row_off - top
    return same[start:start + window.height]


def quota_sizes(quotas: str, total: int, pixels: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Points a class under `quotas` (largest remainders; a class never gets more than it has candidates)."""
    share = pixels.astype(np.float64) if quotas == "proportional" else (pixels > 0).astype(np.float64)
    share = np.where(available > 0, share, 0.0)
    if share.sum() == 0:
        return np.zeros(len(pixels), dtype=np.int64)
    exact = total * share / share.sum()
    sizes = np.floor(exact).astype(np.int64)
    for h in np.argsort(-(exact - sizes), kind="stable")[: total - sizes.sum()]:
        sizes[h] += 1
    return np.minimum(sizes, available)


def choose(total: int, cmap: ClassMap, selection: Selection, *, seed: int,
           exclude: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Sample, np.ndarray]:
    """The `total` points (see the module docstring), most uncertain first, and each one's uncertainty. Pixels in
    `exclude` (rows, cols: a probability sample drawn beside) are never chosen."""
    if total <= 0:
        raise InputError(f"--n {total}: the sample needs at least one point")
    rows, cols, strata, values, areas = candidates(cmap, selection.uncertainty, selection.measure,
                                                   spacing=selection.spacing, seed=seed, interior=selection.interior)
    if exclude is not None and len(exclude[0]):
        taken = set(zip(exclude[0].tolist(), exclude[1].tolist(), strict=True))
        keep = np.array([(r, c) not in taken for r, c in zip(rows.tolist(), cols.tolist(), strict=True)], dtype=bool)
        rows, cols, strata, values = rows[keep], cols[keep], strata[keep], values[keep]
    order = np.argsort(-values, kind="stable")  # the candidates' order already breaks ties at random
    spaced = _Spacing(selection.spacing)
    chosen: list[int] = []
    if selection.per_class:
        for h in range(len(cmap.table)):
            got = 0
            for i in order[strata[order] == h]:
                if got == selection.per_class or len(chosen) == total:
                    break
                if spaced.take(rows[i], cols[i]):
                    chosen.append(int(i))
                    got += 1
    if selection.quotas:
        left = total - len(chosen)
        sizes = quota_sizes(selection.quotas, left, areas.pixels,
                            np.bincount(strata, minlength=len(cmap.table)))
        got = np.zeros(len(cmap.table), dtype=np.int64)
        taken_set = set(chosen)
        for i in order:
            if got.sum() == left:
                break
            if got[strata[i]] < sizes[strata[i]] and int(i) not in taken_set and spaced.take(rows[i], cols[i]):
                chosen.append(int(i))
                got[strata[i]] += 1
    taken_set = set(chosen)
    for i in order:
        if len(chosen) == total:
            break
        if int(i) not in taken_set and spaced.take(rows[i], cols[i]):
            chosen.append(int(i))
    if len(chosen) < total:
        raise InputError(f"--n {total}: only {len(chosen)} points of the map lie {selection.spacing} pixels apart with "
                         "an uncertainty" + (f" and {selection.interior} pixels inside a class" if selection.interior
                                             else "") + ": ask for fewer points, or a smaller --spacing"
                         + (" or --interior" if selection.interior else ""))
    pick = np.asarray(chosen, dtype=np.int64)
    pick = pick[np.argsort(-values[pick], kind="stable")]
    sizes = np.bincount(strata[pick], minlength=len(cmap.table)).astype(np.int64)
    return Sample(rows[pick], cols[pick], strata[pick], sizes, areas), values[pick]


class _Spacing:
    """Points taken so far, hashed by cells of `spacing` pixels: a new point is taken only if none lies closer."""

    def __init__(self, spacing: int) -> None:
        self.spacing = spacing
        self.cells: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def take(self, row: int, col: int) -> bool:
        s = self.spacing
        cell = (int(row) // s, int(col) // s)
        if s > 1:
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    for r, c in self.cells.get((cell[0] + dr, cell[1] + dc), ()):
                        if (r - row) ** 2 + (c - col) ** 2 < s * s:
                            return False
        self.cells.setdefault(cell, []).append((int(row), int(col)))
        return True
