"""A stratified random sampling design on a map: strata = the map's classes (nodata excluded), a sample size
per stratum (the allocation), and the sample drawn without replacement, each stratum's pixels equally likely.

Allocations (Olofsson et al. 2014, section 5.1.2):
- `proportional`: n_h ∝ the stratum's pixels; rare classes get few units, so their user's accuracy is poorly known.
- `equal`: the same n_h for every stratum.
- `neyman`: n_h ∝ N_h S_h with S_h = sqrt(U_h (1 − U_h)) from anticipated user's accuracies U_h; best for
  overall accuracy, starves the accurate classes.
- `min-per-class K`: proportional, with at least K units per stratum (the paper's advice: 50–100 for the rare
  classes, the rest taken from the large ones).

Memory stays bounded for any map: one pass counts each stratum's pixels (`eoscale.maps.classmap`); the ranks
of the chosen pixels are drawn per stratum (`Generator.choice` without replacement needs memory for the
chosen ranks only); a second pass finds the pixels of those ranks, counting each stratum's pixels in row-major
order strip by strip, so the result does not depend on the strip size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import rasterio

from eoscale.errors import InputError
from eoscale.maps.classmap import ClassAreas, ClassMap, class_index, count_classes

ALLOCATIONS = ("proportional", "equal", "neyman", "min-per-class")


@dataclass(frozen=True)
class Allocation:
    """How the sample is divided among strata; `expected` maps class code → anticipated user's accuracy (neyman)."""

    method: str
    min_per_class: int | None = None
    expected: dict[int, float] | None = None

    def describe(self) -> dict:
        return {"method": self.method, "min_per_class": self.min_per_class,
                "expected_accuracy": {str(k): v for k, v in (self.expected or {}).items()} or None}


@dataclass(frozen=True)
class Sample:
    """The drawn pixels, in a random order (so a labeller does not meet the strata one after another)."""

    rows: np.ndarray  # int64
    cols: np.ndarray  # int64
    strata: np.ndarray  # class index of each pixel
    sizes: np.ndarray  # n_h per class (class-table order)
    areas: ClassAreas


def parse_expected(text: str | None, codes: list[int]) -> dict[int, float] | None:
    """`--expected-accuracy`: one number for every class (`0.8`), per class (`10=0.9,80=0.6`), or both (a bare
    number is the default of the classes not named)."""
    if text is None:
        return None
    default: float | None = None
    values: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, value = part.rpartition("=")
        try:
            number = float(value)
            if key:
                values[int(key)] = number
            else:
                default = number
        except ValueError:
            raise InputError(f"--expected-accuracy {text!r}: expected a number (0.8) or CODE=VALUE pairs "
                             "(10=0.9,80=0.6)") from None
    unknown = sorted(set(values) - set(codes))
    if unknown:
        raise InputError(f"--expected-accuracy names codes {unknown} that are not in the map's class table {codes}")
    out = {c: values.get(c, default) for c in codes}
    missing = [c for c, v in out.items() if v is None]
    if missing:
        raise InputError(f"--expected-accuracy gives no value for classes {missing}: add CODE=VALUE or a default number")
    bad = {c: v for c, v in out.items() if not 0.0 <= v <= 1.0}
    if bad:
        raise InputError(f"--expected-accuracy {bad}: accuracies lie between 0 and 1")
    return out  # type: ignore[return-value]


def allocate(total: int, pixels: np.ndarray, allocation: Allocation, codes: list[int]) -> np.ndarray:
    """Sample sizes n_h (summing to `total`, none above its stratum's pixels) for strata of `pixels` each."""
    pixels = np.asarray(pixels, dtype=np.int64)
    valid = int(pixels.sum())
    if total <= 0:
        raise InputError(f"--n {total}: the sample needs at least one point")
    if total > valid:
        raise InputError(f"--n {total} is larger than the map's {valid} valid pixels: give at most {valid}")
    present = pixels > 0
    low = np.zeros(len(pixels), dtype=np.int64)
    if allocation.method == "proportional":
        weights = pixels.astype(np.float64)
    elif allocation.method == "equal":
        weights = present.astype(np.float64)
    elif allocation.method == "neyman":
        if allocation.expected is None:
            raise InputError("--allocation neyman needs anticipated user's accuracies: pass --expected-accuracy "
                             "(e.g. 0.8, or 10=0.9,80=0.6)")
        u = np.array([allocation.expected[c] for c in codes], dtype=np.float64)
        weights = pixels * np.sqrt(u * (1 - u))
    elif allocation.method == "min-per-class":
        k = allocation.min_per_class
        if k is None or k < 1:
            raise InputError(f"--allocation min-per-class needs K ≥ 1, got {k}")
        weights = pixels.astype(np.float64)
        low = np.minimum(k, pixels)
        if low.sum() > total:
            raise InputError(f"--n {total} cannot give {k} points to each of the map's {int(present.sum())} classes: "
                             f"pass --n {int(low.sum())} or more, or a smaller K")
    else:
        raise InputError(f"--allocation {allocation.method!r}: choose one of {', '.join(ALLOCATIONS)}")
    return apportion(total, weights, low=low, high=pixels)


def apportion(total: int, weights: np.ndarray, *, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Integers n_h with Σ n_h = `total` and low_h ≤ n_h ≤ high_h, as near proportional to `weights` as the bounds
    allow: n_h = clip(λ w_h, low_h, high_h) with λ found by bisection, then rounded by largest remainders."""
    high = np.asarray(high, dtype=np.int64)
    low = np.asarray(low, dtype=np.int64)
    w = np.where(high > 0, np.asarray(weights, dtype=np.float64), 0.0)
    if w.max(initial=0.0) <= 0:
        w = (high > 0).astype(np.float64)
    w = np.where(high > 0, np.maximum(w, 1e-12 * w.max()), 0.0)  # a zero weight still takes what others cannot

    def filled(scale: float) -> np.ndarray:
        return np.clip(scale * w, low, high)

    lo, hi = 0.0, float(np.max(np.where(w > 0, high / np.where(w > 0, w, 1.0), 0.0))) + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if filled(mid).sum() < total:
            lo = mid
        else:
            hi = mid
    exact = filled(hi)
    sizes = np.clip(np.floor(exact + 1e-9).astype(np.int64), low, high)
    remainder = total - int(sizes.sum())
    order = np.argsort(-(exact - sizes), kind="stable")
    while remainder != 0:
        step = 1 if remainder > 0 else -1
        for h in (order if step > 0 else order[::-1]):
            if remainder == 0:
                break
            if (step > 0 and sizes[h] < high[h]) or (step < 0 and sizes[h] > low[h]):
                sizes[h] += step
                remainder -= step
    return sizes


def draw(cmap: ClassMap, total: int, allocation: Allocation, *, seed: int) -> Sample:
    """Count the strata, allocate `total` units, and draw them (two passes over the map)."""
    areas = count_classes(cmap)
    sizes = allocate(total, areas.pixels, allocation, cmap.table.codes)
    rng = np.random.default_rng(seed)
    # the ranks (row-major order within the stratum) of the chosen pixels, stratum by stratum
    ranks = [np.sort(rng.choice(int(areas.pixels[h]), size=int(sizes[h]), replace=False)) if sizes[h] else
             np.empty(0, dtype=np.int64) for h in range(len(sizes))]
    seen = np.zeros(len(sizes), dtype=np.int64)
    found_rows: list[np.ndarray] = []
    found_cols: list[np.ndarray] = []
    found_strata: list[np.ndarray] = []
    lut = cmap.lookup()
    with rasterio.open(cmap.path) as src:
        for window in cmap.strips():
            index = class_index(src.read(1, window=window), lut).ravel()
            for h in np.flatnonzero(sizes):
                wanted = ranks[h]
                if wanted[-1] < seen[h]:  # every chosen pixel of this stratum is found already
                    continue
                positions = np.flatnonzero(index == h)
                start, stop = seen[h], seen[h] + len(positions)
                seen[h] = stop
                a, b = np.searchsorted(wanted, [start, stop])
                if a == b:
                    continue
                flat = positions[wanted[a:b] - start]
                found_rows.append(flat // cmap.width + int(window.row_off))
                found_cols.append(flat % cmap.width)
                found_strata.append(np.full(len(flat), h, dtype=np.int64))
    rows, cols, strata = (np.concatenate(a) if a else np.empty(0, dtype=np.int64)
                          for a in (found_rows, found_cols, found_strata))
    if len(rows) != total:  # the map changed between the passes, or a bug
        raise RuntimeError(f"drew {len(rows)} of {total} pixels: did {str(cmap.path)!r} change while it was read?")
    # a canonical order first (stratum, then row-major), so the shuffle does not depend on the strip size
    canonical = np.lexsort((cols, rows, strata))
    order = canonical[rng.permutation(total)]
    return Sample(rows[order], cols[order], strata[order], sizes, areas)
