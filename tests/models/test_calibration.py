"""Temperature scaling (`eoscale.models.calibration`): the fit recovers a known temperature, lowers the NLL and the
ECE of an over-confident predictor, never changes the most probable class, and samples pixels reproducibly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.models.calibration import PixelSample, fit_temperature, nll
from eoscale.models.uncertainty import expected_calibration_error


def calibrated_logits(n: int, classes: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and labels drawn from softmax(logits): calibrated by construction (T = 1)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, classes, generator=generator) * 2.0
    labels = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=generator).squeeze(1)
    return logits, labels


@pytest.mark.parametrize("true_t", [0.5, 1.0, 2.5])
def test_fit_recovers_the_temperature_logits_were_scaled_by(true_t):
    logits, labels = calibrated_logits(40_000, 6, seed=1)
    # a network whose logits are the calibrated ones divided by T: dividing by the fitted T undoes it
    fitted = fit_temperature(logits / true_t, labels)
    assert fitted == pytest.approx(1 / true_t, rel=0.05)


def test_fit_lowers_nll_and_ece_of_an_overconfident_predictor():
    logits, labels = calibrated_logits(20_000, 5, seed=2)
    overconfident = logits * 3.0
    t = fit_temperature(overconfident, labels)
    assert t > 2.0
    assert nll(overconfident, labels, temperature=t) < nll(overconfident, labels)
    before = expected_calibration_error(torch.softmax(overconfident, 1).T.numpy(), labels.numpy())
    after = expected_calibration_error(torch.softmax(overconfident / t, 1).T.numpy(), labels.numpy())
    assert after < before / 3
    # the map does not change: argmax is invariant to a positive temperature
    assert torch.equal((overconfident / t).argmax(1), overconfident.argmax(1))


def test_ignored_pixels_and_empty_inputs():
    logits, labels = calibrated_logits(5_000, 4, seed=3)
    labels_with_ignored = labels.clone()
    labels_with_ignored[:1000] = 255
    assert fit_temperature(logits, labels_with_ignored, ignore_index=255) == pytest.approx(
        fit_temperature(logits[1000:], labels[1000:]), rel=1e-6)
    assert fit_temperature(torch.empty(0, 4), torch.empty(0, dtype=torch.long)) == 1.0
    with pytest.raises(ValueError, match="do not match"):
        fit_temperature(torch.zeros(3, 4), torch.zeros(5, dtype=torch.long))


def test_pixel_sample_is_bounded_reproducible_and_batch_size_free():
    logits = torch.randn(8, 3, 10, 10, generator=torch.Generator().manual_seed(4))
    labels = torch.randint(0, 3, (8, 10, 10), generator=torch.Generator().manual_seed(5))
    labels[0] = 255

    def sample(batch: int) -> PixelSample:
        s = PixelSample(limit=300, seed=7, ignore_index=255)
        for start in range(0, 8, batch):
            s.add(logits[start:start + batch], labels[start:start + batch])
        return s

    one, two = sample(1), sample(4)
    assert len(one) == 300 and one.seen == 700
    a, b = one.tensors(), two.tensors()
    order_a, order_b = np.lexsort(a[0].numpy().T), np.lexsort(b[0].numpy().T)
    assert np.array_equal(a[0].numpy()[order_a], b[0].numpy()[order_b])
    assert (a[1] != 255).all()
    # every kept row is a real pixel with its own label
    flat = logits.movedim(1, -1).reshape(-1, 3)
    rows = {tuple(r): int(lab) for r, lab in zip(flat.numpy().round(6).tolist(), labels.reshape(-1).tolist(), strict=True)}
    assert all(rows[tuple(r)] == int(lab) for r, lab in zip(a[0].numpy().round(6).tolist(), a[1].tolist(), strict=True))


def test_a_temperature_outside_the_range_is_clamped_with_a_warning_and_a_record():
    """Guards issue 46 item 4: a fit outside [0.05, 20] was clamped without a word, though the module calls it a
    failure."""
    from eoscale.models.calibration import TEMPERATURE_RANGE, clamp_temperature

    logits, labels = calibrated_logits(2_000, 3, seed=6)
    separable = torch.nn.functional.one_hot(labels, 3).double() * 0.1  # every pixel right by a small margin: T → 0
    with pytest.warns(RuntimeWarning, match=r"fitted temperature .* outside \[0.05, 20\] and was clamped to 0.05"):
        assert fit_temperature(separable, labels) == TEMPERATURE_RANGE[0]
    assert clamp_temperature(1.5) == (1.5, None)
    assert clamp_temperature(80.0) == (20.0, {"fitted": 80.0, "kept": 20.0, "range": [0.05, 20.0]})
    assert clamp_temperature(float("nan"))[0] == 1.0
