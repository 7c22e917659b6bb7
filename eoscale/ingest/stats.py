"""Per-band statistics over valid pixels, exact, from value histograms.

uint16 data has 65,536 possible values, so a per-band histogram is small (one row of int64 per band) and
adds up across shards: every shard writer counts its own pixels while they are in memory, and the totals
give exact mean, standard deviation and percentiles without a second pass over the store.
"""

from __future__ import annotations

import numpy as np

HISTOGRAM_BINS = 65536
PERCENTILES = {"p01": 1.0, "p02": 2.0, "p50": 50.0, "p98": 98.0, "p99": 99.0}


def band_histograms(images: np.ndarray) -> np.ndarray:
    """Histogram of each band of `images` (tile, band, y, x) uint16: shape (band, 65536) int64."""
    bands = images.shape[1]
    out = np.empty((bands, HISTOGRAM_BINS), dtype=np.int64)
    for b in range(bands):
        out[b] = np.bincount(images[:, b].ravel(), minlength=HISTOGRAM_BINS)
    return out


def statistics_from_histograms(histograms: np.ndarray, *, nodata: int) -> dict[str, list[float]]:
    """Mean, std, min, max, percentiles and valid pixel count per band, leaving out the nodata value."""
    counts = histograms.astype(np.float64)
    if 0 <= nodata < HISTOGRAM_BINS:
        counts[:, nodata] = 0
    values = np.arange(HISTOGRAM_BINS, dtype=np.float64)
    stats: dict[str, list[float]] = {k: [] for k in ("mean", "std", "min", "max", *PERCENTILES, "valid_pixels")}
    for band_counts in counts:
        total = band_counts.sum()
        if total == 0:
            for key in stats:
                stats[key].append(0.0)
            continue
        mean = float((band_counts * values).sum() / total)
        var = float((band_counts * (values - mean) ** 2).sum() / total)
        nonzero = np.flatnonzero(band_counts)
        cumulative = np.cumsum(band_counts) / total
        stats["mean"].append(mean)
        stats["std"].append(var**0.5)
        stats["min"].append(float(nonzero[0]))
        stats["max"].append(float(nonzero[-1]))
        for key, q in PERCENTILES.items():
            # the smallest value whose cumulative share reaches q (the 'inverted_cdf' percentile)
            stats[key].append(float(np.searchsorted(cumulative, q / 100.0, side="left")))
        stats["valid_pixels"].append(float(total))
    return stats
