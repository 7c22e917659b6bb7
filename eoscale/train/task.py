"""Moved: `BaseTask` to `eoscale.train.tasks.base`, `SegmentationTask` and its loss to
`eoscale.train.tasks.segmentation`. This path stays so that configs naming `eoscale.train.task.SegmentationTask`,
and imports of it, keep working."""

from eoscale.train.tasks.base import BaseTask, warmup_cosine
from eoscale.train.tasks.segmentation import (
    SPLITS,
    Loss,
    SegmentationLoss,
    SegmentationTask,
    _metric_name,
    dice_loss,
)

__all__ = ["BaseTask", "Loss", "SPLITS", "SegmentationLoss", "SegmentationTask", "_metric_name", "dice_loss",
           "warmup_cosine"]
