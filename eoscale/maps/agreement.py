"""Agreement of a continuous map with its reference: RMSE, MAE, bias and R², with 95 % confidence intervals.

Error is map − reference, so a positive bias means the map overestimates. R² is 1 − SSE / SST about the
reference's mean (the share of the reference's variance the map explains; negative when the map is worse
than the reference's mean everywhere).

For a sample of points (independent draws, as a simple random or systematic sample is taken to be), the 95 %
intervals come from the percentile bootstrap (`scipy.stats.bootstrap`, 2,000 resamples, seeded) of the paired
values: no assumption on the errors' distribution, which is rarely normal for heights (many near-zero pixels
and a long tail in forests). For a reference raster (a census of the pixels it covers), the statistics are the
population's, computed from running sums, and no interval is given: what remains uncertain is the reference
itself, not sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

STATISTICS = ("rmse", "mae", "bias", "r2")
RESAMPLES = 2000


@dataclass(frozen=True)
class Statistic:
    estimate: float | None
    lower: float | None = None  # 95 % interval, None for a census or where undefined
    upper: float | None = None

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "ci95_lower": self.lower, "ci95_upper": self.upper}


def _finite(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _statistics(predicted: np.ndarray, reference: np.ndarray, axis: int = -1) -> tuple[np.ndarray, ...]:
    err = predicted - reference
    sst = np.sum(np.square(reference - reference.mean(axis=axis, keepdims=True)), axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1.0 - np.sum(np.square(err), axis=axis) / sst
    return (np.sqrt(np.mean(np.square(err), axis=axis)), np.mean(np.abs(err), axis=axis), np.mean(err, axis=axis), r2)


def sample_agreement(predicted: np.ndarray, reference: np.ndarray, *, seed: int = 0) -> dict[str, Statistic]:
    """The statistics of paired values with percentile-bootstrap 95 % intervals (fewer than 3 pairs: none)."""
    from scipy.stats import bootstrap

    predicted, reference = np.asarray(predicted, np.float64), np.asarray(reference, np.float64)
    estimates = _statistics(predicted, reference)
    if len(predicted) < 3:
        return {name: Statistic(_finite(v)) for name, v in zip(STATISTICS, estimates, strict=True)}
    out = {}
    for i, name in enumerate(STATISTICS):
        with np.errstate(divide="ignore", invalid="ignore"):
            result = bootstrap((predicted, reference), lambda p, r, axis=-1, i=i: _statistics(p, r, axis)[i],
                               paired=True, vectorized=True, n_resamples=RESAMPLES, confidence_level=0.95,
                               method="percentile", random_state=np.random.default_rng(seed))
        low, high = result.confidence_interval
        out[name] = Statistic(_finite(estimates[i]), _finite(low), _finite(high))
    return out


def census_agreement(sums: dict) -> dict[str, Statistic]:
    """The population statistics from running sums (n, Σerror, Σerror², Σ|error|, Σref, Σref²)."""
    n = sums["n"]
    sst = sums["reference2"] - sums["reference"] ** 2 / n
    return {"rmse": Statistic(_finite(math.sqrt(sums["error2"] / n))),
            "mae": Statistic(_finite(sums["abs_error"] / n)),
            "bias": Statistic(_finite(sums["error"] / n)),
            "r2": Statistic(_finite(1.0 - sums["error2"] / sst) if sst > 0 else None)}
