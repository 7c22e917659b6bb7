"""The stratified estimators against the numerical example of Olofsson et al. (2014), section 5 (Tables 8 and 9 and
the accuracies and areas printed with them), to the precision the paper prints.

The printed figures were taken from two independent reproductions of the example (a Python test suite
`tests/test_validation.py` of an EUDR risk tool, and the `zeit` documentation page "Accuracy & Area"), which agree
with each other and with `mapaccuracy::olofsson`'s example (R, H. Costa), whose sample is the same matrix.
Two of the paper's printed producer's accuracy intervals (forest gain ± 0.23, stable non-forest ± 0.01) do not
follow from its own eq. 7 (± 0.25 and ± 0.02); neither do they follow from any variant of it tried (n instead of
n − 1, either term alone), so they are pinned here at the equation's values, with the paper's printed value
beside them. The paper's S(Â) of deforestation, printed as 34,097 pixels, is 34,907 by its own margin of error
(68,418 pixels = 1.96 × 34,907).
"""

from __future__ import annotations

import numpy as np
import pytest

from eoscale.maps.estimate import stratified

# Table 8: sample counts, rows = map class (strata), columns = reference class
COUNTS = np.array([[66, 0, 5, 4],
                   [0, 55, 8, 12],
                   [1, 0, 153, 11],
                   [2, 1, 9, 313]])
PIXELS = np.array([200_000, 150_000, 3_200_000, 6_450_000])  # mapped area in 30 m pixels
HA_PER_PIXEL = 0.09


@pytest.fixture(scope="module")
def example():
    return stratified(COUNTS, PIXELS / PIXELS.sum(), float(PIXELS.sum() * HA_PER_PIXEL))


def printed(value: float, decimals: int) -> float:
    return round(float(value), decimals)


def test_table_8_strata(example):
    assert example.counts.sum(axis=1).tolist() == [75, 75, 165, 325]
    assert example.counts.sum() == 640
    assert [printed(w, 3) for w in example.weights] == [0.020, 0.015, 0.320, 0.645]
    assert example.mapped_area.tolist() == pytest.approx([18_000, 13_500, 288_000, 580_500])


def test_table_9_area_proportions(example):
    table_9 = [[0.0176, 0.0000, 0.0013, 0.0011],
               [0.0000, 0.0110, 0.0016, 0.0024],
               [0.0019, 0.0000, 0.2967, 0.0213],
               [0.0040, 0.0020, 0.0179, 0.6212]]
    assert [[printed(v, 4) for v in row] for row in example.proportions] == table_9
    assert [printed(v, 4) for v in example.area_proportion] == [0.0235, 0.0130, 0.3175, 0.6460]


def test_users_accuracy(example):
    assert [printed(v, 2) for v in example.users] == [0.88, 0.73, 0.93, 0.96]
    assert [printed(v, 2) for v in example.users_ci95] == [0.07, 0.10, 0.04, 0.02]


def test_producers_accuracy(example):
    assert [printed(v, 2) for v in example.producers] == [0.75, 0.85, 0.93, 0.96]
    ci = [printed(v, 2) for v in example.producers_ci95]
    assert ci[0] == 0.21 and ci[2] == 0.03  # as printed
    assert ci[1] == 0.25 and ci[3] == 0.02  # printed 0.23 and 0.01: see the module docstring


def test_overall_accuracy(example):
    assert printed(example.overall, 2) == 0.95
    assert printed(example.overall_ci95, 2) == 0.02


def test_error_adjusted_areas(example):
    assert [printed(a, 0) for a in example.area] == [21_158, 11_686, 285_770, 581_386]
    assert [printed(a, 0) for a in example.area_ci95] == [6_158, 3_756, 15_510, 16_282]


def test_deforestation_in_pixels(example):
    pixels = PIXELS.sum()
    assert printed(example.area_proportion[0] * pixels, 0) == 235_086
    assert printed(example.area_ci95[0] / HA_PER_PIXEL, 0) == 68_418  # the printed margin of error, pixels


def test_f1_is_the_harmonic_mean(example):
    expected = 2 * example.users * example.producers / (example.users + example.producers)
    assert example.f1 == pytest.approx(expected)
    assert printed(example.f1[0], 3) == printed(2 * 0.88 * 0.7486614 / (0.88 + 0.7486614), 3)


def test_a_census_has_no_sampling_error():
    counts = np.array([[90, 10], [5, 95]])
    census = stratified(counts, counts.sum(axis=1) / counts.sum(), 200.0, census=True)
    assert census.overall == pytest.approx(185 / 200)
    assert census.area.tolist() == pytest.approx([95.0, 105.0])  # the reference's own pixel counts, 1 ha each
    assert census.overall_se == 0 and not census.users_se.any() and not census.area_se.any()


def test_undefined_quantities_are_nan_not_numbers():
    counts = np.array([[5, 0, 0], [0, 1, 0], [0, 0, 0]])  # class 2 absent from map and reference; class 1 one unit
    e = stratified(counts, np.array([0.5, 0.5, 0.0]), 100.0)
    assert np.isnan(e.users[2]) and np.isnan(e.producers[2])
    assert np.isnan(e.users_se[1]) and np.isnan(e.overall_se)  # a stratum of one unit has no variance estimate
    assert e.overall == pytest.approx(1.0)


def test_a_stratum_with_weight_needs_units():
    with pytest.raises(ValueError, match="no sample units"):
        stratified(np.array([[3, 1], [0, 0]]), np.array([0.6, 0.4]), 10.0)
