"""Writing one whole shard of a sharded Zarr v3 array from a worker: its chunks encoded in a plain loop, the
shard object (chunks in the order zarr lays them out, then zarr's index with its CRC32C) put through the
array's store in one call.

Why not `array[a:b] = data`: zarr's codec pipeline sends every inner chunk through `asyncio.to_thread` and
its event loop (a thread hop and a loop wake-up per chunk, 512 a shard of images and labels) and checks each
chunk against the fill value apart from encoding it; profiled (py-spy, one process, a 256-tile shard of
10 × 64² uint16 tiles) that cost 1.58× numcodecs' Blosc encode of the same chunks, the encode itself being
the same numcodecs call. Here the chunks go through the very codec objects zarr built from the array's
metadata, in the same order with the same empty-chunk rule, so the shard's bytes are the ones zarr writes
(tests/ingest/test_shards.py compares them byte for byte and reads them back through zarr). The zarr internals
this needs are `eoscale._compat.zarr`'s; outside the zarr versions checked there, zarr writes every shard.

It writes any array with one tile per chunk along the first axis, whatever the tile's shape: the images of a
store, (tile, time, band, y, x), as well as its labels, (tile, y, x).

Arrays whose layout this does not know (codecs other than bytes + Blosc/Zstd inside the shard, an index at
the start, chunks that split more than the first axis) are written by zarr as before.
"""

from __future__ import annotations

import sys

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
from zarr.codecs.sharding import ShardingCodecIndexLocation

from eoscale._compat import zarr as zarr_compat

_EMPTY = np.iinfo(np.uint64).max  # an index entry of a chunk the shard does not hold


def write_whole_shard(array: zarr.Array, shard: int, data: np.ndarray) -> None:
    """Write `data` as shard number `shard` (along the first axis) of `array`: rows shard × shard_rows onwards,
    the whole shard (fewer rows only for the array's last shard)."""
    rows = array.shards[0] if array.shards else array.chunks[0]
    start = shard * rows
    if len(data) != min(rows, array.shape[0] - start):
        raise ValueError(f"shard {shard} of {array.path!r} holds {min(rows, array.shape[0] - start)} rows, got {len(data)}")
    encoders = _chunk_encoders(array, data.dtype)
    if encoders is None:
        array[start : start + len(data)] = data
        return
    sharding: ShardingCodec = array.metadata.codecs[0]
    chunks_per_shard = tuple(s // c for s, c in zip(array.shards, sharding.chunk_shape, strict=True))
    index = np.full(chunks_per_shard + (2,), _EMPTY, dtype="<u8")
    fill = array.metadata.fill_value
    skip_empty = not array.config.write_empty_chunks
    flat = data.reshape(len(data), -1)
    empty = np.zeros(len(data), dtype=bool) if not skip_empty else ~flat.any(axis=1) if fill == 0 else (flat == fill).all(axis=1)
    parts, offset = [], 0
    for coords in zarr_compat.morton_order_iter(chunks_per_shard):
        i = coords[0]
        if i >= len(data) or empty[i]:
            continue
        encoded = np.ascontiguousarray(data[i : i + 1])
        for encode in encoders:
            encoded = encode(encoded)
        encoded = memoryview(encoded).cast("B")
        index[coords] = (offset, len(encoded))
        parts.append(encoded)
        offset += len(encoded)
    where = array.store_path / array.metadata.encode_chunk_key((shard,) + (0,) * (array.ndim - 1))
    if not parts:  # zarr keeps no object for a shard of empty chunks
        zarr_compat.sync(where.delete())
        return
    index_bytes = index.tobytes()
    parts += [index_bytes, np.array([_crc32c(index_bytes)], dtype="<u4").tobytes()]
    zarr_compat.sync(where.set(zarr_compat.default_buffer_prototype().buffer.from_bytes(b"".join(parts))))


def _crc32c(data: bytes) -> int:
    import google_crc32c  # what zarr's Crc32cCodec uses

    return google_crc32c.value(data)


def _chunk_encoders(array: zarr.Array, dtype: np.dtype) -> list | None:
    """The numcodecs encoders zarr applies to each inner chunk of `array`, in order, or None when the array's
    layout is not one this module writes (see the module docstring)."""
    if array.metadata.zarr_format != 3 or array.shards is None or np.dtype(dtype) != array.dtype:
        return None
    if not zarr_compat.whole_shards():
        return None
    codecs = array.metadata.codecs
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        return None
    sharding = codecs[0]
    if (sharding.index_location != ShardingCodecIndexLocation.end
            or len(sharding.index_codecs) != 2
            or not _little_endian_bytes(sharding.index_codecs[0]) or not isinstance(sharding.index_codecs[1], Crc32cCodec)):
        return None
    if sharding.chunk_shape[0] != 1 or tuple(sharding.chunk_shape[1:]) != tuple(array.shape[1:]):
        return None
    inner = sharding.codecs
    if not inner or not _little_endian_bytes(inner[0]) or np.dtype(dtype).byteorder == ">":
        return None
    encoders = []
    for codec in inner[1:]:
        # the numcodecs objects zarr itself builds from the codec's configuration
        numcodec = zarr_compat.numcodec(codec)
        if numcodec is None:
            return None
        encoders.append(numcodec.encode)
    return encoders


def _little_endian_bytes(codec: object) -> bool:
    return isinstance(codec, BytesCodec) and sys.byteorder == "little" and (
        codec.endian is None or codec.endian.value == "little")
