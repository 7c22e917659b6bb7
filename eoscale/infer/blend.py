"""Blending overlapping window predictions without seams, one row of windows at a time.

Each window's class probabilities are weighted by a smooth window, high in the middle and ramping down
over the overlap towards its edges, then summed; the sum divided by the summed weights is the blended
probability. A pixel near a window's edge (where the model sees least context) thus counts little where
a neighbour sees it better, and the change from one window to the next is gradual: no seams. The ramp
never reaches zero, so a pixel that only one window covers (at a scene edge) keeps that window's value.

The weights are separable (`ramp(y) * ramp(x)`), so their sum over the grid is the product of two 1-D
sums, computed once per scene instead of accumulated per pixel.

`RowAccumulator` holds the sums for a few rows of windows only (`window + 4 × stride` rows × the width of
one column tile, halo included): after row `j` is added, the rows no later window touches are normalised and
handed out. Memory is therefore bounded by the column tile's width, whatever the scene's size.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from eoscale.infer.config import RAMPS, Ramp
from eoscale.infer.windows import AxisGrid, Span, WindowGrid

SPARE_ROWS = 4


def ramp(window: int, overlap: int, kind: Ramp = "cosine") -> np.ndarray:
    """1-D weights of a window of `window` pixels whose first and last `overlap` pixels ramp up and down.

    Sampled at pixel centres, so the weights lie in (0, 1]: the cosine ramp is `sin²`, which with a
    neighbour's mirror-image ramp sums to exactly 1 over the overlap.
    """
    if kind not in RAMPS:
        raise ValueError(f"kind={kind!r} is not one of {', '.join(RAMPS)}")
    weights = np.ones(window, dtype=np.float64)
    if overlap > 0:
        t = (np.arange(overlap) + 0.5) / overlap
        up = np.sin(0.5 * np.pi * t) ** 2 if kind == "cosine" else t
        weights[:overlap] = np.minimum(weights[:overlap], up)
        weights[window - overlap :] = np.minimum(weights[window - overlap :], up[::-1])
    return weights.astype(np.float32)


def axis_weight_sums(axis: AxisGrid, weights: np.ndarray) -> np.ndarray:
    """The summed window weights at each padded position of `axis` (position 0 is the first window's start)."""
    sums = np.zeros(axis.span, dtype=np.float32)
    for i in range(axis.count):
        sums[i * axis.stride : i * axis.stride + axis.window] += weights
    return sums


class RowAccumulator:
    """Weighted sums of the windows' class probabilities over one row of windows; see the module docstring.

    Windows are added in grid order starting at window row `first_row`, window columns `cols.first ..
    cols.blocks.stop - 1` of each row (default: all); `finish_row(j)` after the last window of row `j` returns block
    `j`'s blended probabilities (scene rows `grid.block_rows(j)`, scene columns `cols.out_start ..
    cols.out_stop`) and moves on to row `j + 1`. A pixel's sum takes the same windows in the same order
    whatever the batch size, the process or the column tile, so the sums, and the map, are bit-for-bit the same.
    """

    def __init__(
        self,
        grid: WindowGrid,
        classes: int,
        *,
        first_row: int = 0,
        cols: Span | None = None,
        kind: Ramp = "cosine",
        device: torch.device | str = "cpu",
    ) -> None:
        self.grid = grid
        self.row = first_row
        self.cols = cols = cols or Span.of(grid.cols)
        window = grid.window
        overlap_y = grid.rows.window - grid.rows.stride
        overlap_x = grid.cols.window - grid.cols.stride
        wy, wx = ramp(window, overlap_y, kind), ramp(window, overlap_x, kind)
        self.weights = torch.from_numpy(np.outer(wy, wx)).to(device)  # (window, window)
        self._sum_y = torch.from_numpy(axis_weight_sums(grid.rows, wy)).to(device)
        self._sum_x = torch.from_numpy(axis_weight_sums(grid.cols, wx)).to(device)
        # room for SPARE_ROWS rows of windows below the open one, so the rows still open move up only once
        # every SPARE_ROWS rows (a copy of the buffer) instead of after every row
        rows = window + SPARE_ROWS * grid.rows.stride
        self.sums = torch.zeros((classes, rows, cols.size), dtype=torch.float32, device=device)
        self._top = 0  # buffer row of the open window row's first row

    def add(self, row: int, col: int, weighted: Tensor) -> None:
        """Add window (`row`, `col`)'s probabilities, already multiplied by `self.weights`."""
        if row != self.row:
            raise RuntimeError(f"window row {row} added while row {self.row} is open: add windows in grid order")
        x, y = (col - self.cols.first) * self.grid.cols.stride, self._top
        self.sums[:, y : y + self.grid.window, x : x + self.grid.window] += weighted

    def finish_row(self, row: int) -> Tensor:
        """Block `row`'s blended probabilities `(classes, rows, columns)`; then open the next row."""
        if row != self.row:
            raise RuntimeError(f"finish_row({row}) while row {self.row} is open")
        grid = self.grid
        start, stop = grid.block_rows(row)
        top = grid.rows.start(row)  # padded row of self.sums[:, 0]
        a, b = start - top, stop - top
        cols = self.cols
        first = top + grid.rows.margin  # index of row `top` in the padded weight sums
        pad = grid.cols.margin  # index of scene column 0 in the padded weight sums
        norm = self._sum_y[first + a : first + b, None] * self._sum_x[None, cols.out_start + pad : cols.out_stop + pad]
        block = self.sums[:, self._top + a : self._top + b, cols.out] / norm
        self._top += grid.rows.stride
        if self._top + grid.window > self.sums.shape[1]:
            # move the rows later windows still add to up to the top, and clear the rest
            keep = grid.window - grid.rows.stride
            if keep > 0:
                self.sums[:, :keep] = self.sums[:, self._top : self._top + keep].clone()
            self.sums[:, keep:] = 0
            self._top = 0
        self.row += 1
        return block
