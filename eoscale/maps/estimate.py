"""Accuracy and area from a stratified random sample whose strata are the map's classes: the estimators of
Olofsson et al. (2014), "Good practices for estimating area and assessing accuracy of land change", Remote
Sensing of Environment 148:42–57, section 4.4 (equations numbered as there).

Rows are map classes i (the strata), columns reference classes j; `counts[i, j]` = n_ij sample units; W_i is
stratum i's share of the mapped area. Then

    p̂_ij  = W_i n_ij / n_i.                                    estimated area proportion of cell (i, j)   (eq. 4)
    Ô     = Σ_j p̂_jj,   V(Ô)   = Σ_i W_i² Û_i (1 − Û_i) / (n_i. − 1)                                 (eq. 1, 5)
    Û_i   = p̂_ii / p̂_i. = n_ii / n_i.,   V(Û_i) = Û_i (1 − Û_i) / (n_i. − 1)                         (eq. 2, 6)
    P̂_j   = p̂_jj / p̂_.j,  V(P̂_j) = [W_j² (1 − P̂_j)² Û_j (1 − Û_j) / (n_j. − 1)
                                    + P̂_j² Σ_{i≠j} W_i² (n_ij/n_i.)(1 − n_ij/n_i.) / (n_i. − 1)] / p̂_.j²   (eq. 3, 7)
    p̂_.j  = Σ_i p̂_ij,   S(p̂_.j) = sqrt(Σ_i W_i² (n_ij/n_i.)(1 − n_ij/n_i.) / (n_i. − 1))              (eq. 9, 10)
    Â_j   = A p̂_.j,     S(Â_j)  = A S(p̂_.j),  95 % CI ± 1.96 S                                         (eq. 11, 12)

(eq. 7 is written with the strata sizes N_i. = N W_i; N cancels). No finite-population correction, as in the
paper (at pixel scale it changes nothing that is reported). A census (every pixel of the population labelled, a
reference raster) has no sampling error: its standard errors are 0.

Pure numpy on purpose: the numbers can be checked against the paper without a raster in sight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Z95 = 1.96  # the paper's normal quantile for 95 % intervals


@dataclass(frozen=True)
class Estimates:
    """Everything estimated from one error matrix; per-class arrays are in class-table order. NaN where a
    quantity is undefined (a user's accuracy of a stratum without sample units, a standard error of a stratum
    with one, a producer's accuracy of a class no reference unit belongs to)."""

    counts: np.ndarray  # n_ij, rows map, columns reference
    weights: np.ndarray  # W_i
    total_area: float  # A, in the unit areas are reported in (hectares)
    census: bool
    proportions: np.ndarray  # p̂_ij
    overall: float
    overall_se: float
    users: np.ndarray
    users_se: np.ndarray
    producers: np.ndarray
    producers_se: np.ndarray
    f1: np.ndarray
    area_proportion: np.ndarray  # p̂_.j
    area_proportion_se: np.ndarray
    area: np.ndarray  # Â_j
    area_se: np.ndarray

    @property
    def overall_ci95(self) -> float:
        return Z95 * self.overall_se

    @property
    def users_ci95(self) -> np.ndarray:
        return Z95 * self.users_se

    @property
    def producers_ci95(self) -> np.ndarray:
        return Z95 * self.producers_se

    @property
    def area_ci95(self) -> np.ndarray:
        """The half-width of each class area's 95 % confidence interval."""
        return Z95 * self.area_se

    @property
    def mapped_area(self) -> np.ndarray:
        """Each map class's own (pixel-count) area, A W_i: biased whenever the map is wrong."""
        return self.total_area * self.weights


def stratified(counts: np.ndarray, weights: np.ndarray, total_area: float, *, census: bool = False) -> Estimates:
    """The estimates of the module docstring from the sample counts `counts[i, j]` (map class i, reference class
    j), the strata weights `weights[i]` (summing to 1) and the mapped total area. With `census`, `counts` is
    the whole population and every standard error is 0.

    Every stratum with weight must have sample units (else its share of the area is unknown): a ValueError
    otherwise, which callers turn into a message that names the class.
    """
    n = np.asarray(counts, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if n.ndim != 2 or n.shape[0] != n.shape[1] or w.shape != (n.shape[0],):
        raise ValueError(f"counts must be C×C and weights C long, got {n.shape} and {w.shape}")
    rows = n.sum(axis=1)
    empty = (w > 0) & (rows == 0)
    if empty.any():
        raise ValueError(f"strata {np.flatnonzero(empty).tolist()} have weight but no sample units")
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(rows[:, None] > 0, n / rows[:, None], 0.0)  # n_ij / n_i.
        p = w[:, None] * share
        diagonal = np.diag(p)
        column = p.sum(axis=0)
        users = np.where(rows > 0, np.diag(n) / rows, np.nan)
        producers = np.where(column > 0, diagonal / column, np.nan)
        f1 = 2 * users * producers / (users + producers)
        overall = float(diagonal.sum())

        # the variance terms W_i² q (1 − q) / (n_i. − 1), q = n_ij / n_i.; a stratum of one unit has none (NaN)
        # and a stratum without weight adds nothing
        dof = np.where(rows > 1, rows - 1, np.nan)
        cell = np.where(w[:, None] > 0, (w**2)[:, None] * share * (1 - share) / dof[:, None], 0.0)
        ua_var = np.where(rows > 0, users * (1 - users) / dof, np.nan)
        oa_var = float(np.where(w > 0, w**2 * ua_var, 0.0).sum())
        area_var = cell.sum(axis=0)
        off_diagonal = area_var - np.diag(cell)  # Σ_{i≠j} of the same terms
        pa_var = (w**2 * (1 - producers) ** 2 * ua_var + producers**2 * off_diagonal) / column**2

    def se(variance):
        return np.zeros_like(variance) if census else np.sqrt(variance)

    return Estimates(
        counts=np.asarray(counts), weights=w, total_area=float(total_area), census=census, proportions=p,
        overall=overall, overall_se=0.0 if census else float(np.sqrt(oa_var)),
        users=users, users_se=se(ua_var), producers=producers, producers_se=se(pa_var), f1=f1,
        area_proportion=column, area_proportion_se=se(area_var),
        area=total_area * column, area_se=total_area * se(area_var),
    )
