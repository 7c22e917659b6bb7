"""The window grid and the blending: every pixel covered, weights never zero, no seams, parts that agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.contract import BandContract
from eoscale.infer.blend import axis_weight_sums, ramp
from eoscale.infer.predict import predict_blocks
from eoscale.infer.windows import AxisGrid, WindowGrid, reflect
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene
from tests.checkpoints import MEAN, STD, TABLE


@pytest.mark.parametrize("kind", ["cosine", "linear"])
@pytest.mark.parametrize("window,overlap", [(32, 8), (32, 0), (50, 25), (7, 3)])
def test_ramp_is_never_zero_and_cosine_sums_to_one(kind, window, overlap):
    weights = ramp(window, overlap, kind)
    assert weights.shape == (window,) and weights.min() > 0 and weights.max() <= 1
    assert weights.max() == 1 or 2 * overlap >= window
    np.testing.assert_array_equal(weights, weights[::-1])
    if kind == "cosine" and overlap:
        # a window's ramp down plus its neighbour's ramp up over the overlap: a partition of unity
        np.testing.assert_allclose(weights[window - overlap :] + weights[:overlap], 1.0, atol=1e-6)


@pytest.mark.parametrize("length", [1, 2, 31, 32, 33, 301, 347])
@pytest.mark.parametrize("window,overlap", [(32, 0.0), (32, 0.25), (50, 0.5), (16, 0.8)])
def test_grid_covers_every_pixel_with_context(length, window, overlap):
    axis = AxisGrid.make(length, window, overlap)
    assert axis.stride == window - round(overlap * window) and axis.margin == (window - axis.stride) // 2
    assert axis.start(0) == -axis.margin
    assert axis.start(axis.count - 1) + window >= length + axis.margin  # the last pixel has the margin after it
    assert axis.count == 1 or axis.start(axis.count - 2) + window < length + axis.margin  # and no window is spare
    sums = axis_weight_sums(axis, ramp(window, window - axis.stride))
    assert sums[axis.margin : axis.margin + length].min() > 0


def test_reflect_mirrors_without_repeating_the_edge():
    np.testing.assert_array_equal(reflect(np.arange(-3, 8), 5), [3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1])
    np.testing.assert_array_equal(reflect(np.arange(-2, 3), 1), [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(reflect(np.arange(-5, 9), 2), [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0])


@pytest.mark.parametrize("height,window,overlap", [(301, 32, 0.25), (100, 32, 0.5), (33, 16, 0.8), (5, 32, 0.25)])
def test_blocks_partition_the_rows_and_halo_rows_are_enough(height, window, overlap):
    grid = WindowGrid.make(height, 40, window=window, overlap=overlap)
    rows = np.concatenate([np.arange(*grid.block_rows(i)) for i in range(grid.rows.count)])
    np.testing.assert_array_equal(rows, np.arange(height))
    for i in range(grid.rows.count):
        start, stop = grid.block_rows(i)
        touching = [j for j in range(grid.rows.count)
                    if grid.rows.start(j) < grid.rows.start(i) + grid.rows.stride
                    and grid.rows.start(j) + window > grid.rows.start(i)]
        assert min(touching) >= grid.first_window_row(i), (i, touching)
        assert max(touching) <= i
    for parts in (1, 2, 3, 7):
        ranges = grid.split_blocks(parts)
        assert [b for r in ranges for b in r] == list(range(grid.rows.count))


@pytest.mark.parametrize("width,window,overlap", [(347, 32, 0.25), (1000, 128, 0.5), (90, 16, 0.8), (5, 32, 0.25)])
@pytest.mark.parametrize("pixels", [1, 64, 200, 10_000])
def test_column_tiles_cover_the_columns_once_within_their_width(width, window, overlap, pixels):
    from eoscale.infer.windows import Span

    grid = WindowGrid.make(40, width, window=window, overlap=overlap)
    tiles = grid.column_tiles(pixels)
    assert [b for t in tiles for b in t] == list(range(grid.cols.count))
    spans = [Span.of(grid.cols, t) for t in tiles]
    # the tiles' output columns partition the scene's columns
    assert spans[0].out_start == 0 and spans[-1].out_stop == width
    assert all(a.out_stop == b.out_start for a, b in zip(spans, spans[1:], strict=False))
    for span in spans:
        # within the asked width, unless one column block and its halo alone are wider
        assert span.size <= pixels or len(span.blocks) == 1
        assert span.first == grid.cols.first_window(span.blocks.start)
    if pixels >= grid.cols.span:
        assert len(tiles) == 1
    assert grid.column_tiles(None) == [range(grid.cols.count)]


class PerPixel(torch.nn.Module):
    """A 1×1 convolution: translation-equivariant by construction, so blending must not change it."""

    def __init__(self, bands: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(bands, classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 3.0


def _contract(scene) -> BandContract:
    return BandContract(tuple(scene.band_names), MEAN, STD, 32, tuple(TABLE.to_records()))


def _whole_scene(network, scene, contract) -> tuple[torch.Tensor, np.ndarray]:
    with SceneReader(scene) as reader:
        block = reader.read_masked(0, 0, scene.height, scene.width)
    raw, invalid = block.pixels, ~block.valid
    x = (raw.astype(np.float32) - np.float32(MEAN)[:, None, None]) / np.float32(STD)[:, None, None]
    x[:, invalid] = 0
    with torch.no_grad():
        return network(torch.from_numpy(x)[None]).softmax(dim=1)[0], ~invalid


@pytest.mark.parametrize("window,overlap,batch_size", [(32, 0.25, 16), (50, 0.5, 3), (32, 0.0, 1), (64, 0.75, 7)])
def test_no_seams_with_a_per_pixel_model(scene, window, overlap, batch_size):
    """Blended tiled prediction of a translation-equivariant model equals one forward pass over the scene."""
    source = open_scene(str(scene))
    contract = _contract(source)
    network = PerPixel(len(source.bands), len(TABLE)).eval()
    grid = WindowGrid.make(source.height, source.width, window=window, overlap=overlap)
    blocks = list(predict_blocks(network, source, grid, contract=contract,
                                 batch_size=batch_size))
    assert [b.row for b in blocks] == sorted(b.row for b in blocks)
    probs = torch.cat([b.probs for b in blocks], dim=1)
    valid = np.concatenate([b.valid for b in blocks])
    expected, expected_valid = _whole_scene(network, source, contract)
    assert probs.shape == expected.shape == (len(TABLE), source.height, source.width)
    assert torch.allclose(probs, expected, atol=1e-5, rtol=0)
    assert torch.equal(probs.argmax(dim=0), expected.argmax(dim=0))
    np.testing.assert_array_equal(valid, expected_valid)
    assert not valid[40:90, 0:70].any() and valid.sum() == source.height * source.width - 50 * 70


def test_parts_with_halo_rows_equal_the_whole(scene):
    """Blocks predicted by three 'processes' (each starting a few window rows early, each reading with three
    threads, so each cuts its batches elsewhere) are bit-for-bit the whole's, read with one, at one batch size: the
    bytes depend on the batch size through the CPU libraries' kernels (the suite met batches of 5 windows one ulp
    from batches of 16 in a process of one thread), not on the split."""
    source = open_scene(str(scene))
    network = PerPixel(len(source.bands), len(TABLE)).eval()
    contract = _contract(source)
    grid = WindowGrid.make(source.height, source.width, window=32, overlap=0.5)
    whole = torch.cat([b.probs for b in predict_blocks(network, source, grid, contract=contract, batch_size=5)], 1)
    parts = [list(predict_blocks(network, source, grid, contract=contract, blocks=r, batch_size=5,
                                 readers=3))
             for r in grid.split_blocks(3)]
    assert [b.index for p in parts for b in p] == list(range(grid.rows.count))
    assert torch.equal(torch.cat([b.probs for p in parts for b in p], dim=1), whole)


class ShapeLog(PerPixel):
    """PerPixel that notes the number of windows of each forward pass."""

    def __init__(self, bands: int, classes: int) -> None:
        super().__init__(bands, classes)
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.append(x.shape[0])
        return super().forward(x)


@pytest.mark.parametrize("batch_size", [1, 5, 16])
def test_every_forward_pass_on_the_cpu_has_one_shape_however_the_scene_is_split(scene, batch_size):
    """guards the map's independence of the split: the CPU libraries choose kernels by shape (one ulp apart between
    batch shapes, seen on an AMD EPYC), so rows dealt to processes, column tiles, strips sharing a batch and the last
    batch must not change the shape a window goes through the model in; the filled-up batches' extra outputs are
    dropped (the parts equal the whole)."""
    source = open_scene(str(scene))
    contract = _contract(source)
    grid = WindowGrid.make(source.height, source.width, window=32, overlap=0.5)
    network = ShapeLog(len(source.bands), len(TABLE)).eval()
    whole = torch.cat([b.probs for b in predict_blocks(network, source, grid, contract=contract,
                                                       batch_size=batch_size)], 1)
    tiles = grid.column_tiles(100)
    assert len(tiles) > 1
    for rows in grid.split_blocks(3):
        for cols in tiles:
            for block in predict_blocks(network, source, grid, contract=contract, blocks=rows, cols=cols,
                                        batch_size=batch_size):
                part = whole[:, block.row : block.row + block.probs.shape[1],
                             block.col : block.col + block.probs.shape[2]]
                assert torch.equal(block.probs, part)
    assert set(network.sizes) == {max(batch_size, 2)}
