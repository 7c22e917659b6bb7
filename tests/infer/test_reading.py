"""Reading a scene's strips in threads: the same windows and nodata masks as one reader, in order, errors through."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from eoscale.bands import SENTINEL2_NAMES
from eoscale.errors import InputError
from eoscale.infer.predict import read_ahead, read_strip
from eoscale.infer.windows import Span, WindowGrid
from eoscale.inputs.spec import infer
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene
from tests.checkpoints import MEAN, STD
from tests.rasters import damaged_copy

NORM = {"spec": infer(bands=SENTINEL2_NAMES, sensor="sentinel-2", record=None, steps=1, tile_size=32,
                      nodata=0).with_statistics(MEAN, STD)}


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
@pytest.mark.parametrize("tile", [None, range(2, 6)])
def test_threads_read_what_one_reader_reads(scene, threads, tile):
    """Every strip (mirrored edges, nodata, a column tile with its halo) equals `read_strip`'s, bit for bit."""
    source = open_scene(str(scene))
    grid = WindowGrid.make(source.height, source.width, window=32, overlap=0.25)
    span = Span.of(grid.cols, tile)
    with SceneReader(source) as reader:
        expected = [read_strip(reader, grid, j, **NORM, cols=span) for j in range(grid.rows.count)]
    strips = read_ahead(source, grid, range(grid.rows.count), cols=span, **NORM, threads=threads)
    got = list(strips)
    strips.close()
    assert [s.row for s in got] == list(range(grid.rows.count))
    assert any((~s.valid).any() for s in expected)  # the scene's nodata rectangle is under some strips
    for s, e in zip(got, expected, strict=True):
        assert s.windows.shape == e.windows.shape == (span.windows, len(MEAN), 32, 32)
        np.testing.assert_array_equal(s.windows.numpy(), e.windows.numpy())
        np.testing.assert_array_equal(s.valid, e.valid)


def test_a_reading_error_comes_through_and_no_thread_is_left(scene, tmp_path):
    source = open_scene(str(damaged_copy(scene, tmp_path)))
    grid = WindowGrid.make(source.height, source.width, window=32, overlap=0.25)
    before = threading.active_count()
    strips = read_ahead(source, grid, range(grid.rows.count), cols=Span.of(grid.cols), **NORM,
                        threads=3)
    with pytest.raises(InputError, match="damaged.tif' could not be read"):
        list(strips)
    strips.close()
    assert threading.active_count() == before
