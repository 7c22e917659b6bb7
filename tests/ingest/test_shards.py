"""eoscale.store.writer (eoscale.ingest.shards before) writes a shard with the very bytes zarr writes for the same data, and zarr reads it back."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from eoscale.ingest.skeleton import CODECS, make_codec
from eoscale.store.writer import _chunk_encoders, write_whole_shard

TILES, SHARD = 21, 8  # three shards, the last one partial


def _data(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    data = (rng.integers(0, 50, (TILES, *shape)) + 900 * (np.arange(TILES) % 3)[(...,) + (None,) * len(shape)])
    data = data.astype(dtype)
    data[[2, 17]] = 0  # chunks at the fill value: zarr stores none
    return data


def _pair(tmp_path, codec: str, dtype: str, shape: tuple[int, ...], chunks: tuple[int, ...] | None = None):
    kw = dict(shape=(TILES, *shape), chunks=chunks or (1, *shape), shards=(SHARD, *shape), dtype=dtype, fill_value=0,
              compressors=make_codec(codec, typesize=np.dtype(dtype).itemsize))
    return zarr.create_array(tmp_path / "zarr.zarr", **kw), zarr.create_array(tmp_path / "eoscale.zarr", **kw)


@pytest.mark.parametrize("codec", CODECS)
# images of schema version 1 (band, y, x), of version 2 (time, band, y, x) with one and with several dates; labels
@pytest.mark.parametrize("dtype,shape", [("uint16", (3, 8, 8)), ("uint16", (1, 3, 8, 8)), ("uint16", (2, 3, 8, 8)),
                                         ("uint8", (8, 8))])
def test_a_shard_holds_the_bytes_zarr_writes(tmp_path, codec, dtype, shape):
    data = _data(dtype, shape)
    by_zarr, ours = _pair(tmp_path, codec, dtype, shape)
    assert _chunk_encoders(ours, data.dtype) is not None  # the direct path, not zarr's
    by_zarr[:] = data
    for shard in range(-(-TILES // SHARD)):
        write_whole_shard(ours, shard, data[shard * SHARD : (shard + 1) * SHARD])
    for shard in range(-(-TILES // SHARD)):
        key = ours.metadata.encode_chunk_key((shard,) + (0,) * len(shape))
        assert (tmp_path / "eoscale.zarr" / key).read_bytes() == (tmp_path / "zarr.zarr" / key).read_bytes()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "eoscale.zarr", mode="r")[:], data)


def test_a_shard_of_fill_values_leaves_no_object_as_in_zarr(tmp_path):
    by_zarr, ours = _pair(tmp_path, "blosc-zstd", "uint8", (8, 8))
    write_whole_shard(ours, 1, np.ones((SHARD, 8, 8), np.uint8))
    write_whole_shard(ours, 1, np.zeros((SHARD, 8, 8), np.uint8))
    by_zarr[SHARD : 2 * SHARD] = 0
    assert sorted(p.name for p in (tmp_path / "eoscale.zarr").rglob("*") if p.is_file()) == ["zarr.json"]


def test_a_layout_it_does_not_know_is_written_by_zarr(tmp_path):
    data = _data("uint16", (3, 8, 8))
    _, ours = _pair(tmp_path, "zstd", "uint16", (3, 8, 8), chunks=(1, 1, 8, 8))  # chunks split the bands too
    assert _chunk_encoders(ours, data.dtype) is None
    for shard in range(-(-TILES // SHARD)):
        write_whole_shard(ours, shard, data[shard * SHARD : (shard + 1) * SHARD])
    np.testing.assert_array_equal(ours[:], data)


def test_a_shard_of_the_wrong_length_is_refused(tmp_path):
    _, ours = _pair(tmp_path, "none", "uint8", (8, 8))
    with pytest.raises(ValueError, match="holds 5 rows"):
        write_whole_shard(ours, 2, np.zeros((SHARD, 8, 8), np.uint8))


def test_the_old_import_path_still_works():
    from eoscale.ingest import shards

    assert shards.write_whole_shard is write_whole_shard
