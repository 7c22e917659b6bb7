"""`TileStream`: a split of a tile store streamed shard by shard into batches, inside DataLoader workers.

Each worker reads the runs of tiles that `eoscale.data.partition` gives it for the epoch (whole shards,
except at the split's and the workers' edges), keeps them as stored (each tile's encoded chunk, a view of
the mapped shard file: about half the bytes of decoded tiles) in a shuffle buffer of several shards for
training, draws each batch's tiles from it in a random order and decodes each straight into its place in the
batch. Batches are compact, as stored: `{"image": uint16 (B, C, T, T) (the chosen bands), "label": uint8
(B, T, T) (`ignore_index` wherever a pixel has no data), "tile": int64 (B,)}`, and, for augmented
training, "turn": uint8 (B,), one of the 8 symmetries of a square per tile, drawn from `rng(seed, epoch,
rank, worker)`. Converting them to what models take (float32 normalised images, int64 labels) and turning
them is `TileDataModule.normalise`, on the accelerator after the transfer. Batching happens here, not in the
DataLoader (use `batch_size=None` there), because the number of batches a rank yields must be exactly
`len(stream)` on every rank, whatever the number of workers.

Why not random access (measured on the 2-core development machine, 10×64×64 uint16 tiles with their labels,
blosc-zstd): one tile per read through zarr came at about 380–450 tiles/s per process; whole shards per read
through zarr at about 1,700–2,700 tiles/s; decoding each shard's file directly (one file read, the shard
index, then the chunks' own codec from numcodecs) at about 3,200–6,400 tiles/s. `ShardReader` takes that
direct path whenever the array has the plain layout `eoscale ingest` writes, and asks zarr otherwise.

What a worker spends besides decoding (CPU µs per tile in one process, same machine and tiles, decoding
alone 80–103, while other work loaded the 2 cores 5–10×): with the tiles decoded into the buffer, then copied,
turned, into the batch, as before, 153–184 in all; decoded straight into the batch, turned on the device,
99–128; reading a shard file into fresh memory cost 10–15 of those, mapping it 2–5. Batches then reach the main
process through the reused shared-memory buffers of `eoscale.data.handover` (~17–20 µs a tile there).
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import zarr
from torch.utils.data import IterableDataset, get_worker_info

from eoscale import schema
from eoscale.data.handover import Handover, shared_empty
from eoscale.data.partition import as_ranges, num_batches, plan_epoch, range_tiles, rank_length, worker_delivered
from eoscale.errors import StoreError

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: map every page of the file at once
_EMPTY = 2**64 - 1  # a shard index entry of two of these marks a chunk never written (it reads as fill_value)


class ShardReader:
    """Reads whole tiles (along the first axis) of one sharded Zarr v3 array: `chunks` gives a run's tiles as
    stored (encoded, on the direct path), `decode` writes one of them into an array of the tile's shape."""

    def __init__(self, path: str | os.PathLike, *, direct: bool = True) -> None:
        """`direct=False` reads whole runs through zarr's public API even where the direct path applies."""
        self.array = zarr.open_array(str(path), mode="r")
        self.tile_shape = tuple(self.array.shape[1:])
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
            return list(self.array[start:stop])
        shard, first = divmod(start, self._direct.shard_tiles)
        if self._shard[0] != shard:
            self._shard = (shard, self._direct.chunks(shard))
        chunks = self._shard[1]
        return [None] * (stop - start) if chunks is None else chunks[first : first + stop - start]

    def decode(self, chunk, out: np.ndarray) -> None:
        """Write one tile that `chunks` gave into `out` (an array of the tile's shape and dtype)."""
        if chunk is None:
            out[...] = self._direct.fill  # never written: reads as fill_value, as in zarr
        elif self._direct is None:
            out[...] = chunk
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
            out[...] = self.array[start:stop]
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


class TileStream(IterableDataset):
    """One split of a tile store as a stream of batches for one rank; see the module docstring. `split` is
    `(start, stop)`, or a sorted list of disjoint ranges (a training subset, `partition.train_subset`).

    `rank` and `world_size` are fixed when the stream is made (in the main process: DataLoader workers have
    no process group). `set_epoch` changes the order; the epoch lives in a shared-memory tensor, so it reaches
    persistent DataLoader workers too (they read it when the next epoch's iteration starts). `resume(epoch, n)`
    makes the next iteration of `epoch` leave out the first `n` batches the rank yields in it (a run resumed
    from a checkpoint taken in the middle of an epoch): the rest are the same batches, tiles, order and turns,
    as an uninterrupted epoch's; it is kept in shared memory too.
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
        direct_decode: bool = True,
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
        self.direct_decode = direct_decode
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._resume = torch.tensor([-1, 0], dtype=torch.int64).share_memory_()  # (epoch, batches to leave out)
        self.pad = not shuffle  # training leaves out at most W-1 tiles (W more to avoid a batch of one), other ones each epoch; evaluation repeats at most W-1 (partition.py)
        self._readers: tuple | None = None  # (pid, images, labels, complete) of the process that opened them
        self.handover: Handover | None = None  # set in TileLoader's workers only
        self.private_shared = False  # TileLoader sets it: allocate worker batches in shared memory directly

    @property
    def tiles_per_rank(self) -> int:
        return rank_length(range_tiles(self.split), self.world_size, pad=self.pad, batch_size=self.batch_size)

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same on every rank)."""
        return num_batches(self.tiles_per_rank, self.batch_size)

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.fill_(int(epoch))

    @property
    def resume_point(self) -> tuple[int, int] | None:
        """`(epoch, batches)` that the next iteration of that epoch leaves out, or None."""
        epoch, batches = self._resume.tolist()
        return None if epoch < 0 else (epoch, batches)

    @property
    def resumed_batches(self) -> int:
        """The batches the next iteration of the current epoch leaves out: 0 unless `resume` named this epoch."""
        resume = self.resume_point
        return resume[1] if resume is not None and resume[0] == self.epoch else 0

    def resume(self, epoch: int, batches: int) -> None:
        """Start the next iteration of `epoch` after its first `batches` batches (0 ≤ batches ≤ `len(self)`),
        and make `epoch` the stream's epoch; `resume(-1, 0)` forgets it."""
        if epoch >= 0 and not 0 <= batches <= len(self):
            raise ValueError(f"cannot leave out {batches} batches of an epoch of {len(self)}")
        if epoch >= 0:
            self.set_epoch(epoch)
        self._resume[0], self._resume[1] = int(epoch), int(batches)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": None}  # workers open their own arrays

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, used = self.epoch, self.resumed_batches
        # A resumed epoch: the DataLoader takes batches from its workers in turn starting with worker 0, while
        # the uninterrupted epoch's next batch is worker (used mod workers)'s (`partition.worker_delivered`); so
        # worker w makes what worker (w + used) mod workers would have, and the turns go on as they would have.
        worker = (worker + used) % workers
        plan = plan_epoch(self.split, self.shard_tiles, batch_size=self.batch_size, rank=self.rank,
                          world_size=self.world_size, worker=worker, workers=workers, seed=self.seed,
                          epoch=epoch, shuffle=self.shuffle, pad=self.pad)
        images, labels, _ = self._open()
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker])
        block = max(self.shuffle_shards * self.shard_tiles, self.batch_size) if self.shuffle else self.batch_size
        # and leaves out its share of the batches the rank yielded before: drawn as before (the same random
        # numbers, so the batches after them are the uninterrupted epoch's) but not decoded
        skip = worker_delivered(used, worker, workers)
        buffer = _Buffer()

        def batches() -> Iterator[np.ndarray]:  # each batch's tiles (their places in the buffer), in order
            for start, stop in plan.ranges.tolist():
                buffer.add(images.chunks(start, stop), labels.chunks(start, stop) if labels else None, start, stop)
                if len(buffer.tiles) >= block:
                    yield from self._drain(buffer, rng, final=False)
            yield from self._drain(buffer, rng, final=True)

        made = 0
        for made, which in enumerate(batches(), start=1):
            if made > skip:
                yield self._batch(buffer, which, rng)
            elif self.augment:
                rng.integers(0, 8, len(which), dtype=np.uint8)  # the turns `_batch` would have drawn
        assert made == plan.batches, f"worker {worker} made {made} batches, planned {plan.batches}"

    def _open(self) -> tuple[ShardReader, ShardReader | None, np.ndarray]:
        # opened lazily in each process (a forked worker must not reuse its parent's handles)
        if self._readers is None or self._readers[0] != os.getpid():
            root = Path(self.store)
            direct = getattr(self, "direct_decode", True)
            labels = ShardReader(root / schema.LABELS, direct=direct) if self.labels else None
            # tiles without a single nodata pixel (in any band) need no nodata mask: most of them
            complete = zarr.open_array(str(root / schema.VALID_FRACTION), mode="r")[:] >= 1.0
            self._readers = (os.getpid(), ShardReader(root / schema.IMAGES, direct=direct), labels, complete)
        return self._readers[1:]

    def _drain(self, buffer: _Buffer, rng: np.random.Generator, *, final: bool) -> Iterator[np.ndarray]:
        """The buffered tiles (their places in the buffer) of each batch to make now (in a random order for
        training); without `final`, a remainder smaller than a batch stays in the buffer (copied out of its
        shards), to be mixed with the next shards."""
        total = len(buffer.tiles)
        order = rng.permutation(total) if self.shuffle else np.arange(total)
        stop = total if final else total - total % self.batch_size
        for i in range(0, stop, self.batch_size):
            yield order[i : i + self.batch_size]
        buffer.keep(order[stop:])

    def _batch(self, buffer: _Buffer, which: np.ndarray, rng: np.random.Generator) -> dict:
        """One batch as stored, of the buffered tiles `which`: each tile decoded straight into its place in the
        batch (no copy in between; with a band subset, into scratch, then the chosen bands copied); where a tile
        has nodata, its label is set to `ignore_index` under it. Augmented batches carry a random "turn" per
        tile, applied on the device (`eoscale.data.augment`)."""
        images, labels, complete = self._open()
        n, size, channels = len(which), images.tile_shape[-1], images.tile_shape[0]
        channels = channels if self.bands is None else len(self.bands)
        if self.handover is not None:
            x, y, tile, turn, batch = self.handover.take(n, channels, size, labels=self.labels, turns=self.augment,
                                                         batch_size=self.batch_size)
        else:
            empty = shared_empty if self.private_shared else torch.empty
            image = empty((n, channels, size, size), dtype=torch.uint16)
            label = empty((n, size, size), dtype=torch.uint8) if self.labels else None
            tile, turn = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint8) if self.augment else None
            x, y = image.numpy(), None if label is None else label.numpy()
            batch = ({"image": image, "tile": torch.from_numpy(tile)} | ({"label": label} if self.labels else {})
                     | ({"turn": torch.from_numpy(turn)} if self.augment else {}))
        tile[:] = buffer.tiles[which]
        order = which.tolist()
        if self.bands is None:
            decode = images.decode
            for i, k in enumerate(order):
                decode(buffer.images[k], x[i])
        else:
            scratch = np.empty(images.tile_shape, dtype=images.dtype)
            for i, k in enumerate(order):
                images.decode(buffer.images[k], scratch)
                x[i] = scratch[self.bands]
        if y is not None:
            decode = labels.decode
            for i, k in enumerate(order):
                decode(buffer.labels[k], y[i])
            for i in np.flatnonzero(~complete[tile]).tolist():  # a pixel without data: every band at nodata
                missing = x[i].max(axis=0) == 0 if self.nodata == 0 else (x[i] == self.nodata).all(axis=0)
                y[i][missing] = self.ignore_index
        if turn is not None:
            turn[:] = rng.integers(0, 8, n, dtype=np.uint8)
        return batch


class _Buffer:
    """The shuffle buffer: tiles as stored (encoded chunks, about half the bytes of decoded tiles), waiting to
    be drawn into batches."""

    def __init__(self) -> None:
        self.images: list = []
        self.labels: list = []
        self.tiles = np.zeros(0, dtype=np.int64)

    def add(self, images: list, labels: list | None, start: int, stop: int) -> None:
        self.images += images
        if labels is not None:
            self.labels += labels
        self.tiles = np.concatenate([self.tiles, np.arange(start, stop, dtype=np.int64)])

    def keep(self, which: np.ndarray) -> None:
        """Keep only the tiles `which`, copied out of their shards so that those can be freed."""
        which = which.tolist()
        self.images = [ShardReader.detach(self.images[k]) for k in which]
        self.labels = [ShardReader.detach(self.labels[k]) for k in which] if self.labels else []
        self.tiles = self.tiles[which] if which else np.zeros(0, dtype=np.int64)
