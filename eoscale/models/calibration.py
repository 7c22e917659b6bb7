"""Temperature scaling: one number T that divides a class network's logits so its probabilities mean what they say.

Guo et al. 2017 ("On Calibration of Modern Neural Networks", section 4.2): softmax(z / T) with T fitted on held-out
pixels by minimising the negative log-likelihood (L-BFGS). T > 1 softens an over-confident network, T < 1 sharpens
an under-confident one; the most probable class never changes, so the map stays the same and only the probabilities
(confidence, uncertainty, `--probabilities`, Bayesian smoothing) move. eoscale fits it at the end of `fit`
(`eoscale.train.callbacks.calibration`) or with `eoscale calibrate`, and keeps it in the checkpoint's band contract
(`BandContract.temperature`; a checkpoint without one has T = 1).

A fitted T outside `TEMPERATURE_RANGE` is clamped into it, with a warning and a record (`clamp_temperature`) that the
band contract's calibration record and the run keep: such a T says the val split or the network went wrong.

`fit_temperature` fits on a sample of pixels (`PixelSample` draws one reproducibly from a stream of blocks, so the
validation split never has to fit in memory).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

MAX_PIXELS = 1_000_000  # pixels a fit keeps: T is one number, and a million pixels pin it to three digits
TEMPERATURE_RANGE = (0.05, 20.0)  # a fitted T outside this is a network or a split gone wrong, not a calibration


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int | None = None,
                    max_iter: int = 100) -> float:
    """The temperature T minimising the NLL of softmax(logits / T) on `labels`, within `TEMPERATURE_RANGE`.

    `logits` are `(n, C)` (pixels as rows), `labels` their true class indices `(n,)`; pixels labelled
    `ignore_index` are left out. Returns 1.0 without pixels. A fit outside the range is clamped with a warning
    (`clamp_temperature`); callers that record the clamp fit with `fit_log_temperature` and clamp themselves.
    """
    log_t = fit_log_temperature(logits, labels, ignore_index=ignore_index, max_iter=max_iter)
    temperature, clamped = clamp_temperature(temperature_of(log_t))
    if clamped is not None:
        warnings.warn(clamp_message(clamped), RuntimeWarning, stacklevel=2)
    return temperature


def fit_log_temperature(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int | None = None,
                        max_iter: int = 100) -> float:
    """log T minimising the NLL of softmax(logits / T) on `labels` (`fit_temperature`), not clamped; 0.0 (T = 1)
    without pixels. Fitted on log T, so T stays positive, in float64 on the CPU."""
    logits = torch.as_tensor(logits).detach().to("cpu", torch.float64)
    labels = torch.as_tensor(labels).detach().to("cpu", torch.long).reshape(-1)
    if logits.ndim != 2 or logits.shape[0] != labels.shape[0]:
        raise ValueError(f"logits of shape {tuple(logits.shape)} do not match {labels.shape[0]} labels: "
                         "pass (pixels, classes) and (pixels,)")
    if ignore_index is not None:
        keep = labels != ignore_index
        logits, labels = logits[keep], labels[keep]
    if labels.numel() == 0 or logits.shape[1] < 2:
        return 0.0
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_t.item())


def clamp_temperature(fitted: float) -> tuple[float, dict | None]:
    """`fitted` within `TEMPERATURE_RANGE`, and the record of a clamp (`{"fitted", "kept", "range"}`, for the band
    contract's calibration record and the run) or None when it was within. A fit outside the range is a network or a
    split gone wrong (a val split of a few pixels, a network that separates them all): the clamp keeps the maps
    usable, the record and the warning (`clamp_message`) say that the temperature is not a calibration. A fit that
    is not a number keeps T = 1."""
    low, high = TEMPERATURE_RANGE
    if low <= fitted <= high:
        return fitted, None
    kept = 1.0 if math.isnan(fitted) else min(max(fitted, low), high)
    return kept, {"fitted": fitted if math.isfinite(fitted) else str(fitted), "kept": kept, "range": [low, high]}


def clamp_message(clamped: dict) -> str:
    """One line for a clamped temperature (`clamp_temperature`'s record)."""
    low, high = clamped["range"]
    fitted = clamped["fitted"]
    return (f"the fitted temperature {fitted:.4g} is outside [{low:g}, {high:g}] and was clamped to "
            f"{clamped['kept']:g}" if isinstance(fitted, float) else
            f"the temperature fit gave {fitted} and T = {clamped['kept']:g} was kept") + (
            ": the probabilities are not calibrated (too few or too easy val pixels, or a network gone wrong); "
            "check the val split")


def temperature_of(log_t: float) -> float:
    """T = e ** `log_t`, inf where it overflows a float (a fit that ran away)."""
    try:
        return math.exp(log_t)
    except OverflowError:
        return math.inf


def nll(logits: torch.Tensor, labels: torch.Tensor, *, temperature: float = 1.0) -> float:
    """The mean negative log-likelihood of softmax(logits / T) on `labels` (`(n, C)`, `(n,)`)."""
    logits = torch.as_tensor(logits).to(torch.float64)
    return float(F.cross_entropy(logits / temperature, torch.as_tensor(labels).long().reshape(-1)))


class PixelSample:
    """A reproducible uniform sample of at most `limit` labelled pixels from a stream of logit blocks (reservoir
    sampling by random keys: each pixel gets a key from a seeded generator, the `limit` smallest keys stay), so a
    fit sees the same pixels whatever the batch size, and memory stays at `limit` pixels."""

    def __init__(self, *, limit: int = MAX_PIXELS, seed: int = 0, ignore_index: int | None = None) -> None:
        self.limit = limit
        self.ignore_index = ignore_index
        self._generator = np.random.default_rng(seed)
        self._keys = np.empty(0)
        self._logits: np.ndarray | None = None
        self._labels = np.empty(0, dtype=np.int64)
        self.seen = 0

    def add(self, logits: torch.Tensor | np.ndarray, labels: torch.Tensor | np.ndarray) -> None:
        """Add a block: logits `(B, C, ...)` and labels `(B, ...)` (a segmentation batch), or `(n, C)` and `(n,)`."""
        logits = torch.as_tensor(logits).detach().float().cpu()
        labels = torch.as_tensor(labels).detach().cpu().long()
        if logits.ndim > 2:  # (B, C, H, W) → (B·H·W, C)
            logits = logits.movedim(1, -1).reshape(-1, logits.shape[1])
        labels = labels.reshape(-1)
        if self.ignore_index is not None:
            keep = labels != self.ignore_index
            logits, labels = logits[keep], labels[keep]
        n = labels.numel()
        if n == 0:
            return
        self.seen += n
        keys = self._generator.random(n)
        logits_np, labels_np = logits.numpy(), labels.numpy()
        if self._logits is None:
            self._logits = np.empty((0, logits_np.shape[1]), dtype=np.float32)
        keys = np.concatenate([self._keys, keys])
        pool = np.concatenate([self._logits, logits_np])
        pool_labels = np.concatenate([self._labels, labels_np])
        if keys.size > self.limit:
            keep = np.argpartition(keys, self.limit - 1)[: self.limit]
            keys, pool, pool_labels = keys[keep], pool[keep], pool_labels[keep]
        self._keys, self._logits, self._labels = keys, pool, pool_labels

    def __len__(self) -> int:
        return int(self._labels.size)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The sample as `(n, C)` float32 logits and `(n,)` labels."""
        if self._logits is None:
            return torch.empty(0, 0), torch.empty(0, dtype=torch.long)
        return torch.from_numpy(self._logits), torch.from_numpy(self._labels)
