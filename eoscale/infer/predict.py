"""The window loop: strips of a scene in, blended blocks of class probabilities out.

    grid = WindowGrid.make(scene.height, scene.width, window=256, overlap=0.25)
    with SceneReader(scene) as reader:
        for tile in grid.column_tiles(COLUMN_TILE):
            for block in predict_blocks(network, reader, grid, contract=contract, nodata=scene.nodata, cols=tile):
                ...  # block.probs: (classes, rows, columns), block.valid: (rows, columns) from block.col on

A reader thread reads the strip of the scene under each row of windows (through `SceneReader`, mirrored at
the scene's edges), normalises it as training did, and cuts it into windows, one strip ahead of the model,
so reading overlaps the forward passes (and `handoff` lets the caller write finished blocks in another
thread, so writing overlaps them too). Windows go through the model in batches that may span rows; their
probabilities are blended by `RowAccumulator` in grid order, and each block leaves as soon as it is final.

The loop sweeps one column tile of the scene at a time (`WindowGrid.column_tiles`): the windows of a range
of column blocks plus the window columns of halo the first block needs. Memory therefore does not depend on
the scene's size: it grows with the tile's width by `bytes_per_column` (the rows the accumulator keeps, the
strips read ahead and the blocks on their way out), at most about 96 KB per column for 10 bands, 10 classes
and 128-px windows at overlap 0.25, i.e. ~400 MB for the default `COLUMN_TILE` of 4,096 columns, on top of
what does not depend on the scene (model, batch, libraries, GDAL's block cache). The price is the halo: a
scene wider than a tile computes one window column (at overlap ≤ 0.5) twice per tile boundary, about 2 %
more forward passes at the defaults.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import Tensor, nn

from eoscale.errors import InputError
from eoscale.infer.blend import SPARE_ROWS, Ramp, RowAccumulator
from eoscale.infer.windows import Span, WindowGrid
from eoscale.ingest.reader import SceneReader
from eoscale.train.checkpoint import BandContract

T = TypeVar("T")
COLUMN_TILE = 4096  # widest sweep, in columns (halo included): bounds memory at ~bytes_per_column × this
STRIPS_IN_FLIGHT = 4  # read ahead (prefetch depth 2), being read, in the model
BLOCKS_IN_FLIGHT = 4  # waiting to be written (the part writer's handoff depth 2), being written, being finished


@dataclass(frozen=True)
class Block:
    """Final blended pixels of a scene: row block `index` of the grid, from scene row `row` and column `col`."""

    index: int
    row: int
    probs: Tensor  # (classes, rows, columns) float32 on the model's device; sums to 1 over classes
    valid: np.ndarray  # (rows, columns) True where no band is nodata
    col: int = 0


@dataclass(frozen=True)
class Strip:
    """The normalised pixels under one row of windows (of one column tile), cut into its windows."""

    row: int
    windows: Tensor  # (cols, bands, window, window), contiguous
    valid: np.ndarray  # (window, the span's padded width)


def read_strip(reader: SceneReader, grid: WindowGrid, row: int, *, mean: np.ndarray, scale: np.ndarray,
               nodata: float, cols: Span | None = None) -> Strip:
    """Window row `row`'s strip under window columns `cols` (default: all), normalised like the training
    tiles: `(x - mean) / std`, nodata as 0."""
    cols = cols or Span.of(grid.cols)
    ys = grid.rows.positions(grid.rows.start(row), grid.rows.start(row) + grid.window)
    xs = grid.cols.positions(cols.origin, cols.origin + cols.size)
    top, bottom = int(ys.min()), int(ys.max()) + 1
    left, right = int(xs.min()), int(xs.max()) + 1
    raw = reader.read(top, left, bottom - top, right - left)
    if not (len(ys) == bottom - top and ys[0] == top and ys[-1] == bottom - 1):
        raw = raw[:, ys - top]  # mirrored rows at the scene's top and bottom
    raw = np.take(raw, xs - left, axis=2)  # (bands, window, span), mirrored at the left and right
    invalid = raw[0] == nodata
    for band in raw[1:]:
        invalid |= band == nodata
    # windows are cut from the uint16 strip and normalised straight into one contiguous float32 array: one pass
    # (measured on a 10×128×1024 strip: 3 ms, against 36 ms normalising first and copying windows after)
    cut = sliding_window_view(raw, grid.window, axis=2)[:, :, :: grid.cols.stride].transpose(2, 0, 1, 3)
    windows = np.empty(cut.shape, dtype=np.float32)
    np.subtract(cut, mean, out=windows)
    windows *= scale
    if invalid.any():  # nodata reads as the band mean, as in training
        cut_invalid = sliding_window_view(invalid, grid.window, axis=1)[:, :: grid.cols.stride].transpose(1, 0, 2)
        np.copyto(windows, 0.0, where=cut_invalid[:, None])
    return Strip(row, torch.from_numpy(windows), ~invalid)


def bytes_per_column(grid: WindowGrid, *, bands: int, classes: int) -> int:
    """An upper estimate of the memory the window loop and the part writer hold per column of the scene.

    The same whatever the scene's height: the accumulator's rows (float32, classes × (window + 4 strides),
    and a copy of the overlap rows when they move up), the strips in flight (windows cut with their overlap,
    float32; the raw and mirrored uint16 reads; the nodata mask), and the blocks in flight (probabilities and
    their normalisation, float32; argmax values and indices, confidence, mask and the area count's copies).
    """
    window, stride_y, stride_x = grid.window, grid.rows.stride, grid.cols.stride
    accumulator = 4 * classes * (window + SPARE_ROWS * stride_y) + 4 * classes * (window - stride_y)
    strip = 4 * bands * window * window / stride_x + 2 * 2 * bands * window + 2 * window
    block = 4 * (classes + 1) * stride_y + (4 + 8 + 1 + 1 + 1 + 8) * stride_y
    return int(accumulator + STRIPS_IN_FLIGHT * strip + BLOCKS_IN_FLIGHT * block)


def predict_blocks(
    network: nn.Module,
    reader: SceneReader,
    grid: WindowGrid,
    *,
    contract: BandContract,
    nodata: float,
    blocks: range | None = None,
    cols: range | None = None,
    batch_size: int = 16,
    ramp: Ramp = "cosine",
    on_batch: Callable[[int], None] | None = None,
) -> Iterator[Block]:
    """Blended row blocks `blocks` (default: all) of the scene `reader` reads, in order, over column blocks
    `cols` (default: all, i.e. the whole width); see the module docstring.

    `on_batch(windows)` is called after each forward pass. On a CUDA device the forward pass runs under
    bf16 autocast; probabilities and their blending stay float32.
    """
    if batch_size < 1:
        raise InputError(f"batch size {batch_size}: give at least 1")
    blocks = range(grid.rows.count) if blocks is None else blocks
    if len(blocks) == 0:
        return
    device = next(network.parameters()).device
    first = grid.first_window_row(blocks.start)
    span = Span.of(grid.cols, cols)
    classes = len(contract.classes)
    accumulator = RowAccumulator(grid, classes, first_row=first, cols=span, kind=ramp, device=device)
    mean = np.asarray(contract.mean, dtype=np.float32)[:, None, None]
    scale = (1.0 / np.maximum(np.asarray(contract.std, dtype=np.float32), 1e-6))[:, None, None]
    strips = prefetch(
        (read_strip(reader, grid, j, mean=mean, scale=scale, nodata=nodata, cols=span)
         for j in range(first, blocks.stop)),
        depth=2,
    )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    last_col = span.windows - 1
    try:
        for batch in batched(((strip, k) for strip in strips for k in range(span.windows)), batch_size):
            x = _stack(batch)
            if len(batch) == 1:
                # torch on CPUs takes other kernels for a batch of one (measured: logits 2e-6 away from the same
                # window in batches of 2..16), so a lone window goes in twice to keep the map batch-independent
                x = torch.cat([x, x])
            x = x.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else x
            with torch.inference_mode(), autocast:
                logits = network(x)
            if logits.shape[1] != classes:
                raise InputError(f"the model gives {logits.shape[1]} classes but its checkpoint's class table has {classes}")
            finished: list[Block] = []
            with torch.inference_mode():
                weighted = logits.float().softmax(dim=1).mul_(accumulator.weights)
                for i, (strip, k) in enumerate(batch):
                    accumulator.add(strip.row, span.first + k, weighted[i])
                    if k == last_col:
                        finished.extend(_finish(accumulator, grid, span, strip, blocks))
            if on_batch is not None:
                on_batch(len(batch))
            yield from finished  # outside inference_mode: a generator's context would leak into its consumer
    finally:
        strips.close()


def _stack(batch: list[tuple[Strip, int]]) -> Tensor:
    """The batch's windows as one tensor: a slice of a strip's windows when the batch lies in one strip."""
    pieces: list[Tensor] = []
    start = 0
    for i in range(1, len(batch) + 1):
        if i == len(batch) or batch[i][0] is not batch[start][0]:
            strip = batch[start][0]
            pieces.append(strip.windows[batch[start][1] : batch[i - 1][1] + 1])
            start = i
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _finish(accumulator: RowAccumulator, grid: WindowGrid, span: Span, strip: Strip, blocks: range) -> Iterator[Block]:
    probs = accumulator.finish_row(strip.row)
    if strip.row not in blocks:  # a halo row, final in another process's part
        return
    start, stop = grid.block_rows(strip.row)
    top = grid.rows.start(strip.row)
    yield Block(strip.row, start, probs, strip.valid[start - top : stop - top, span.out], col=span.out_start)


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class prefetch(Iterator[T]):  # noqa: N801 (used like a function)
    """Iterate `items` in a background thread, up to `depth` items ahead; exceptions come through."""

    _DONE = object()

    def __init__(self, items: Iterable[T], *, depth: int = 2) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(iter(items),), daemon=True, name="eoscale-prefetch")
        self._thread.start()

    def _run(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
            self._put(self._DONE)
        except BaseException as err:  # handed to the consumer, who raises it
            self._put(_Failure(err))

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __next__(self) -> T:
        item = self._queue.get()
        if item is self._DONE:
            self._queue.put(item)
            raise StopIteration
        if isinstance(item, _Failure):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class handoff:  # noqa: N801 (used like a function)
    """Call `consume(item)` in a background thread for each item `put`, in order, up to `depth` items behind the
    caller; an exception in `consume` comes through at the next `put` or at `close`."""

    _STOP = object()

    def __init__(self, consume: Callable[[T], None], *, depth: int = 2, name: str = "eoscale-handoff") -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(consume,), daemon=True, name=name)
        self._thread.start()

    def _run(self, consume: Callable[[T], None]) -> None:
        while (item := self._queue.get()) is not self._STOP:
            if self._error is None:  # after a failure, items are only taken off the queue
                try:
                    consume(item)
                except BaseException as err:  # handed to the caller, who raises it
                    self._error = err

    def put(self, item: T) -> None:
        self._raise()
        self._queue.put(item)

    def close(self) -> None:
        """Wait until every item put is consumed; raise what `consume` raised."""
        self.stop()
        self._raise()

    def stop(self) -> None:
        """Stop after the items put so far, without raising."""
        if self._thread.is_alive():
            self._queue.put(self._STOP)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


@dataclass(frozen=True)
class _Failure:
    error: BaseException
