"""The segmentation metrics, one definition for training (`eoscale fit/test`) and evaluation (`predict --store`).

torchmetrics collections ignoring `IGNORE_INDEX`: macro mIoU, per-class IoU, overall accuracy, macro F1.
Callers clone them with a split prefix (`val_`, `test_`), so names line up across commands.
"""

from __future__ import annotations

from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassJaccardIndex

from eoscale.classes import IGNORE_INDEX


def segmentation_metrics(num_classes: int) -> MetricCollection:
    """`miou`, `iou` (per class), `accuracy` and `f1` over `num_classes` classes."""
    kw = {"num_classes": num_classes, "ignore_index": IGNORE_INDEX}
    return MetricCollection(
        {
            "miou": MulticlassJaccardIndex(average="macro", **kw),
            "iou": MulticlassJaccardIndex(average="none", **kw),
            "accuracy": MulticlassAccuracy(average="micro", **kw),
            "f1": MulticlassF1Score(average="macro", **kw),
        }
    )
