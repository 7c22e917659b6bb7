"""Reading whole tiles of a tile store's arrays straight from their shard files.

Why not random access through zarr (measured on the 2-core development machine, 10×64×64 uint16 tiles with their
labels, blosc-zstd): one tile per read through zarr came at about 380–450 tiles/s per process; whole shards per
read through zarr at about 1,700–2,700 tiles/s; decoding each shard's file directly (one file read, the shard
index, then the chunks' own codec from numcodecs) at about 3,200–6,400 tiles/s. `ShardReader` takes that direct
path whenever the array has the plain layout `eoscale ingest` writes (one tile per inner chunk, whatever the
tile's shape), and asks zarr otherwise.

`open_images` reads a store's images as (time, band, y, x) tiles whatever its schema version: a version-1 store's
(band, y, x) tiles are the same bytes, read as one date (a reshape, nothing rewritten).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr

from eoscale.errors import StoreError
from eoscale.store import schema

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: map every page of the file at once
_EMPTY = 2**64 - 1  # a shard index entry of two of these marks a chunk never written (it reads as fill_value)


class ShardReader:
    """Reads whole tiles (along the first axis) of one sharded Zarr v3 array: `chunks` gives a run's tiles as
    stored (encoded, on the direct path), `decode` writes one of them into an array of the tile's shape."""

    def __init__(self, path: str | os.PathLike, *, direct: bool = True, tile_shape: tuple[int, ...] | None = None) -> None:
        """`direct=False` reads whole runs through zarr's public API even where the direct path applies.
        `tile_shape` reads each tile in another shape of the same size (a version-1 store's image tiles as one
        date: (1, band, y, x)); by default, the stored one."""
        self.array = zarr.open_array(str(path), mode="r")
        stored = tuple(self.array.shape[1:])
        self.tile_shape = stored if tile_shape is None else tuple(int(n) for n in tile_shape)
        if math.prod(self.tile_shape) != math.prod(stored):
            raise ValueError(f"tiles of {str(path)!r} are {stored}, not {self.tile_shape}")
        self.dtype = self.array.dtype
        self._direct = _direct_layout(self.array) if direct else None
        self._shard: tuple[int, list | None] = (-1, None)  # the last shard's chunks, for its next run

    @property
    def direct(self) -> bool:
        """Whether reads bypass zarr's codec pipeline (see the module docstring)."""
        return self._direct is not None

    @property
    def shard_tiles(self) -> int:
        """Tiles per shard along the first axis."""
        return int(self.array.shards[0]) if self.array.shards else int(self.array.chunks[0])

    def chunks(self, start: int, stop: int) -> list:
        """Tiles `[start, stop)` of one shard, as stored: on the direct path, each tile's encoded chunk (a
        memoryview of the shard file, read once for consecutive runs of one shard; None: never written);
        otherwise, decoded arrays read through zarr."""
        if self._direct is None:
            return list(self.array[start:stop].reshape(stop - start, *self.tile_shape))
        shard, first = divmod(start, self._direct.shard_tiles)
        if self._shard[0] != shard:
            self._shard = (shard, self._direct.chunks(shard))
        chunks = self._shard[1]
        return [None] * (stop - start) if chunks is None else chunks[first : first + stop - start]

    def decode(self, chunk, out: np.ndarray) -> None:
        """Write one tile that `chunks` gave into `out` (a C-contiguous array of the tile's size and dtype, in the
        tile's shape or any other of the same size: a single date's (band, y, x))."""
        if chunk is None:
            out[...] = self._direct.fill  # never written: reads as fill_value, as in zarr
        elif self._direct is None:
            out[...] = np.asarray(chunk).reshape(out.shape)
        else:
            try:
                self._direct.decode(chunk, out)
            except (RuntimeError, ValueError) as err:  # what blosc and zstd raise on a damaged chunk
                raise StoreError(f"a tile of {str(self._direct.root)!r} does not decode ({err}): the store is damaged; "
                                 f"'eoscale info --check' names the shard; ingest the scenes again") from None

    @staticmethod
    def detach(chunk):
        """A chunk that `chunks` gave, copied out of the shard it came from, so that keeping it does not keep
        the whole shard in memory."""
        if isinstance(chunk, memoryview):
            return bytes(chunk)
        if isinstance(chunk, np.ndarray) and chunk.base is not None:
            return chunk.copy()
        return chunk  # None, or copied out already

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tiles `[start, stop)` as one array."""
        out = np.empty((stop - start, *self.tile_shape), dtype=self.dtype)
        if self._direct is None:
            out[...] = self.array[start:stop].reshape(out.shape)
            return out
        shard_tiles = self._direct.shard_tiles
        position = start
        while position < stop:
            end = min(stop, (position // shard_tiles + 1) * shard_tiles)
            for i, chunk in enumerate(self.chunks(position, end), start=position - start):
                self.decode(chunk, out[i])
            position = end
        return out


class _DirectShards:
    """The file layout of a local sharded array with one tile per inner chunk, and how to decode a chunk."""

    def __init__(self, array: zarr.Array, decode: Callable, checksum: bool, index_at_end: bool) -> None:
        self.root = Path(array.store.root) / array.path
        self.shard_tiles = int(array.shards[0])
        self.fill = array.fill_value
        self.key = array.metadata.encode_chunk_key
        self.ndim = array.ndim
        self.decode = decode
        self.checksum = checksum
        self.index_at_end = index_at_end
        self.index_bytes = 16 * self.shard_tiles + (4 if checksum else 0)

    def chunks(self, shard: int) -> list[memoryview | None] | None:
        """The encoded chunks of one shard, one per tile (None: never written), or None for no shard file."""
        path = self.root / self.key((shard,) + (0,) * (self.ndim - 1))
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size < self.index_bytes:
                    raise self.damaged(path, f"{size} bytes, shorter than its index")
                # mapped, not read: read_bytes into fresh memory cost 10–15 µs a tile here, mostly page faults on
                # the new pages; a populated map of the page cache ~2 µs (the store is complete: nothing writes
                # to the file while it is mapped)
                data = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
        except FileNotFoundError:
            return None
        raw = data[-self.index_bytes :] if self.index_at_end else data[: self.index_bytes]
        if self.checksum:
            import google_crc32c

            if google_crc32c.value(raw[:-4]) != int(np.frombuffer(raw[-4:], dtype="<u4")[0]):
                raise self.damaged(path, "its index fails its checksum")
            raw = raw[:-4]
        index = np.frombuffer(raw, dtype="<u8").reshape(self.shard_tiles, 2).tolist()
        if any(offset != _EMPTY and offset + length > size for offset, length in index):
            raise self.damaged(path, "it ends before the tiles its index lists")
        view = memoryview(data)
        return [None if offset == _EMPTY else view[offset : offset + length] for offset, length in index]

    def damaged(self, path: Path, why: str) -> StoreError:
        store = self.root.parent
        return StoreError(f"tile store {str(store)!r} is damaged: shard {path.relative_to(store)} does not read ({why}); "
                          "ingest the scenes again (eoscale ingest … --overwrite)")


def _direct_layout(array: zarr.Array) -> _DirectShards | None:
    """The direct reader for `array` if it has the plain layout `eoscale ingest` writes, else None."""
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
    from zarr.storage import LocalStore

    codecs = array.metadata.codecs if array.metadata.zarr_format == 3 else ()
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec) or not isinstance(array.store, LocalStore):
        return None
    sharding = codecs[0]
    if tuple(sharding.chunk_shape) != (1, *array.shape[1:]) or tuple(array.shards[1:]) != tuple(array.shape[1:]):
        return None
    inner = list(sharding.codecs)
    if not inner or not isinstance(inner[0], BytesCodec):
        return None
    if array.dtype.itemsize > 1 and (inner[0].endian is None or inner[0].endian.value != sys.byteorder):
        return None
    if len(inner) == 1:
        def decode(src, out):
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(src, dtype=np.uint8)
    elif len(inner) == 2 and isinstance(inner[1], (BloscCodec, ZstdCodec)):
        from numcodecs import blosc, zstd

        # the codec's own decompress(source, dest), called as numcodecs' Blosc/Zstd.decode call it, without
        # their argument checks (~20 µs a chunk here, a fifth of decoding a 10×64×64 tile)
        decode = blosc.decompress if isinstance(inner[1], BloscCodec) else zstd.decompress
    else:
        return None
    index_codecs = list(sharding.index_codecs)
    if not index_codecs or not isinstance(index_codecs[0], BytesCodec) or index_codecs[0].endian.value != "little":
        return None
    if index_codecs[1:] and (len(index_codecs) != 2 or not isinstance(index_codecs[1], Crc32cCodec)):
        return None
    return _DirectShards(array, decode, checksum=len(index_codecs) == 2, index_at_end=sharding.index_location.value == "end")


def open_images(store: str | os.PathLike, *, direct: bool = True) -> ShardReader:
    """The reader of a store's `images`, its tiles (time, band, y, x) whatever the store's schema version."""
    reader = ShardReader(Path(store) / schema.IMAGES, direct=direct)
    if reader.array.ndim == 4:  # schema version 1: (tile, band, y, x), one date
        reader.tile_shape = (1, *reader.tile_shape)
    return reader
