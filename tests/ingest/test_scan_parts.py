"""A scene scanned in runs of window rows by several tasks gives the plan the fractions one scan gives, and shard
writers reuse one open reader of a scene between tasks only while its files are unchanged (issue 15: a full-size
scene is scanned by every worker, and consecutive shards decode the blocks they share once)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from eoscale.ingest.scan import scan_parts, scan_validity
from eoscale.ingest.writer import _held, close_readers, open_reader
from eoscale.raster.sources import open_scene
from tests.rasters import write_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("scan") / "scene.tif"
    # nodata over the first 300 of 520 rows: the first of two or more parts holds only nodata
    write_scene(path, height=520, width=300, band_names=["B04", "B08"], nodata_box=(slice(0, 300), slice(0, 300)))
    return open_scene(str(path))


def test_rows_of_windows_are_cut_into_runs_that_cover_them_once():
    assert scan_parts(520, 32, 32, 3) == [(0, 5), (5, 11), (11, 16)]
    assert scan_parts(520, 32, 16, 1) == [(0, 31)]
    assert scan_parts(64, 32, 32, 8) == [(0, 1), (1, 2)]  # no more parts than rows of windows
    parts = scan_parts(10980, 64, 64, 4)
    assert parts[0][0] == 0 and parts[-1][1] == 171 and all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))


@pytest.mark.parametrize("tile_size, stride", [(32, 32), (48, 20)])
def test_a_scan_in_parts_equals_the_scan_of_the_whole_scene(scene, tmp_path, tile_size, stride):
    (tmp_path / "one").mkdir()
    whole, any_whole = scan_validity(scene, 0, tile_size=tile_size, stride=stride, progress=str(tmp_path / "one"))
    assert any_whole and 0 < whole.mean() < 1
    for parts in (2, 3, len(whole)):
        progress = tmp_path / f"parts{parts}"
        progress.mkdir()
        results = [scan_validity(scene, 0, tile_size=tile_size, stride=stride, progress=str(progress), rows=rows)
                   for rows in scan_parts(scene.height, tile_size, stride, parts)]
        np.testing.assert_array_equal(np.concatenate([f for f, _ in results]), whole)
        assert not results[0][1]  # the first rows hold only nodata
        assert any(a for _, a in results)
        # a resumed ingest reads each part back from its progress file
        again = [scan_validity(scene, 0, tile_size=tile_size, stride=stride, progress=str(progress), rows=rows)
                 for rows in scan_parts(scene.height, tile_size, stride, parts)]
        assert [a for _, a in again] == [a for _, a in results]
        np.testing.assert_array_equal(np.concatenate([f for f, _ in again]), whole)


def test_a_shard_writer_reuses_its_reader_until_the_scene_or_its_files_change(scene, tmp_path):
    try:
        first = open_reader(scene)
        assert open_reader(scene) is first
        stat = os.stat(scene.paths[0])
        os.utime(scene.paths[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file was rewritten
        second = open_reader(scene)
        assert second is not first and first._files[0].closed
        other = tmp_path / "other.tif"
        write_scene(other, height=64, width=64, band_names=["B04", "B08"], nodata_box=None)
        third = open_reader(open_scene(str(other)))
        assert second._files[0].closed and len(_held) == 1  # one open reader a thread
        np.testing.assert_array_equal(third.read(0, 0, 8, 8).shape, (2, 8, 8))
    finally:
        close_readers()
    assert not _held and third._files[0].closed
