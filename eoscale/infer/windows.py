"""Where the windows of a scene go: a fixed grid over the scene, padded by reflection at its edges.

Along each axis, windows of `window` pixels start every `stride = window - round(overlap * window)` pixels,
from `-margin` (half the overlap) until the last one reaches `margin` pixels past the scene's end, so every
scene pixel lies inside some window with context on both sides; pixels outside the scene read as their
mirror image inside it (numpy's `reflect`). The grid depends only on the scene's size, the window and the
overlap, never on the batch size or the number of processes, which is what makes the output the same
whatever those are.

Each axis is cut into *blocks*: block `i` is the pixels from the start of window `i` to the start of window
`i + 1` (the last block runs to the scene's end). Exactly windows `first_window(i) .. i` touch block `i`, so
once window row `i` is blended, row block `i` is final; a process given row blocks `[i0, i1)` needs window
rows `first_window_row(i0) .. i1 - 1`, a few rows of halo before its own. Along the columns, a scene is cut
into *column tiles* of whole column blocks (`column_tiles`) and swept tile by tile, each with the window
columns of halo it needs, so memory is bounded by the tile's width, not the scene's; the halo windows are
computed once for each tile they touch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from eoscale.errors import InputError


def even_ranges(count: int, parts: int) -> list[range]:
    """`range(count)` in `parts` contiguous ranges, as equal in length as possible (the longer ones last)."""
    return [range(p * count // parts, (p + 1) * count // parts) for p in range(parts)]


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

    def block(self, i: int) -> tuple[int, int]:
        """Scene pixels `[start, stop)` of block `i` (empty when it lies wholly in the margin)."""
        start = self.start(i)
        stop = self.length if i == self.count - 1 else self.start(i + 1)
        start, stop = max(start, 0), min(stop, self.length)
        return start, max(start, stop)

    @property
    def halo(self) -> int:
        """Windows before window `i` that still reach block `i`."""
        # window j reaches pixels below start(j) + window, so it touches block i while (i - j) * stride < window
        return math.ceil(self.window / self.stride) - 1

    def first_window(self, block: int) -> int:
        """The first window that touches block `block`."""
        return max(0, block - self.halo)

    def coarsened(self, factor: int) -> AxisGrid:
        """The same windows on a grid of cells of `factor` pixels (`length` rounded up to whole cells): what a
        network giving one output a cell, at its features' stride, blends on. Window, stride and margin must be
        whole cells, so that every window and block starts on a cell's edge."""
        if self.window % factor or self.stride % factor or self.margin % factor:
            raise InputError(f"a field stride of {factor} pixels needs windows ({self.window}), their stride "
                             f"({self.stride}) and margin ({self.margin}) in whole cells of {factor}: give a stride "
                             f"that divides them, or another window or overlap")
        return AxisGrid(-(-self.length // factor), self.window // factor, self.stride // factor,
                        self.margin // factor, self.count)

    def split(self, parts: int) -> list[range]:
        """Blocks in `parts` contiguous ranges, as equal in count as possible."""
        return even_ranges(self.count, parts)

    def tiles(self, pixels: int) -> list[range]:
        """Blocks in contiguous ranges whose windows (halo included) span at most `pixels`, as few and as equal
        as that allows; each holds at least one block."""
        # blocks [b0, b1) need windows b0 - halo .. b1 - 1: (b1 - b0 - 1 + halo) strides plus a window of pixels
        per_tile = max(1, (pixels - self.window) // self.stride - self.halo + 1)
        return self.split(math.ceil(self.count / per_tile))


@dataclass(frozen=True)
class Span:
    """The windows `first .. blocks.stop - 1` along one axis that blocks `blocks` need, and the pixels they cover."""

    blocks: range
    first: int  # first window (the halo's, if any)
    origin: int  # padded position of the first window's first pixel (negative in the margin)
    size: int  # pixels from the first window's start to the last one's end
    out_start: int  # scene pixels [out_start, out_stop) of the blocks: what the span is final for
    out_stop: int

    @classmethod
    def of(cls, axis: AxisGrid, blocks: range | None = None) -> Span:
        """The span of `blocks` (default: all of the axis's blocks)."""
        blocks = range(axis.count) if blocks is None else blocks
        first = axis.first_window(blocks.start)
        origin = axis.start(first)
        out_start = axis.block(blocks.start)[0]
        out_stop = max(out_start, axis.block(blocks.stop - 1)[1])
        return cls(blocks, first, origin, axis.start(blocks.stop - 1) + axis.window - origin, out_start, out_stop)

    @property
    def windows(self) -> int:
        return self.blocks.stop - self.first

    @property
    def out(self) -> slice:
        """Where the scene pixels `[out_start, out_stop)` lie in an array of the span's `size` pixels."""
        return slice(self.out_start - self.origin, self.out_stop - self.origin)


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

    def coarsened(self, factor: int) -> WindowGrid:
        """The same windows on a grid of cells of `factor` × `factor` pixels (`AxisGrid.coarsened`)."""
        return self if factor == 1 else WindowGrid(self.rows.coarsened(factor), self.cols.coarsened(factor))

    def block_rows(self, i: int) -> tuple[int, int]:
        """Scene rows `[start, stop)` of row block `i` (empty when it lies wholly in the margin)."""
        return self.rows.block(i)

    def first_window_row(self, block: int) -> int:
        """The first window row that touches row block `block`: where a process that starts there begins."""
        return self.rows.first_window(block)

    def split_blocks(self, parts: int) -> list[range]:
        """Row blocks dealt to `parts` processes: contiguous ranges, as equal in windows as rows allow."""
        return self.rows.split(parts)

    def column_tiles(self, pixels: int | None) -> list[range]:
        """Column blocks in tiles whose windows span at most `pixels` columns (None: one tile, the whole width)."""
        return [range(self.cols.count)] if pixels is None else self.cols.tiles(pixels)


def check_window(window: int, overlap: float) -> None:
    if not isinstance(window, int) or window < 1:
        raise InputError(f"window={window!r}: give a positive number of pixels")
    if not 0.0 <= overlap < 1.0:
        raise InputError(f"overlap={overlap!r}: give a fraction of the window in [0, 1), e.g. 0.25")
    if window - round(overlap * window) < 1:
        raise InputError(f"overlap={overlap} leaves no stride for window={window}: use a smaller overlap")
