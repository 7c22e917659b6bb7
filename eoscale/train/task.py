"""Moved: `BaseTask` to `eoscale.train.tasks.base`, `SegmentationTask` and its loss to
`eoscale.train.tasks.segmentation`. This path stays so that configs naming `eoscale.train.task.SegmentationTask`,
and imports of it, keep working, and warns once when imported (`eoscale.train.moved`)."""

from eoscale.train.moved import warn_moved
from eoscale.train.tasks.base import BaseTask, warmup_cosine
from eoscale.train.tasks.segmentation import (
    SPLITS,
    Loss,
    SegmentationLoss,
    SegmentationTask,
    _metric_name,
    dice_loss,
)

warn_moved("eoscale.train.task")

__all__ = ["BaseTask", "Loss", "SPLITS", "SegmentationLoss", "SegmentationTask", "_metric_name", "dice_loss",
           "warmup_cosine"]
