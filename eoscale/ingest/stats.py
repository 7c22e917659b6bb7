"""Per-band statistics over valid pixels, exact, from value histograms.

uint16 data has 65,536 possible values, so a per-band histogram is small (one row of int64 per band) and
adds up across shards: every shard writer counts its own pixels while they are in memory, and the totals
give exact mean, standard deviation and percentiles without a second pass over the store.
"""

from __future__ import annotations

import numpy as np

HISTOGRAM_BINS = 65536
PERCENTILES = {"p01": 1.0, "p02": 2.0, "p50": 50.0, "p98": 98.0, "p99": 99.0}


def band_histograms(images: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Histogram of each band of `images` (tile, band, y, x) uint16 over the `valid` (tile, y, x) pixels:
    shape (band, 65536) int64. Pixels without data are left out whatever their value, so scenes with different
    nodata values, masks or alpha bands add up (a valid pixel's dark band at 0 counts: it is data)."""
    bands = images.shape[1]
    out = np.empty((bands, HISTOGRAM_BINS), dtype=np.int64)
    every = bool(valid.all())
    for b in range(bands):
        values = images[:, b].ravel() if every else images[:, b][valid]
        out[b] = np.bincount(values, minlength=HISTOGRAM_BINS)
    return out


def statistics_from_histograms(histograms: np.ndarray) -> dict[str, list[float]]:
    """Mean, std, min, max, percentiles and valid pixel count per band, from histograms of valid pixels."""
    counts = histograms.astype(np.float64)
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


def unusable_band(stats: dict[str, list[float]], bands: list[str]) -> str | None:
    """The one-line problem of the first band whose statistics cannot normalise it, or None.

    A band without a valid pixel in any tile (a sensor with no data anywhere) has mean 0 and std 0, and a band of
    one value has std 0: `(x - mean) / std` with std clamped to 1e-6 scales such a band by 1,000,000 at training and
    prediction, which no network survives. The store is refused instead, naming the band."""
    from eoscale.raster.static import static_bands

    static = set(static_bands(bands))
    for i, band in enumerate(bands):
        empty = bool(stats.get("valid_pixels")) and stats["valid_pixels"][i] == 0
        if not empty and stats["std"][i] > 0:  # (NaN is not > 0)
            continue
        if band in static:
            advice = f"leave {band.lower()} out of --static-layers"
        else:
            keep = [b for b, std in zip(bands, stats["std"], strict=True) if std > 0 and b not in static]
            advice = f"leave it out with --bands {','.join(keep)}" if keep else "check the scenes' bands and nodata"
        if empty:
            return (f"band {band} has no valid pixel in any tile, so it cannot be normalised (mean 0, std 0): "
                    f"{advice}, or give scenes where it holds data")
        return (f"band {band} holds one value ({stats['mean'][i]:g}) in every valid pixel, so it cannot be normalised "
                f"(std {stats['std'][i]:g}): {advice}")
    return None


def borrowed_statistics(source: str, bands: list[str]) -> dict[str, list[float]]:
    """The normalisation statistics (per-band mean and std) of `source`, an eoscale checkpoint (its band contract's)
    or a tile store, for a store of the same `bands` that is to be normalised as it was: a store of new labels to
    fine-tune that checkpoint on (fine-tuning refuses a store of other statistics than the checkpoint's)."""
    from pathlib import Path

    from eoscale.errors import InputError
    from eoscale.store import schema

    if Path(source).suffix == ".ckpt":
        from eoscale.contract import CONTRACT_KEY, BandContract, load_checkpoint

        checkpoint = load_checkpoint(source)
        if CONTRACT_KEY not in checkpoint:
            raise InputError(f"--statistics-from {source!r} is a checkpoint without a band contract: give the tile "
                             "store it was trained on")
        contract = BandContract.from_dict(checkpoint[CONTRACT_KEY])
        theirs, mean, std = list(contract.bands), list(contract.mean), list(contract.std)
    else:
        from eoscale.store.open import read_store_attrs

        attrs = read_store_attrs(source)
        theirs, stats = list(attrs[schema.ATTR_BANDS]), attrs[schema.ATTR_STATISTICS]
        mean, std = stats["mean"], stats["std"]
    if theirs != list(bands):
        raise InputError(f"--statistics-from {source!r} has bands {theirs}, these scenes {list(bands)}: give a "
                         "checkpoint or store of the same bands, in the same order")
    return {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
