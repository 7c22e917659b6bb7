"""Post-classification smoothing a user chooses: `predict --smooth bayes[:WINDOW[:SMOOTHNESS]]` and `--mmu PIXELS`.

- Bayesian smoothing of the class probabilities, as sits' `sits_smooth` (Camara et al., "Bayesian inference for
  post-processing of remote-sensing image classification", Remote Sensing 2024): each class's probability becomes a
  logit x; over a WINDOW × WINDOW neighbourhood (valid pixels only) its mean m and variance s² are the prior, and
  the posterior mean (SMOOTHNESS · m + s² · x) / (SMOOTHNESS + s²) replaces x. A large SMOOTHNESS (the logits'
  expected variance) leans on the neighbourhood; a neighbourhood that varies (a border) leaves the pixel its own
  value, so edges stay. The posteriors go back to probabilities, renormalised, and the map, confidence, uncertainty
  and probabilities are made from them. Defaults: window 7, smoothness 10 (sits' defaults; sits also keeps only the
  more probable half of the neighbours, `neigh_fraction = 0.5`, which eoscale does not).
- A minimum mapping unit: connected regions of one class (8-connected) smaller than PIXELS become the class of their
  largest neighbour (`rasterio.features.sieve`, GDAL's sieve filter); nodata is neither sieved nor a neighbour.

Out of core, after the parts are finished (a neighbourhood crosses the parts' column tiles and rows): the parts'
rows are assembled into raw files on disk in scene order (`numpy.memmap`, one byte a class a pixel for the
probabilities, which the parts keep for this as `--probabilities` does, at its 0.005 step), and swept in strips of
`STRIP` rows with a halo: WINDOW // 2 rows for the smoothing, PIXELS rows for the sieve (a region smaller than the
unit that reaches a strip lies wholly within its halo, so the sieve is exact). The result is one piece covering the
scene (`eoscale.infer.outputs.rasters.Piece`), which the COG writers copy like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eoscale.errors import InputError
from eoscale.infer.outputs.rasters import Piece, _rows
from eoscale.infer.outputs.uncertainty import (
    PROBABILITIES_SUFFIX,
    PROBABILITY_NODATA,
    PROBABILITY_STEPS,
    UNCERTAINTY_NODATA,
    UNCERTAINTY_SUFFIX,
    probability_rows,
    uncertainty_rows,
)

STRIP = 128  # rows a sweep computes at a time (plus its halo)
MAX_WINDOW, MAX_MMU = 51, 10_000
_EDGE = 0.5 / PROBABILITY_STEPS  # a stored 0 or 1 is within half a step of it: the logit stays finite


@dataclass(frozen=True)
class BayesSmoothing:
    window: int = 7
    smoothness: float = 10.0

    @classmethod
    def parse(cls, text: str | None) -> BayesSmoothing | None:
        """`bayes`, `bayes:WINDOW` or `bayes:WINDOW:SMOOTHNESS` (None or "none": no smoothing)."""
        if text in (None, "", "none"):
            return None
        name, *values = str(text).split(":")
        try:
            if name != "bayes" or len(values) > 2:
                raise ValueError
            found = cls(int(values[0]) if values else 7, float(values[1]) if len(values) > 1 else 10.0)
        except ValueError:
            raise InputError(f"--smooth {text!r}: give bayes, bayes:WINDOW or bayes:WINDOW:SMOOTHNESS "
                             "(e.g. bayes:7:10)") from None
        if found.window < 3 or found.window % 2 == 0 or found.window > MAX_WINDOW or not found.smoothness > 0:
            raise InputError(f"--smooth {text!r}: WINDOW must be odd, 3..{MAX_WINDOW}, and SMOOTHNESS above 0")
        return found

    def __call__(self, probs: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Smoothed probabilities `(classes, y, x)` of `probs` (float32, same shape), over `valid` pixels."""
        from scipy.ndimage import uniform_filter

        p = np.clip(probs, _EDGE, 1 - _EDGE)
        logit = np.log(p / (1 - p)).astype(np.float32)
        weight = valid.astype(np.float32)
        size = (1, self.window, self.window)
        share = np.maximum(uniform_filter(weight, self.window, mode="constant"), 1e-6)[None]
        mean = uniform_filter(logit * weight, size, mode="constant") / share
        square = uniform_filter(logit * logit * weight, size, mode="constant") / share
        variance = np.maximum(square - mean * mean, 0)
        posterior = (self.smoothness * mean + variance * logit) / (self.smoothness + variance)
        smoothed = 1 / (1 + np.exp(-posterior))
        return (smoothed / smoothed.sum(axis=0, keepdims=True)).astype(np.float32)


def check_mmu(pixels: int) -> int:
    if not 0 <= pixels <= MAX_MMU:
        raise InputError(f"--mmu {pixels}: give a region size in pixels, 0 (none) to {MAX_MMU}")
    return pixels


def assemble(pieces: list[Piece], suffix: str, path: Path, *, height: int, width: int, dtype: str,
             bands: int = 0) -> np.memmap:
    """The pieces' rows of `suffix` in scene order, in a raw file at `path`: `(height, width)`, or
    `(height, bands, width)` for a multi-band layer (as the parts hold rows)."""
    shape = (height, bands, width) if bands else (height, width)
    whole = np.memmap(path, dtype=dtype, mode="w+", shape=shape)
    for piece in pieces:
        row = piece.row
        for strip in _rows(piece.path.with_suffix(suffix), piece.columns * max(bands, 1), dtype, STRIP):
            strip = strip.reshape(-1, bands, piece.columns) if bands else strip
            whole[row:row + strip.shape[0], ..., piece.col:piece.col + piece.columns] = strip
            row += strip.shape[0]
    return whole


def _strips(height: int, halo: int):
    """(start, stop, read_start, read_stop) of each strip of `STRIP` rows and its halo."""
    for start in range(0, height, STRIP):
        stop = min(height, start + STRIP)
        yield start, stop, max(0, start - halo), min(height, stop + halo)


def refine(pieces: list[Piece], folder: Path, *, height: int, width: int, values: np.ndarray, nodata: int,
           dtype: str, smooth: BayesSmoothing | None, mmu: int, uncertainty: str, counter) -> Piece:
    """The scene's class map (and, with `smooth`, its confidence, uncertainty and probabilities) smoothed and sieved,
    as one piece at `folder/refined` (+ the parts' suffixes); class areas counted into `counter`."""
    from rasterio.features import sieve

    out = folder / "refined"
    classes = len(values)
    lookup = np.zeros(int(values.max()) + 2, dtype=np.int64)
    lookup[values.astype(np.int64)] = np.arange(classes)
    if smooth is not None:
        probs = assemble(pieces, PROBABILITIES_SUFFIX, folder / "whole.probabilities", height=height, width=width,
                         dtype="uint8", bands=classes)
        mapped = np.memmap(folder / "whole.classes", dtype=dtype, mode="w+", shape=(height, width))
        halo = smooth.window // 2
        files = {s: open(out.with_suffix(s), "wb") for s in (".confidence", UNCERTAINTY_SUFFIX, PROBABILITIES_SUFFIX)}
        try:
            for start, stop, top, bottom in _strips(height, halo):
                stored = np.asarray(probs[top:bottom]).transpose(1, 0, 2)  # (classes, rows, width)
                valid = stored[0] != PROBABILITY_NODATA
                smoothed = smooth(stored.astype(np.float32) / PROBABILITY_STEPS, valid)[:, start - top:stop - top]
                valid = valid[start - top:stop - top]
                index = np.argmax(smoothed, axis=0)
                confidence = np.take_along_axis(smoothed, index[None], axis=0)[0]
                rows = values[index].astype(dtype)
                rows[~valid] = nodata
                mapped[start:stop] = rows
                percent = np.clip(np.round(confidence * 100), 0, 100).astype(np.uint8)
                percent[~valid] = UNCERTAINTY_NODATA
                files[".confidence"].write(percent.tobytes())
                kind = uncertainty if uncertainty != "none" else "entropy"
                files[UNCERTAINTY_SUFFIX].write(uncertainty_rows(smoothed, valid, kind).tobytes())
                files[PROBABILITIES_SUFFIX].write(np.ascontiguousarray(probability_rows(smoothed, valid)).tobytes())
        finally:
            for f in files.values():
                f.close()
        del probs
    else:
        mapped = assemble(pieces, ".classes", folder / "whole.classes", height=height, width=width, dtype=dtype)
    with open(out.with_suffix(".classes"), "wb") as f:
        for start, stop, top, bottom in _strips(height, mmu if mmu > 1 else 0):
            window = np.asarray(mapped[top:bottom])
            valid = window != nodata
            if mmu > 1:
                window = sieve(window, size=mmu, mask=valid, connectivity=8).astype(dtype)
                window[~valid] = nodata
            rows, valid = window[start - top:stop - top], valid[start - top:stop - top]
            f.write(np.ascontiguousarray(rows).tobytes())
            counter.add(start, lookup[np.minimum(rows.astype(np.int64), len(lookup) - 1)], valid)
    del mapped
    for name in ("whole.classes", "whole.probabilities"):
        (folder / name).unlink(missing_ok=True)
    return Piece(out, 0, 0, height, width)
