"""The window loop: strips of a scene in, blended blocks of the network's output (class probabilities) out.

    grid = WindowGrid.make(scene.height, scene.width, window=256, overlap=0.25)
    for tile in grid.column_tiles(COLUMN_TILE):
        for block in predict_blocks(network, scene, grid, contract=contract, cols=tile):
            ...  # block.probs: (classes, rows, columns), block.valid: (rows, columns) from block.col on

What the blended channels are is the checkpoint's target kind's (`BandContract.activate`: class probabilities for
a class model; the output writer of `eoscale.infer.outputs` may give its own `channels` and `activate`).

Reading threads (`readers`, each with its own `SceneReader` and its own run of each strip's windows) read
the strip of the scene under each row of windows (mirrored at the scene's edges), normalise it as training
did, and cut it into windows, a few strips ahead of the model, so reading overlaps the forward passes (and
`handoff` lets the caller write finished blocks in another thread, so writing overlaps them too). One thread
is enough beside a CPU model, which needs the cores itself. Beside a GPU the CPU side must keep up with the
device: one thread feeds about 800 windows/s of 10 bands at 128 px and two about 1,400 on a 2-core VM
(benchmarks/predict.json, "feed"), while a data-centre GPU runs a ResNet-18 at 128 px faster than that, so there
it is up to 8 (`reading_threads`). Windows go through the model in batches (`_batches`); their probabilities
are blended by `RowAccumulator` in grid order, and each block leaves as soon as it is final.

On the CPU every forward pass has the same shape: the windows are batched in grid order across strips and the last
batch is filled up with copies of its last window (`_forward`). The CPU libraries pick their kernels by shape (seen
on an AMD EPYC with one thread: a ResNet's 1 × 1 convolutions give values one ulp apart for batches of fewer than
16 windows than for 16 or more), so batches that depend on where a scene was split (rows dealt to processes, column
tiles, strips sharing a batch, the last batch) would give outputs that depend on the split: an int8 embedding field
then differs in a few values. With one shape, a window's output depends on the model, the batch size and the
threads a process computes with, not on the split. On a GPU a batch is a slice of one strip's windows, cut as
evenly as possible, so that it goes to the device from page-locked memory without a copy.

The loop sweeps one column tile of the scene at a time (`WindowGrid.column_tiles`): the windows of a range
of column blocks plus the window columns of halo the first block needs. Memory therefore does not depend on
the scene's size: it grows with the tile's width by `bytes_per_column` (the rows the accumulator keeps, the
strips read ahead and the blocks on their way out), at most about 96 KB per column for 10 bands, 10 classes
and 128-px windows at overlap 0.25, i.e. ~400 MB for the default `eoscale.infer.config.COLUMN_TILE` of 4,096 columns, on top of
what does not depend on the scene (model, batch, libraries, GDAL's block cache). The price is the halo: a
scene wider than a tile computes one window column (at overlap ≤ 0.5) twice per tile boundary, about 2 %
more forward passes at the defaults.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import Tensor, nn

from eoscale.contract import BandContract
from eoscale.errors import BandMismatchError, InputError
from eoscale.infer.blend import SPARE_ROWS, RowAccumulator
from eoscale.infer.config import Ramp
from eoscale.infer.stacked import EPOCH, for_stack
from eoscale.infer.windows import Span, WindowGrid, even_ranges
from eoscale.inputs.prepare import prepare
from eoscale.inputs.spec import InputSpec
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import Scene
from eoscale.raster.stack import SceneStack, StackReader, StackWindow, open_reader

T = TypeVar("T")
READ_AHEAD = 2  # strips read and waiting for the model, beyond the one being read
STRIPS_IN_FLIGHT = READ_AHEAD + 2  # + the one being read + the one in the model
BLOCKS_IN_FLIGHT = 4  # waiting to be written (the part writer's handoff depth 2), being written, being finished


@dataclass(frozen=True)
class Block:
    """Final blended pixels of a scene: row block `index` of the grid, from scene row `row` and column `col`."""

    index: int
    row: int
    probs: Tensor  # (channels, rows, columns) float32 on the model's device; classes: sums to 1 over classes
    valid: np.ndarray  # (rows, columns) True where the scene holds data (`SceneReader.read_masked`)
    col: int = 0


@dataclass(frozen=True)
class Strip:
    """The normalised pixels under one row of windows (of one column tile), cut into its windows."""

    row: int
    windows: Tensor  # (cols, bands, window, window), contiguous
    valid: np.ndarray  # (window, the span's padded width)


def read_strip(reader: SceneReader, grid: WindowGrid, row: int, *, spec: InputSpec | None,
               cols: Span | None = None, pin: bool = False) -> Strip:
    """Window row `row`'s strip under window columns `cols` (default: all), prepared as `spec` says, as the loader
    prepares the training tiles (`eoscale.inputs.prepare`; `spec` None: the raw values, for a model served elsewhere
    that prepares them itself, `eoscale.infer.remote`); its windows in page-locked memory if `pin` (needs CUDA)."""
    cols = cols or Span.of(grid.cols)
    windows, invalid = empty_strip(grid, cols, bands=len(reader.scene.band_names), pin=pin)
    read_windows(reader, grid, row, range(cols.windows), cols=cols, spec=spec, windows=windows.numpy(),
                 invalid=invalid)
    return Strip(row, windows, ~invalid)


def empty_strip(grid: WindowGrid, cols: Span, *, bands: int, pin: bool = False) -> tuple[Tensor, np.ndarray]:
    """Room for a strip: its windows `(cols.windows, bands, window, window)` and nodata mask `(window, cols.size)`."""
    windows = torch.empty((cols.windows, bands, grid.window, grid.window), dtype=torch.float32, pin_memory=pin)
    return windows, np.empty((grid.window, cols.size), dtype=bool)


def read_windows(reader: SceneReader, grid: WindowGrid, row: int, ks: range, *, cols: Span, spec: InputSpec | None,
                 windows: np.ndarray, invalid: np.ndarray) -> None:
    """Windows `ks` (counted from `cols.first`) of window row `row`, prepared as `spec` says (None: raw values, each
    sensor's and each date's bands at the scene's nodata where its masks say it has no data), into `windows[ks]`, and
    the nodata mask of the pixels they cover into `invalid` (the strip's, over the span's padded columns), up to where
    window `ks.stop` starts."""
    stride = grid.cols.stride
    start = ks.start * stride  # first padded column of these windows, from the span's origin
    stop = (ks.stop - 1) * stride + grid.window
    ys = grid.rows.positions(grid.rows.start(row), grid.rows.start(row) + grid.window)
    xs = grid.cols.positions(cols.origin + start, cols.origin + stop)
    top, bottom = int(ys.min()), int(ys.max()) + 1
    left, right = int(xs.min()), int(xs.max()) + 1
    block = reader.read_masked(top, left, bottom - top, right - left)  # validity as GDAL reads the scene's files
    raw, mask = block.pixels, ~block.valid
    if not (len(ys) == bottom - top and ys[0] == top and ys[-1] == bottom - 1):
        raw, mask = raw[:, ys - top], mask[ys - top]  # mirrored rows at the scene's top and bottom
    if not (len(xs) == right - left and xs[0] == left and xs[-1] == right - 1):
        raw, mask = np.take(raw, xs - left, axis=2), np.take(mask, xs - left, axis=1)  # mirrored columns
    # up to where the next windows' pixels start: neighbouring runs of windows overlap, and two threads writing
    # the same bytes of the mask could undo each other's
    own = stop if ks.stop == cols.windows else ks.stop * stride
    invalid[:, start:own] = mask[:, : own - start]
    # windows are cut from the uint16 strip and prepared straight into one contiguous float32 array: one pass
    # instead of normalising first and copying the windows after, which takes several times as long
    cut = _cut(raw, grid.window, stride, axis=2)  # (windows, bands, y, x)
    out = windows[ks.start : ks.stop]
    dates = len(block.date_valid) if isinstance(block, StackWindow) else 1
    groups = _missing(block, mask, ys - top, xs - left, dates)  # [(channels, where they have no data)] or None
    if spec is None:  # raw values (float32 holds every uint16 exactly); the model's server prepares them
        np.copyto(out, cut)
        if groups is not None and (dates > 1 or block.others):  # each sensor's (each date's) bands at nodata where it
            for channels, missing in groups:                      # has none: the server's presence rule reads them
                np.copyto(out[:, channels], reader.scene.nodata, where=_cut(missing, grid.window, stride, axis=1)[:, None])
        return
    x, into = torch.from_numpy(cut), torch.from_numpy(out)
    presence = None
    if groups is not None:
        if dates == 1 and block.others:
            expected = [slice(g.start, g.stop) for g in spec.groups()]
            if [c for c, _ in groups] != expected:
                raise RuntimeError(f"the reader's sensor groups {[c for c, _ in groups]} are not the spec's {expected}")
        missing = np.stack([m for _, m in groups])
        presence = torch.from_numpy(_cut(~missing, grid.window, stride, axis=2))  # (windows, G or T, y, x)
    if dates > 1:  # a stack's windows hold every date's bands: (windows, T, C, y, x) for the preparation
        x, into = x.unflatten(1, (dates, -1)), into.unflatten(1, (dates, -1))
        if presence is not None and block.others:  # (windows, T, G, y, x): each date's sensors
            per_date = [c for c, _ in groups][: len(groups) // dates]
            expected = [slice(g.start, g.stop) for g in spec.groups()]
            if per_date != expected:
                raise RuntimeError(f"the reader's sensor groups {per_date} are not the spec's {expected}")
            presence = presence.unflatten(1, (dates, -1))
        elif presence is not None:
            presence = presence.unsqueeze(2)
    prepare(spec, x, presence=presence, out=into)


def _cut(strip: np.ndarray, window: int, stride: int, *, axis: int) -> np.ndarray:
    """The windows of a strip (..., y, x) along `axis` (its x) as a view (windows, ..., y, window), writable where the
    strip is (so that torch shares its memory without a copy)."""
    view = sliding_window_view(strip, window, axis=axis, writeable=strip.flags.writeable)
    return np.moveaxis(view[..., ::stride, :], -2, 0)


def _missing(block, mask: np.ndarray, ys: np.ndarray, xs: np.ndarray,
             dates: int) -> list[tuple[slice, np.ndarray]] | None:
    """Each presence group of the strip, as (its channels, where it has no data (y, x) over the mirrored strip), or
    None where every group has data everywhere: each date of a stack (its own masks), each sensor's group of a scene
    of several (`MaskedWindow.groups`, in channel order; a stack of several sensors: each date's, date after date),
    else the scene's one mask over every band."""
    if dates > 1 and block.others:  # dates of several sensors: each date's groups (`StackReader.read_masked`)
        groups = []
        for bands, m in block.others:
            (channels,) = _runs(bands)
            groups.append((channels, m[ys][:, xs]))
    elif dates > 1:
        per_date = len(block.pixels) // dates
        missing = ~block.date_valid[:, ys][:, :, xs]
        groups = [(slice(d * per_date, (d + 1) * per_date), missing[d]) for d in range(dates)]
    elif block.others:
        groups = []
        for bands, m in block.groups():
            (channels,) = _runs(bands)  # a sensor's bands are consecutive (`eoscale.sensors.groups`)
            groups.append((channels, m[ys][:, xs]))
    else:
        groups = [(slice(0, len(block.pixels)), mask)]
    return groups if any(m.any() for _, m in groups) else None


def _runs(bands: tuple[int, ...]) -> list[slice]:
    """`bands` as slices of consecutive bands."""
    out, start = [], 0
    for i in range(1, len(bands) + 1):
        if i == len(bands) or bands[i] != bands[i - 1] + 1:
            out.append(slice(bands[start], bands[i - 1] + 1))
            start = i
    return out


def check_scenes(contract: BandContract, scenes: Iterable[Scene], *, what: str = "the checkpoint") -> None:
    """Refuse, in one line and before any map is written, scenes the checkpoint's input spec cannot be executed on: a
    season model (several dates, not a change model) given one date of a place, which it would map as if the other
    dates were clouded. (A checkpoint trained on composites gets its places' raw scenes composited onto the same
    intervals first: `eoscale.raster.fused_season.season_steps`.)"""
    if contract.time_steps == 1 or contract.target == "change":
        return  # a change pair is checked when it is stacked (both dates)
    for scene in scenes:
        if isinstance(scene, SceneStack) and len(scene.steps) < 2:
            raise BandMismatchError(f"{what} is a season model of {contract.time_steps} dates and was given one date "
                                    f"of place {scene.id!r}: give the place's dated scenes (2 to "
                                    f"{contract.time_steps}), or map it with a single-date checkpoint")


def reading_threads(device: torch.device) -> int:
    """Threads to read a process's strips: 1 beside a CPU model, which needs the cores itself; beside a GPU up
    to 8, leaving one of the process's cores to the main thread and one to the part writer (under Slurm,
    `--cpus-per-task` sets how many cores a process has: 12 a GPU on a JUWELS Booster node)."""
    if device.type != "cuda":
        return 1
    return max(1, min(8, len(os.sched_getaffinity(0)) - 2))


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
    scene: Scene,
    grid: WindowGrid,
    *,
    contract: BandContract,
    channels: int | None = None,
    activate: Callable[[Tensor], Tensor] | None = None,
    blocks: range | None = None,
    cols: range | None = None,
    batch_size: int = 16,
    ramp: Ramp = "cosine",
    on_batch: Callable[[int], None] | None = None,
    readers: int = 1,
    cell: int = 1,
) -> Iterator[Block]:
    """Blended row blocks `blocks` (default: all) of `scene`, in order, over column blocks `cols` (default: all,
    i.e. the whole width), its strips read by `readers` threads; see the module docstring.

    `on_batch(windows)` is called after each forward pass. On a CUDA device the forward pass runs under
    bf16 autocast; probabilities and their blending stay float32. The network's output becomes `channels`
    channels by `activate` (default: the contract's, `BandContract.output_channels` and `.activate`). A `network`
    served elsewhere (`eoscale.infer.remote.RemoteNetwork`, `raw_windows` true) is sent the raw windows and their
    validity, several batches in flight, and gives the probabilities back; reading and blending are the same.

    `cell` > 1: the network gives one output a cell of `cell` × `cell` pixels (a window's map is `window / cell`
    wide: an embedding field at its features' stride), and the outputs are blended and handed out on that grid of
    cells (`WindowGrid.coarsened`): a block's rows, columns and validity are the cells' (a cell is valid where any
    of its pixels is).
    """
    if batch_size < 1:
        raise InputError(f"batch size {batch_size}: give at least 1")
    blocks = range(grid.rows.count) if blocks is None else blocks
    if len(blocks) == 0:
        return
    remote = getattr(network, "raw_windows", False)
    if isinstance(scene, SceneStack) and not remote:  # a temporal model is given its dates (eoscale.infer.stacked)
        network = for_stack(network, scene.dates)
    device = torch.device("cpu") if remote else next(network.parameters()).device
    first = grid.first_window_row(blocks.start)
    span = Span.of(grid.cols, cols)
    out = grid.coarsened(cell)  # the grid the outputs are blended on: the pixels' own, or cells of `cell` pixels
    out_span = Span.of(out.cols, cols)
    classes = contract.output_channels() if channels is None else channels
    accumulator = RowAccumulator(out, classes, first_row=first, cols=out_span, kind=ramp, device=device)
    spec = None if remote else contract.spec()  # a model served elsewhere prepares the raw windows itself
    pin = device.type == "cuda"  # windows read into page-locked memory go to the GPU without another copy
    strips = read_ahead(scene, grid, range(first, blocks.stop), cols=span, spec=spec, pin=pin, threads=readers)
    one_shape = device.type == "cpu" and not remote  # see the module docstring
    batches = _batches(strips, span.windows, batch_size, one_shape=one_shape)
    days = (np.array([(d - EPOCH).days for d in scene.dates], np.int32)  # a stack's scenes all have dates
            if remote and getattr(network, "takes_dates", False) and isinstance(scene, SceneStack) else None)
    forwarded = (_served(network, batches, grid, days) if remote
                 else _forward(network, batches, device, pin, activate or contract.activate,
                               fill=batch_size if one_shape else 0))
    last_col = span.windows - 1
    try:
        for batch, probs in forwarded:
            if probs.shape[-1] != out.window:
                raise InputError(f"the network gives maps {probs.shape[-1]} wide for windows of {grid.window} pixels; "
                                 f"blending cells of {cell} needs {out.window}")
            if probs.shape[1] != classes:
                raise InputError(f"the model gives {probs.shape[1]} classes but its checkpoint's class table has {classes}"
                                 if contract.target == "classes" else
                                 f"the model gives {probs.shape[1]} channels but its {contract.target!r} maps need {classes}")
            finished: list[Block] = []
            with torch.inference_mode():
                weighted = probs.mul_(accumulator.weights)
                for i, (strip, k) in enumerate(batch):
                    accumulator.add(strip.row, out_span.first + k, weighted[i])
                    if k == last_col:
                        valid = strip.valid if cell == 1 else _cell_validity(strip, grid, span, cell)
                        finished.extend(_finish(accumulator, out, out_span, strip.row, valid, blocks))
            if on_batch is not None:
                on_batch(len(batch))
            yield from finished  # outside inference_mode: a generator's context would leak into its consumer
    finally:
        strips.close()


def _forward(network: nn.Module, batches: Iterable[list[tuple[Strip, int]]], device: torch.device,
             pin: bool, activate: Callable[[Tensor], Tensor], *, fill: int = 0
             ) -> Iterator[tuple[list[tuple[Strip, int]], Tensor]]:
    """(batch, `activate(logits)`: class probabilities, float32, for a class model) for each batch, by `network` in
    this process. `fill` > 0: every forward pass takes max(`fill`, 2) windows, a shorter batch filled up with
    copies of its last window (see the module docstring; a batch of one would take other kernels again)."""
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    for batch in batches:
        x = _stack(batch)
        size = max(fill or len(batch), 2)
        if len(batch) < size:  # a lone window on a GPU goes in twice as well (torch's kernels for one differ)
            x = torch.cat([x, x[-1:].expand(size - len(batch), *x.shape[1:])])
        if pin:
            x = (x if x.is_pinned() else x.pin_memory()).to(device, non_blocking=True)
        with torch.inference_mode(), autocast:
            logits = network(x)
        with torch.inference_mode():
            probs = activate(logits[: len(batch)])
        yield batch, probs


def _served(network, batches: Iterable[list[tuple[Strip, int]]], grid: WindowGrid,
            days: np.ndarray | None = None) -> Iterator[tuple[list[tuple[Strip, int]], Tensor]]:
    """(batch, class probabilities) for each batch, in order, from a model served elsewhere: the raw windows and
    their validity (and a temporal model's stack's `days`) go out as requests, up to `network.in_flight` of them at
    once, so the server batches and computes while this process reads, sends and blends."""
    stride, window = grid.cols.stride, grid.window
    pending: deque = deque()
    for batch in batches:
        windows = _stack(batch).numpy()
        valid = np.stack([strip.valid[:, k * stride : k * stride + window] for strip, k in batch])
        dates = None if days is None else np.broadcast_to(days, (len(windows), len(days))).copy()
        pending.append((batch, network.submit(windows, valid, *(() if dates is None else (dates,)))))
        if len(pending) >= network.in_flight:
            done, answer = pending.popleft()
            yield done, _writable(answer.result())
    while pending:
        done, answer = pending.popleft()
        yield done, _writable(answer.result())


def _writable(probs: np.ndarray) -> Tensor:
    """An answer as a tensor the blending may weight in place (a client's answers view its read-only buffers)."""
    return torch.from_numpy(probs if probs.flags.writeable else probs.copy())


def _batches(strips: Iterable[Strip], windows: int, size: int, *, one_shape: bool = False
             ) -> Iterator[list[tuple[Strip, int]]]:
    """(strip, window) batches of at most `size`, in grid order. `one_shape` (the CPU): batches of `size` across
    strips, only the last one shorter. Otherwise a strip of at least `size` windows is split into batches as equal
    as possible, so that a batch is a slice of one strip's windows: it goes to the model (or, from page-locked
    memory, to the GPU) without a copy; narrower strips share batches."""
    if one_shape or windows < size:
        yield from batched(((strip, k) for strip in strips for k in range(windows)), size)
        return
    runs = even_ranges(windows, -(-windows // size))
    for strip in strips:
        for run in runs:
            yield [(strip, k) for k in run]


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


def _finish(accumulator: RowAccumulator, grid: WindowGrid, span: Span, row: int, valid: np.ndarray,
            blocks: range) -> Iterator[Block]:
    """Row block `row` of `grid`, if it is one of `blocks`; `valid` the validity of the strip under window row `row`
    (of `grid`'s pixels: the scene's, or cells of several)."""
    probs = accumulator.finish_row(row)
    if row not in blocks:  # a halo row, final in another process's part
        return
    start, stop = grid.block_rows(row)
    top = grid.rows.start(row)
    yield Block(row, start, probs, valid[start - top : stop - top, span.out], col=span.out_start)


def _cell_validity(strip: Strip, grid: WindowGrid, span: Span, cell: int) -> np.ndarray:
    """The strip's validity on cells of `cell` × `cell` pixels (whole cells: `WindowGrid.coarsened`): a cell is valid
    where any of its scene pixels is (pixels mirrored past the scene's edges count for nothing)."""
    valid = strip.valid.copy()
    top = grid.rows.start(strip.row)
    valid[: max(0, -top)] = False
    valid[max(0, grid.height - top) :] = False
    valid[:, : max(0, -span.origin)] = False
    valid[:, max(0, grid.width - span.origin) :] = False
    rows, cols = valid.shape[0] // cell, valid.shape[1] // cell
    return valid.reshape(rows, cell, cols, cell).any(axis=(1, 3))


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class read_ahead(Iterator[Strip]):  # noqa: N801 (used like a function)
    """The strips of window rows `rows` over window columns `cols`, in order, read by `threads` background
    threads up to `READ_AHEAD` strips beyond the one being read; a reading error comes through in order.

    Each thread reads its own share of every strip, a run of neighbouring windows, through its own
    `SceneReader`: a GDAL dataset must not be used by two threads at once, and a thread that keeps to the same
    columns finds the file tiles it decoded for one strip in its reader's block cache for the next (threads
    dealt whole strips would each decode most tiles again). Only the tiles where two shares meet are decoded
    twice. The standard library's pools do the threading: one single-thread pool per share, so that a share
    always goes to its thread.
    """

    def __init__(self, scene: Scene, grid: WindowGrid, rows: Iterable[int], *, cols: Span, spec: InputSpec | None,
                 pin: bool = False, threads: int = 1) -> None:
        if threads < 1:
            raise InputError(f"{threads} reading threads: give at least 1")
        self._grid, self._cols, self._pin = grid, cols, pin
        self._bands = len(scene.band_names)
        self._spec = spec
        self._rows = iter(rows)
        threads = min(threads, cols.windows)
        self._shares = even_ranges(cols.windows, threads)
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix="eoscale-read") for _ in self._shares]
        self._readers: list[SceneReader | StackReader] = []
        self._pending: deque[tuple[int, Tensor, np.ndarray, list[Future[None]]]] = deque()
        try:
            self._readers.extend(open_reader(scene) for _ in self._shares)
            for _ in range(READ_AHEAD + 1):
                self._submit()
        except BaseException:
            self.close()
            raise

    def _submit(self) -> None:
        row = next(self._rows, None)
        if row is None:
            return
        windows, invalid = empty_strip(self._grid, self._cols, bands=self._bands, pin=self._pin)
        futures = [pool.submit(read_windows, reader, self._grid, row, share, cols=self._cols, spec=self._spec,
                               windows=windows.numpy(), invalid=invalid)
                   for pool, reader, share in zip(self._pools, self._readers, self._shares, strict=True)]
        self._pending.append((row, windows, invalid, futures))

    def __next__(self) -> Strip:
        if not self._pending:
            raise StopIteration
        row, windows, invalid, futures = self._pending.popleft()
        for future in futures:
            future.result()
        self._submit()
        return Strip(row, windows, ~invalid)

    def close(self) -> None:
        for *_, futures in self._pending:
            for future in futures:
                future.cancel()
        for pool in self._pools:
            pool.shutdown(wait=True)
        for reader in self._readers:
            reader.close()


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
