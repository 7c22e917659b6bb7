"""Where the windows of a scene go: a fixed grid over the scene, padded by reflection at its edges.

Along each axis, windows of `window` pixels start every `stride = window - round(overlap * window)` pixels,
from `-margin` (half the overlap) until the last one reaches `margin` pixels past the scene's end, so every
scene pixel lies inside some window with context on both sides; pixels outside the scene read as their
mirror image inside it (numpy's `reflect`). The grid depends only on the scene's size, the window and the
overlap, never on the batch size or the number of processes, which is what makes the output the same
whatever those are.

Rows of the output are cut into *blocks*: block `i` is the scene rows from the start of window row `i` to
the start of window row `i + 1` (the last block runs to the scene's end). Once window row `i` is blended,
no later window touches block `i`, so it is final; a process given blocks `[i0, i1)` needs window rows
`first_window_row(i0) .. i1 - 1`, a few rows of halo before its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from eoscale.errors import InputError


def reflect(index: np.ndarray, length: int) -> np.ndarray:
    """Positions `index` (any integers) mirrored into `[0, length)` without repeating the edge pixel."""
    if length == 1:
        return np.zeros_like(index)
    period = 2 * (length - 1)
    folded = np.mod(index, period)
    return np.where(folded < length, folded, period - folded)


@dataclass(frozen=True)
class AxisGrid:
    """Window starts along one axis of a scene of `length` pixels."""

    length: int
    window: int
    stride: int
    margin: int
    count: int

    @classmethod
    def make(cls, length: int, window: int, overlap: float) -> AxisGrid:
        stride = window - round(overlap * window)
        margin = (window - stride) // 2
        count = max(1, math.ceil((length + 2 * margin - window) / stride) + 1)
        return cls(length, window, stride, margin, count)

    def start(self, i: int) -> int:
        """Scene position of window `i`'s first pixel (negative in the top/left margin)."""
        return -self.margin + i * self.stride

    @property
    def span(self) -> int:
        """Pixels from the first window's start to the last window's end."""
        return (self.count - 1) * self.stride + self.window

    def positions(self, start: int, stop: int) -> np.ndarray:
        """Scene pixels that padded positions `[start, stop)` read (mirrored at the edges)."""
        return reflect(np.arange(start, stop), self.length)


@dataclass(frozen=True)
class WindowGrid:
    """The windows of one scene: `rows` × `cols` of them, in row-major order."""

    rows: AxisGrid
    cols: AxisGrid

    @classmethod
    def make(cls, height: int, width: int, *, window: int, overlap: float) -> WindowGrid:
        check_window(window, overlap)
        return cls(AxisGrid.make(height, window, overlap), AxisGrid.make(width, window, overlap))

    @property
    def window(self) -> int:
        return self.rows.window

    @property
    def count(self) -> int:
        return self.rows.count * self.cols.count

    @property
    def height(self) -> int:
        return self.rows.length

    @property
    def width(self) -> int:
        return self.cols.length

    def block_rows(self, i: int) -> tuple[int, int]:
        """Scene rows `[start, stop)` of block `i` (empty when it lies wholly in the margin)."""
        start = self.rows.start(i)
        stop = self.rows.length if i == self.rows.count - 1 else self.rows.start(i + 1)
        start, stop = max(start, 0), min(stop, self.rows.length)
        return start, max(start, stop)

    def first_window_row(self, block: int) -> int:
        """The first window row that touches block `block`: where a process that starts there begins."""
        # window row j reaches rows below start(j) + window, so it touches block i while (i - j) * stride < window
        return max(0, block - math.ceil(self.window / self.rows.stride) + 1)

    def split_blocks(self, parts: int) -> list[range]:
        """Blocks dealt to `parts` processes: contiguous ranges, as equal in windows as rows allow."""
        n = self.rows.count
        return [range(p * n // parts, (p + 1) * n // parts) for p in range(parts)]


def check_window(window: int, overlap: float) -> None:
    if not isinstance(window, int) or window < 1:
        raise InputError(f"window={window!r}: give a positive number of pixels")
    if not 0.0 <= overlap < 1.0:
        raise InputError(f"overlap={overlap!r}: give a fraction of the window in [0, 1), e.g. 0.25")
    if window - round(overlap * window) < 1:
        raise InputError(f"overlap={overlap} leaves no stride for window={window}: use a smaller overlap")
