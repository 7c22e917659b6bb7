"""`TileStream`: a split of a tile store streamed shard by shard into batches, inside DataLoader workers.

Each worker reads the runs of tiles that `eoscale.data.partition` gives it for the epoch (whole shards,
except at the split's and the workers' edges), shuffles them in a buffer of several shards for training,
and yields compact batches, as stored: `{"image": uint16 (B, C, T, T) (the chosen bands), "label": uint8
(B, T, T) (`ignore_index` wherever a band is nodata), "tile": int64 (B,)}`, turned for training. Converting
them to what models take (float32 normalised images, int64 labels) is `TileDataModule.normalise`, on the
accelerator after the transfer. Batching happens here, not in the DataLoader (use `batch_size=None` there),
because the number of batches a rank yields must be exactly `len(stream)` on every rank, whatever the
number of workers.

Why not random access (measured on the 2-core development machine, 10×64×64 uint16 tiles with their labels,
blosc-zstd): one tile per read through zarr came at about 380–450 tiles/s per process; whole shards per read
through zarr at about 1,700–2,700 tiles/s; decoding each shard's file directly (one file read, the shard
index, then the chunks' own codec from numcodecs) at about 3,200–6,400 tiles/s. `ShardReader` takes that
direct path whenever the array has the plain layout `eoscale ingest` writes, and asks zarr otherwise.

What a worker spends besides decoding (CPU seconds per 1,000 such tiles in one worker, same machine, decoding
alone ~0.12): handing float32 images and int64 labels over in fresh shared memory, as before, 0.41; uint16 and
uint8 instead, 0.25; the same through the reused buffers of `Handover`, 0.17 (and the main process's share
fell from 0.05 to 0.02: one packed tensor, one file descriptor per batch). Turning the tiles takes ~0.5 ms
per 32.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import zarr
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import IterableDataset, get_worker_info

from eoscale import schema
from eoscale.data.partition import as_ranges, num_batches, plan_epoch, range_tiles, rank_length

_EMPTY = 2**64 - 1  # a shard index entry of two of these marks a chunk never written (it reads as fill_value)


class ShardReader:
    """Reads runs of whole tiles (along the first axis) from one sharded Zarr v3 array, a shard at a time."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.array = zarr.open_array(str(path), mode="r")
        self.tile_shape = tuple(self.array.shape[1:])
        self.dtype = self.array.dtype
        self._direct = _direct_layout(self.array)

    @property
    def direct(self) -> bool:
        """Whether reads bypass zarr's codec pipeline (see the module docstring)."""
        return self._direct is not None

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tiles `[start, stop)` as one array."""
        out = np.empty((stop - start, *self.tile_shape), dtype=self.dtype)
        if self._direct is None:
            out[...] = self.array[start:stop]
            return out
        shard_tiles = self._direct.shard_tiles
        position = start
        while position < stop:
            shard = position // shard_tiles
            end = min(stop, (shard + 1) * shard_tiles)
            self._direct.read(shard, position - shard * shard_tiles, end - shard * shard_tiles,
                              out[position - start : end - start])
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
        try:
            data = (self.root / self.key((shard,) + (0,) * (self.ndim - 1))).read_bytes()
        except FileNotFoundError:
            return None
        raw = data[-self.index_bytes :] if self.index_at_end else data[: self.index_bytes]
        if self.checksum:
            import google_crc32c

            if google_crc32c.value(raw[:-4]) != int(np.frombuffer(raw[-4:], dtype="<u4")[0]):
                raise OSError(f"shard {shard} of {str(self.root)!r} has a damaged index: ingest the scenes again")
            raw = raw[:-4]
        index = np.frombuffer(raw, dtype="<u8").reshape(self.shard_tiles, 2).tolist()
        view = memoryview(data)
        return [None if offset == _EMPTY else view[offset : offset + size] for offset, size in index]

    def read(self, shard: int, first: int, stop: int, out: np.ndarray) -> None:
        chunks = self.chunks(shard)
        for j in range(first, stop):
            chunk = None if chunks is None else chunks[j]
            if chunk is None:
                out[j - first] = self.fill  # never written: reads as fill_value, as in zarr
            else:
                self.decode(chunk, out[j - first])


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


def dihedral(image: np.ndarray, label: np.ndarray | None, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Tile `i` turned by `choice[i]` in 0..7: rotated by 90°·(choice % 4), then mirrored left–right if
    choice ≥ 4 (the 8 symmetries of a square). Image `(B, C, T, T)` and label `(B, T, T)` move together."""
    out_image = np.empty_like(image)
    out_label = None if label is None else np.empty_like(label)
    for t in np.unique(choice):
        where = np.flatnonzero(choice == t)
        out_image[where] = _turn(image[where], int(t))
        if label is not None:
            out_label[where] = _turn(label[where], int(t))
    return out_image, out_label


def _turn(a: np.ndarray, t: int) -> np.ndarray:
    """`a` (..., T, T) as `np.rot90(a, t % 4, axes=(-2, -1))`, mirrored left–right if t ≥ 4: a view, made with
    plain slicing (np.rot90 and np.flip cost ~15 µs a call in their argument checks, a third of a tile's turn)."""
    k = t % 4
    if k == 1:
        a = a[..., ::-1].swapaxes(-1, -2)
    elif k == 2:
        a = a[..., ::-1, ::-1]
    elif k == 3:
        a = a.swapaxes(-1, -2)[..., ::-1]
    return a[..., ::-1] if t >= 4 else a


class TileStream(IterableDataset):
    """One split of a tile store as a stream of batches for one rank; see the module docstring. `split` is
    `(start, stop)`, or a sorted list of disjoint ranges (a training subset, `partition.train_subset`).

    `rank` and `world_size` are fixed when the stream is made (in the main process: DataLoader workers have
    no process group). `set_epoch` changes the order; the epoch lives in a shared-memory tensor, so it reaches
    persistent DataLoader workers too (they read it when the next epoch's iteration starts).
    """

    def __init__(
        self,
        store: str | os.PathLike,
        split: tuple[int, int] | np.ndarray,
        *,
        shard_tiles: int,
        batch_size: int,
        nodata: int,
        ignore_index: int,
        bands: list[int] | None = None,
        labels: bool = True,
        shuffle: bool = False,
        augment: bool = False,
        seed: int = 0,
        shuffle_shards: int = 4,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        if not 0 <= ignore_index <= 255:
            raise ValueError(f"ignore_index={ignore_index} does not fit the uint8 labels")
        self.store = str(store)
        self.split = as_ranges(split)  # (R, 2): one range, or a training subset's sorted ranges
        self.shard_tiles = shard_tiles
        self.batch_size = batch_size
        self.bands = None if bands is None else np.asarray(bands, dtype=np.int64)
        self.nodata = nodata
        self.ignore_index = ignore_index
        self.labels = labels
        self.shuffle = shuffle
        self.augment = augment
        self.seed = seed
        self.shuffle_shards = shuffle_shards
        self.rank = rank
        self.world_size = world_size
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self.pad = not shuffle  # training drops at most W-1 tiles, evaluation repeats at most W-1 (partition.py)
        self._readers: tuple | None = None  # (pid, images, labels, complete) of the process that opened them
        self.handover: Handover | None = None  # set in TileLoader's workers only

    @property
    def tiles_per_rank(self) -> int:
        return rank_length(range_tiles(self.split), self.world_size, pad=self.pad)

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same on every rank)."""
        return num_batches(self.tiles_per_rank, self.batch_size)

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.fill_(int(epoch))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": None}  # workers open their own arrays

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch = self.epoch
        plan = plan_epoch(self.split, self.shard_tiles, batch_size=self.batch_size, rank=self.rank,
                          world_size=self.world_size, worker=worker, workers=workers, seed=self.seed,
                          epoch=epoch, shuffle=self.shuffle, pad=self.pad)
        images, labels, complete = self._open()
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker])
        block = max(self.shuffle_shards * self.shard_tiles, self.batch_size) if self.shuffle else self.batch_size
        pieces: list[_Piece] = []
        made = buffered = 0
        for start, stop in plan.ranges:
            image = images.read(start, stop)
            if self.bands is not None:
                image = image[:, self.bands]  # once per run: the buffer then holds only the chosen bands
            pieces.append(_Piece(image, labels.read(start, stop) if labels else None,
                                 np.arange(start, stop, dtype=np.int64), complete[start:stop]))
            buffered += stop - start
            if buffered >= block:
                for batch in self._drain(pieces, rng, final=False):
                    made += 1
                    yield batch
                buffered = sum(len(p.tile) for p in pieces)
        for batch in self._drain(pieces, rng, final=True):
            made += 1
            yield batch
        assert made == plan.batches, f"worker {worker} made {made} batches, planned {plan.batches}"

    def _open(self) -> tuple[ShardReader, ShardReader | None, np.ndarray]:
        # opened lazily in each process (a forked worker must not reuse its parent's handles)
        if self._readers is None or self._readers[0] != os.getpid():
            root = Path(self.store)
            labels = ShardReader(root / schema.LABELS) if self.labels else None
            # tiles without a single nodata pixel (in any band) need no nodata mask: most of them
            complete = zarr.open_array(str(root / schema.VALID_FRACTION), mode="r")[:] >= 1.0
            self._readers = (os.getpid(), ShardReader(root / schema.IMAGES), labels, complete)
        return self._readers[1:]

    def _drain(self, pieces: list[_Piece], rng: np.random.Generator, *, final: bool) -> Iterator[dict[str, torch.Tensor]]:
        """Batches from the buffered tiles (shuffled for training); without `final`, a remainder smaller than
        a batch stays in `pieces`, to be mixed with the next shards."""
        sizes = [len(p.tile) for p in pieces]
        total = sum(sizes)
        which = np.repeat(np.arange(len(pieces)), sizes)
        row = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        if self.shuffle:
            order = rng.permutation(total)
            which, row = which[order], row[order]
        stop = total if final else total - total % self.batch_size
        buffered = list(pieces)
        pieces.clear()
        if stop < total:  # the remainder, copied out so the pieces it came from can be freed
            rest = [(buffered[w], r) for w, r in zip(which[stop:], row[stop:], strict=True)]
            pieces.append(_Piece(
                np.stack([p.image[r] for p, r in rest]),
                None if rest[0][0].label is None else np.stack([p.label[r] for p, r in rest]),
                np.array([p.tile[r] for p, r in rest], dtype=np.int64),
                np.array([p.complete[r] for p, r in rest], dtype=bool),
            ))
        for i in range(0, stop, self.batch_size):
            chosen = slice(i, min(i + self.batch_size, stop))
            yield self._batch([(buffered[w], r) for w, r in zip(which[chosen], row[chosen], strict=True)], rng)

    def _batch(self, tiles: list[tuple[_Piece, int]], rng: np.random.Generator) -> dict:
        """One batch as stored: each tile is read once from the buffer (turned, through a view) and written once
        into the batch; where a tile has nodata, its label is set to `ignore_index` under it."""
        n, (channels, size) = len(tiles), tiles[0][0].image.shape[1:3]
        if self.handover is not None:
            x, y, tile, batch = self.handover.take(n, channels, size, labels=self.labels, batch_size=self.batch_size)
        else:
            image = _output((n, channels, size, size), torch.uint16)
            label = _output((n, size, size), torch.uint8) if self.labels else None
            tile = np.empty(n, dtype=np.int64)
            x, y = image.numpy(), None if label is None else label.numpy()
            batch = {"image": image, "tile": torch.from_numpy(tile)} | ({"label": label} if self.labels else {})
        turns = rng.integers(0, 8, n).tolist() if self.augment else [0] * n
        for i, (piece, r) in enumerate(tiles):
            x[i] = _turn(piece.image[r], turns[i])
            tile[i] = piece.tile[r]
            if y is not None:
                y[i] = _turn(piece.label[r], turns[i])
                if not piece.complete[r]:
                    y[i][(x[i] == self.nodata).any(axis=0)] = self.ignore_index  # a pixel with any band missing
        return batch


class _Piece(NamedTuple):
    """Tiles read in one go (a run of one shard), waiting in the shuffle buffer."""

    image: np.ndarray  # (n, bands, T, T) as stored, the chosen bands only
    label: np.ndarray | None  # (n, T, T)
    tile: np.ndarray  # (n,) tile ids
    complete: np.ndarray  # (n,) True where the tile has no nodata pixel


def _output(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor for a batch; in a DataLoader worker, in shared memory already, as `default_collate`
    does, so that handing it to the main process does not copy it once more."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(math.prod(shape) * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


class Handover:
    """Batch buffers in shared memory that `TileLoader`'s workers fill again once the main process let go.

    Why: a fresh shared-memory buffer per batch (what `default_collate` does) cost 3–6 ms per 32 tiles of
    10×64×64 here, mostly page faults on its new pages: as much as decoding the tiles. How, safely: each
    worker keeps up to `SLOTS` buffers. A batch travels as one flat uint8 tensor (tile ids, images, labels;
    one file descriptor to pass instead of three) with a ticket; the main process unpacks it into views and
    keeps a weak reference to its storage. When that has expired, no tensor in the main process uses the
    buffer any more (views, pinned copies and batches held by the caller all keep it alive), and the main
    process writes the ticket into `state[worker, slot]`, shared memory made before the workers start; the
    worker reuses a buffer only when its state shows the ticket it was sent with, so a late release from an
    earlier worker process cannot free a buffer of the current one. A worker with no free buffer takes a
    fresh one, so a caller that keeps batches only loses the speed-up.
    """

    SLOTS = 8  # in flight per worker: prefetch_factor (2) queued, plus the batches the consumer holds

    def __init__(self, workers: int) -> None:
        self.state = torch.zeros((workers, self.SLOTS), dtype=torch.int64).share_memory_()
        self._held: list[tuple[int, int, int, StorageWeakRef]] = []  # main process: (worker, slot, ticket, storage)
        self._buffers: list[tuple[torch.Tensor, int]] = []  # a worker's: (buffer, ticket it was last sent with)
        self._tickets = 0

    def __getstate__(self) -> dict:
        return {"state": self.state, "_held": [], "_buffers": [], "_tickets": 0}

    # --- in a worker ------------------------------------------------------------------------------------
    def take(self, n: int, channels: int, size: int, *, labels: bool, batch_size: int):
        """Numpy views to fill (images, labels or None, tile ids) and the batch to yield for `n` tiles."""
        worker, state = get_worker_info().id, self.state.numpy()
        need = _packed_bytes(batch_size, channels, size, labels)
        self._tickets += 1
        ticket = os.getpid() << 32 | self._tickets  # unique across worker processes
        slot = next((i for i, (buffer, sent) in enumerate(self._buffers)
                     if state[worker, i] == sent and len(buffer) >= need), -1)
        if slot < 0 and len(self._buffers) < self.SLOTS:
            slot = len(self._buffers)
            self._buffers.append((_output((need,), torch.uint8), 0))
        buffer = self._buffers[slot][0] if slot >= 0 else _output((need,), torch.uint8)
        if slot >= 0:
            self._buffers[slot] = (buffer, ticket)
            state[worker, slot] = 0  # in use
        image, label, tile = _unpack(buffer.numpy(), n, channels, size, labels)
        wire = {"packed": buffer[: _packed_bytes(n, channels, size, labels)],
                "layout": (worker, slot, ticket, n, channels, size, labels)}
        return image, label, tile, {_WIRE: wire}

    # --- in the main process ----------------------------------------------------------------------------
    def received(self, batch: object) -> None:
        """Note a batch that arrived from a worker, and let the workers have back the buffers no longer used.
        Called on every batch received, also on those a new epoch's start throws away."""
        state, still = self.state.numpy(), []
        for held_worker, held_slot, held_ticket, storage in self._held:
            if storage.expired():
                state[held_worker, held_slot] = held_ticket  # free for the worker to fill again
            else:
                still.append((held_worker, held_slot, held_ticket, storage))
        self._held = still
        if isinstance(batch, dict) and _WIRE in batch and batch[_WIRE]["layout"][1] >= 0:
            worker, slot, ticket = batch[_WIRE]["layout"][:3]
            self._held.append((worker, slot, ticket, StorageWeakRef(batch[_WIRE]["packed"].untyped_storage())))

    @staticmethod
    def unpack(batch: dict) -> dict:
        """The batch a worker sent as `{"image", "label", "tile"}`: views of its buffer, but for the tile ids,
        copied out so that keeping them does not keep the buffer."""
        if _WIRE not in batch:
            return batch
        packed, (_, _, _, n, channels, size, labels) = batch[_WIRE]["packed"], batch[_WIRE]["layout"]
        image, label, tile = _unpack(packed, n, channels, size, labels)
        return {"image": image, "tile": tile.clone()} | ({"label": label} if labels else {})


_WIRE = "_eoscale_packed"  # the key of a packed batch between a worker and TileLoader


def _packed_bytes(n: int, channels: int, size: int, labels: bool) -> int:
    return 8 * n + 2 * n * channels * size * size + (n * size * size if labels else 0)


def _unpack(flat, n: int, channels: int, size: int, labels: bool):
    """(images uint16 (n, C, T, T), labels uint8 (n, T, T) or None, tile ids int64 (n,)) as views of a flat
    uint8 buffer (numpy array or tensor): tile ids first, so that every part is aligned to its item size."""
    image_at, label_at = 8 * n, 8 * n + 2 * n * channels * size * size
    as_type = (lambda a, t: a.view(t)) if isinstance(flat, np.ndarray) else (lambda a, t: a.view(_TORCH[t]))
    tile = as_type(flat[:image_at], np.int64)
    image = as_type(flat[image_at:label_at], np.uint16).reshape(n, channels, size, size)
    label = flat[label_at : label_at + n * size * size].reshape(n, size, size) if labels else None
    return image, label, tile


_TORCH = {np.int64: torch.int64, np.uint16: torch.uint16}
