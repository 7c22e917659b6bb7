"""The benchmarks score with `eoscale.models.metrics`, one implementation, under the convention their records used
(issue 45, item 4): mIoU over the classes in the truth; a class only predicted gets IoU 0 but is not averaged; a
class in neither has no IoU. The active-learning census averages the classes in the map or the reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from eoscale.classes import IGNORE_INDEX
from eoscale.models.metrics import confusion_iou, confusion_matrix, confusion_miou, confusion_scores

ROOT = Path(__file__).resolve().parents[2]

# truth by row, prediction by column; class 2 only predicted, class 3 in neither
MATRIX = np.array([[8, 2, 0, 0],
                   [1, 4, 3, 0],
                   [0, 0, 0, 0],
                   [0, 0, 0, 0]])


def _records_convention(matrix: np.ndarray) -> tuple[float, list]:
    """The formula of the three copies the records of learning, temporal and fusion were written with."""
    tp = np.diag(matrix).astype(np.float64)
    union = matrix.sum(0) + matrix.sum(1) - tp
    iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
    present = matrix.sum(1) > 0
    return float(iou[present].mean()), [None if np.isnan(v) else float(v) for v in iou]


def test_absent_classes_follow_the_records_convention():
    # guards: a change of convention (averaging predicted-only classes, or absent ones as 0 or 1) that would make new
    # records incomparable with the old ones
    iou = confusion_iou(MATRIX)
    assert iou[:3] == pytest.approx([8 / 11, 4 / 10, 0.0]) and np.isnan(iou[3])
    assert confusion_miou(MATRIX) == pytest.approx((8 / 11 + 4 / 10) / 2)
    assert confusion_miou(MATRIX, over="either") == pytest.approx((8 / 11 + 4 / 10 + 0) / 3)
    assert confusion_miou(MATRIX, classes=np.array([False, True, True, True])) == pytest.approx(0.4)
    assert confusion_miou(np.zeros((3, 3), int)) is None
    scores = confusion_scores(MATRIX, ["a", "b", "c", "d"])
    assert scores["accuracy"] == pytest.approx(12 / 18) and scores["pixels"] == 18
    assert scores["iou"] == {"a": round(8 / 11, 4), "b": 0.4, "c": 0.0, "d": None}


def test_the_same_numbers_as_the_copies_they_replace():
    # guards: the shared implementation drifting from what the records were scored with
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 8))
        matrix = rng.integers(0, 20, (n, n)) * (rng.random((n, n)) < 0.6)
        matrix[rng.random(n) < 0.3] = 0  # classes absent from the truth
        if not matrix.sum(1).any():
            continue
        value, per_class = _records_convention(matrix)
        assert confusion_miou(matrix) == value
        assert [None if np.isnan(v) else float(v) for v in confusion_iou(matrix)] == per_class


def test_the_confusion_matrix_leaves_out_ignored_and_unkept_pixels():
    truth = np.array([[0, 1], [IGNORE_INDEX, 1]])
    pred = np.array([[0, 0], [1, 1]])
    assert confusion_matrix(truth, pred, 2).tolist() == [[1, 0], [1, 1]]
    keep = np.array([[True, False], [True, True]])
    assert confusion_matrix(truth, pred, 2, keep).tolist() == [[1, 0], [0, 1]]


def test_no_benchmark_keeps_its_own_iou():
    # guards: the local mIoU copies of eoscale/bench (learning, temporal, fusion, the active loop's census) coming
    # back: IoU arithmetic (a confusion matrix's diagonal) belongs in eoscale/models/metrics.py
    copies = [str(path.relative_to(ROOT)) for folder in ("bench", "infer")
              for path in sorted((ROOT / "eoscale" / folder).rglob("*.py"))
              if re.search(r"np\.diag\(", path.read_text())]
    assert copies == []
