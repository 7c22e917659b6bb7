"""How sure a class model is, per pixel and overall: entropy, margin and the expected calibration error.

Pure numpy, classes on the first axis as a map's probabilities are (`(classes, y, x)`, or `(classes, n)`), so the
same functions serve `predict --uncertainty` (beside the forward passes, where a torch kernel would start a second
team of OpenMP threads), the temperature fitted at the end of `fit` and `eoscale calibrate`
(`eoscale.models.calibration`), `eoscale bench calibration` and sampling by uncertainty (`eoscale.maps`).
In the models layer, below train, infer and maps, because all of them use it.

- `entropy(probs)`: Shannon entropy normalised by log C, 0 (one class certain) .. 1 (all classes equally likely).
- `margin(probs)`: top-1 minus top-2 probability, 0 (a tie) .. 1 (certain); low is unsure.
- `expected_calibration_error(probs, labels)`: the gap between confidence and accuracy, averaged over equal-width
  confidence bins weighted by their pixels (Guo et al. 2017, "On Calibration of Modern Neural Networks"; the
  L1 "ECE" of torchmetrics' `MulticlassCalibrationError`, which the tests hold it to). `CalibrationBins`
  accumulates the same bins block by block, so a validation split or a scene never has to fit in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ECE_BINS = 15  # Guo et al. 2017's choice, and torchmetrics' default
_TINY = np.float32(1e-12)


def entropy(probs: np.ndarray) -> np.ndarray:
    """Each pixel's Shannon entropy over the class axis (axis 0), divided by log C: 0..1, float32.

    One class has no uncertainty (0 everywhere). `0 log 0` counts as 0.
    """
    probs = np.asarray(probs, dtype=np.float32)
    classes = probs.shape[0]
    if classes < 2:
        return np.zeros(probs.shape[1:], dtype=np.float32)
    p = np.clip(probs, _TINY, None)
    h = -np.einsum("c...,c...->...", probs, np.log(p), dtype=np.float32)
    return np.clip(h / np.float32(np.log(classes)), 0.0, 1.0).astype(np.float32, copy=False)


def margin(probs: np.ndarray) -> np.ndarray:
    """Each pixel's most probable class's probability minus the second's (axis 0 the classes): 0..1, float32.

    One class is certain (1 everywhere).
    """
    probs = np.asarray(probs, dtype=np.float32)
    if probs.shape[0] < 2:
        return np.ones(probs.shape[1:], dtype=np.float32)
    top2 = np.partition(probs, probs.shape[0] - 2, axis=0)[-2:]
    return np.clip(top2[1] - top2[0], 0.0, 1.0).astype(np.float32, copy=False)


@dataclass
class CalibrationBins:
    """Equal-width confidence bins over (0, 1], filled block by block: pixels, summed confidence and correct
    pixels per bin; `ece()` reads them. Merge two with `+=` (ranks, scenes)."""

    bins: int = ECE_BINS
    count: np.ndarray = field(default=None)  # type: ignore[assignment]
    confidence: np.ndarray = field(default=None)  # type: ignore[assignment]
    correct: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.bins < 1:
            raise ValueError(f"bins={self.bins}: use at least one bin")
        for name in ("count", "confidence", "correct"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(self.bins, dtype=np.float64))

    def add(self, confidence: np.ndarray, correct: np.ndarray) -> None:
        """Add pixels: the probability of the class each was given (`confidence`) and whether that class is right."""
        confidence = np.asarray(confidence, dtype=np.float64).ravel()
        correct = np.asarray(correct, dtype=bool).ravel()
        if confidence.shape != correct.shape:
            raise ValueError(f"{confidence.size} confidences for {correct.size} correctness flags")
        # bin b holds (b/B, (b+1)/B], as torchmetrics' bucketize(right=True) - 1 does
        index = np.clip(np.ceil(confidence * self.bins).astype(np.int64) - 1, 0, self.bins - 1)
        self.count += np.bincount(index, minlength=self.bins)
        self.confidence += np.bincount(index, weights=confidence, minlength=self.bins)
        self.correct += np.bincount(index, weights=correct.astype(np.float64), minlength=self.bins)

    def add_probs(self, probs: np.ndarray, labels: np.ndarray, *, ignore_index: int | None = None) -> None:
        """Add pixels from class probabilities (classes on axis 0) and their true class indices."""
        probs = np.asarray(probs)
        labels = np.asarray(labels)
        if probs.shape[1:] != labels.shape:
            raise ValueError(f"probabilities of shape {probs.shape} do not match labels of shape {labels.shape}")
        flat = probs.reshape(probs.shape[0], -1)
        labels = labels.ravel()
        if ignore_index is not None:
            keep = labels != ignore_index
            flat, labels = flat[:, keep], labels[keep]
        index = np.argmax(flat, axis=0)
        self.add(np.take_along_axis(flat, index[None], axis=0)[0], index == labels)

    def __iadd__(self, other: CalibrationBins) -> CalibrationBins:
        if other.bins != self.bins:
            raise ValueError(f"cannot merge {other.bins} bins into {self.bins}")
        self.count += other.count
        self.confidence += other.confidence
        self.correct += other.correct
        return self

    @property
    def pixels(self) -> int:
        return int(self.count.sum())

    def ece(self) -> float:
        """Σ_b |accuracy_b − confidence_b| · n_b / n over the bins; NaN without pixels."""
        total = self.count.sum()
        if total == 0:
            return float("nan")
        return float(np.abs(self.correct - self.confidence).sum() / total)

    def accuracy(self) -> float:
        total = self.count.sum()
        return float(self.correct.sum() / total) if total else float("nan")

    def reliability(self) -> list[dict]:
        """Per non-empty bin: its upper edge, pixels, mean confidence and accuracy (a reliability diagram's rows)."""
        rows = []
        for b in np.flatnonzero(self.count):
            n = self.count[b]
            rows.append({"upper": (b + 1) / self.bins, "pixels": int(n), "confidence": float(self.confidence[b] / n),
                         "accuracy": float(self.correct[b] / n)})
        return rows


def expected_calibration_error(probs_or_confidence: np.ndarray, labels: np.ndarray, *, bins: int = ECE_BINS,
                               ignore_index: int | None = None) -> float:
    """The expected calibration error, from either

    - class probabilities (classes on axis 0, e.g. `(C, n)` or `(C, y, x)`) and true class indices of the other
      axes' shape (pixels labelled `ignore_index` left out), or
    - confidences and correctness flags of one shape (what was predicted, and whether it was right).
    """
    values, labels = np.asarray(probs_or_confidence), np.asarray(labels)
    found = CalibrationBins(bins)
    if values.shape == labels.shape:
        found.add(values, labels.astype(bool))
    else:
        found.add_probs(values, labels, ignore_index=ignore_index)
    return found.ece()
