"""The segmentation metrics, one definition for training (`eoscale fit/test`), evaluation (`predict --store`) and
the benchmarks.

torchmetrics collections ignoring `IGNORE_INDEX`: macro mIoU, per-class IoU, overall accuracy, macro F1.
Callers clone them with a split prefix (`val_`, `test_`), so names line up across commands.

The benchmarks score whole splits or maps from a confusion matrix in numpy (`confusion_matrix`,
`confusion_scores`): rows are the truth, columns the prediction. Their mIoU is the mean IoU over the classes
that occur in the truth (`over="truth"`), so every model scored on the same pixels averages the same classes (a
class absent from the truth but predicted by one model counts against that model only through the other classes'
IoU); a class in neither the truth nor the prediction has no IoU (NaN). `over="either"` averages the classes in the
truth or the prediction, as a map's census does (`eoscale bench active`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from eoscale.classes import IGNORE_INDEX

if TYPE_CHECKING:
    from torchmetrics import MetricCollection


def segmentation_metrics(num_classes: int) -> MetricCollection:
    """`miou`, `iou` (per class), `accuracy` and `f1` over `num_classes` classes."""
    # imported here: torchmetrics imports torch, which the benchmarks' numpy scorers below do not need
    from torchmetrics import MetricCollection
    from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassJaccardIndex

    kw = {"num_classes": num_classes, "ignore_index": IGNORE_INDEX}
    return MetricCollection(
        {
            "miou": MulticlassJaccardIndex(average="macro", **kw),
            "iou": MulticlassJaccardIndex(average="none", **kw),
            "accuracy": MulticlassAccuracy(average="micro", **kw),
            "f1": MulticlassF1Score(average="macro", **kw),
        }
    )


def confusion_matrix(truth: np.ndarray, predicted: np.ndarray, num_classes: int,
                     keep: np.ndarray | None = None) -> np.ndarray:
    """(num_classes, num_classes) int64 pixel counts, truth by row and prediction by column, of the pixels in
    `keep` (all if None) whose truth is not `IGNORE_INDEX`; class indices, not codes."""
    valid = truth != IGNORE_INDEX
    if keep is not None:
        valid &= keep
    t, p = truth[valid].astype(np.int64), predicted[valid].astype(np.int64)
    return np.bincount(t * num_classes + p, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def confusion_iou(matrix: np.ndarray) -> np.ndarray:
    """Each class's IoU, NaN for a class in neither the truth nor the prediction."""
    tp = np.diag(matrix).astype(np.float64)
    union = matrix.sum(0) + matrix.sum(1) - tp
    return np.where(union > 0, tp / np.maximum(union, 1), np.nan)


def confusion_miou(matrix: np.ndarray, *, over: str = "truth", classes: np.ndarray | None = None) -> float | None:
    """Mean IoU over the classes in the truth (`over="truth"`) or in the truth or the prediction (`"either"`),
    among `classes` (a boolean mask, all if None); None where no class qualifies."""
    if over not in ("truth", "either"):
        raise ValueError(f"over={over!r}: 'truth' or 'either'")
    iou = confusion_iou(matrix)
    counted = matrix.sum(1) > 0 if over == "truth" else ~np.isnan(iou)
    if classes is not None:
        counted &= classes
    return float(iou[counted].mean()) if counted.any() else None


def confusion_scores(matrix: np.ndarray, names: list[str]) -> dict:
    """`miou` (over the classes in the truth), `accuracy`, `pixels` and each class's `iou` by name (None where it
    has none, rounded to 4 places as the benchmark records keep it)."""
    iou = confusion_iou(matrix)
    return {"miou": confusion_miou(matrix), "accuracy": float(np.trace(matrix) / max(matrix.sum(), 1)),
            "pixels": int(matrix.sum()),
            "iou": {name: None if np.isnan(v) else round(float(v), 4) for name, v in zip(names, iou, strict=True)}}
