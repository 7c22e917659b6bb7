"""Entropy, margin and the expected calibration error (`eoscale.models.uncertainty`) against their definitions
and against torchmetrics' calibration error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from eoscale.models.uncertainty import CalibrationBins, entropy, expected_calibration_error, margin


def random_probs(classes: int, *shape: int, seed: int = 0, sharpness: float = 3.0) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(scale=sharpness, size=(classes, *shape))
    e = np.exp(logits - logits.max(axis=0))
    return (e / e.sum(axis=0)).astype(np.float32)


def test_entropy_is_zero_when_certain_and_one_when_uniform():
    certain = np.zeros((4, 2, 3), dtype=np.float32)
    certain[2] = 1
    uniform = np.full((4, 2, 3), 0.25, dtype=np.float32)
    assert entropy(certain) == pytest.approx(np.zeros((2, 3)), abs=1e-6)
    assert entropy(uniform) == pytest.approx(np.ones((2, 3)), abs=1e-6)
    assert entropy(certain).dtype == np.float32 and entropy(certain).shape == (2, 3)


def test_entropy_matches_scipy_normalised_by_log_classes():
    from scipy.stats import entropy as scipy_entropy

    probs = random_probs(6, 50, seed=1)
    assert entropy(probs) == pytest.approx(scipy_entropy(probs, axis=0) / np.log(6), abs=1e-5)


def test_margin_is_top_two_difference():
    probs = np.array([[0.7, 0.4, 0.5], [0.2, 0.4, 0.5], [0.1, 0.2, 0.0]], dtype=np.float32)
    assert margin(probs) == pytest.approx([0.5, 0.0, 0.0])
    sorted_ = -np.sort(-random_probs(5, 40, seed=2), axis=0)
    assert margin(random_probs(5, 40, seed=2)) == pytest.approx(sorted_[0] - sorted_[1], abs=1e-6)


def test_one_class_is_certain():
    probs = np.ones((1, 3, 3), dtype=np.float32)
    assert (entropy(probs) == 0).all() and (margin(probs) == 1).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ece_matches_torchmetrics(seed):
    probs = random_probs(5, 2000, seed=seed, sharpness=2.0)
    labels = np.random.default_rng(seed + 10).integers(0, 5, 2000)
    # labels that agree with the prediction more often than chance, so the bins differ
    agree = np.random.default_rng(seed + 20).random(2000) < 0.5
    labels[agree] = probs.argmax(axis=0)[agree]
    expected = multiclass_calibration_error(torch.from_numpy(probs.T.copy()), torch.from_numpy(labels), num_classes=5,
                                            n_bins=15, norm="l1")
    assert expected_calibration_error(probs, labels) == pytest.approx(float(expected), abs=1e-5)


def test_ece_from_confidence_and_correctness_and_from_blocks_agree():
    probs = random_probs(4, 30, 30, seed=3)
    labels = np.random.default_rng(4).integers(0, 4, (30, 30))
    labels[:5] = 255  # ignored
    whole = expected_calibration_error(probs, labels, ignore_index=255)
    keep = labels != 255
    confidence, correct = probs.max(axis=0)[keep], (probs.argmax(axis=0) == labels)[keep]
    assert expected_calibration_error(confidence, correct) == pytest.approx(whole)
    halves = CalibrationBins()
    halves.add_probs(probs[:, :15], labels[:15], ignore_index=255)
    other = CalibrationBins()
    other.add_probs(probs[:, 15:], labels[15:], ignore_index=255)
    halves += other
    assert halves.ece() == pytest.approx(whole) and halves.pixels == keep.sum()


def test_ece_of_a_calibrated_predictor_is_small_and_of_an_overconfident_one_large():
    rng = np.random.default_rng(5)
    confidence = rng.uniform(0.3, 1.0, 200_000)
    calibrated = rng.random(200_000) < confidence
    assert expected_calibration_error(confidence, calibrated) < 0.01
    overconfident = rng.random(200_000) < confidence * 0.6
    assert expected_calibration_error(confidence, overconfident) > 0.2


def test_reliability_rows_and_empty_bins():
    bins = CalibrationBins(10)
    assert np.isnan(bins.ece())
    bins.add(np.array([0.95, 0.95, 0.15]), np.array([True, False, False]))
    rows = bins.reliability()
    assert [r["pixels"] for r in rows] == [1, 2]
    assert rows[1]["accuracy"] == 0.5 and rows[1]["confidence"] == pytest.approx(0.95)
    assert bins.ece() == pytest.approx((0.15 + 2 * 0.45) / 3)
