"""eoscale._compat.zarr: the zarr internals the whole-shard writer relies on are where it expects them in the
checked versions, and outside them the writer falls back to zarr's public path (same bytes), said once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

from eoscale import _compat
from eoscale._compat import Checked
from eoscale._compat import zarr as zarr_compat
from eoscale.store.writer import _chunk_encoders, write_whole_shard


def test_the_installed_zarr_is_a_checked_one():
    assert zarr_compat.CHECKED.holds(), f"zarr {zarr.__version__}: check eoscale/_compat/zarr.py and widen CHECKED"
    assert zarr_compat.whole_shards()


def test_the_private_names_are_there():
    assert callable(zarr_compat.default_buffer_prototype().buffer.from_bytes)
    assert list(zarr_compat.morton_order_iter((2, 1))) == [(0, 0), (1, 0)]

    async def answer():
        return 42

    assert zarr_compat.sync(answer()) == 42
    blosc = zarr_compat.numcodec(BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=2))
    zstd = zarr_compat.numcodec(ZstdCodec(level=3))
    data = np.arange(64, dtype=np.uint16)
    for codec in (blosc, zstd):
        assert codec is not None and bytes(codec.decode(codec.encode(data))) == data.tobytes()
    assert zarr_compat.numcodec(BytesCodec()) is None


def test_outside_the_checked_versions_zarr_writes_the_shards_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(zarr_compat, "CHECKED", Checked("zarr", "0.1", "0.2", zarr_compat.CHECKED.what))
    monkeypatch.setattr(_compat, "_WARNED", set())
    array = zarr.create_array(tmp_path / "a.zarr", shape=(4, 2, 8, 8), chunks=(1, 2, 8, 8), shards=(4, 2, 8, 8),
                              dtype="uint16", fill_value=0, compressors=[ZstdCodec(level=3)])
    data = np.arange(4 * 2 * 64, dtype=np.uint16).reshape(4, 2, 8, 8)
    with pytest.warns(UserWarning, match=r"zarr .* is outside >=0\.1,<0\.2.*array assignment"):
        assert _chunk_encoders(array, data.dtype) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        write_whole_shard(array, 0, data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[:], data)
