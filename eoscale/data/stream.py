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

Tiles are read whole from the shard files by `eoscale.store.reader.ShardReader` (why not random access through
zarr: see there). A store's images are (time, band, y, x) tiles, whatever its schema version; a single-date store
(T = 1, every store ingest writes today, and every version-1 store) gives (B, C, T, T) batches as above. A store
of T > 1 dates gives "image" (B, T, C, H, W), "date_valid" float32 (B, T), each date's share of valid pixels
in the tile, and "dates" int64 (B, T), each date in days since 1970-01-01 (`NO_DATE` where unknown). Training
may drop dates (`date_dropout`: a dropped date's "date_valid" reads 0, as a date without observations) and pick
`max_dates` of them per tile ("date_pick" int64 (B, K), the picked dates in time order, valid ones first;
`TileDataModule.normalise` gathers them on the device), drawn from the same generator as the turns. Training on a
store of several sensors may drop sensors (`sensor_dropout`): each sensor group of a tile is dropped with that
probability, its bands set to the store's nodata in the batch (so its channels read 0 once normalised, and a pixel no
kept group sees gets `ignore_index`), never every group that has data in the tile; drawn from the same generator, before
the turns.

What a worker spends besides decoding (CPU µs per tile in one process, same machine and tiles, decoding
alone 80–103, while other work loaded the 2 cores 5–10×): with the tiles decoded into the buffer, then copied,
turned, into the batch, as before, 153–184 in all; decoded straight into the batch, turned on the device,
99–128; reading a shard file into fresh memory cost 10–15 of those, mapping it 2–5. Batches then reach the main
process through the reused shared-memory buffers of `eoscale.data.handover` (~17–20 µs a tile there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import zarr
from torch.utils.data import IterableDataset, get_worker_info

from eoscale.data.handover import Handover, shared_empty
from eoscale.data.partition import (
    as_ranges,
    num_batches,
    plan_epoch,
    range_tiles,
    rank_length,
    worker_delivered,
)
from eoscale.store import schema
from eoscale.store.reader import ShardReader, _direct_layout, open_images  # noqa: F401  (defined here before)

NO_DATE = np.iinfo(np.int64).min  # "dates" of a date not known (the store's NaT, as xarray encodes it)


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
        targets: bool = False,
        date_dropout: float = 0.0,
        max_dates: int | None = None,
        sensor_groups: list[tuple[int, int]] | None = None,
        sensor_dropout: float = 0.0,
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
        self.date_dropout = float(date_dropout)  # training, several dates: each date dropped with this probability
        self.max_dates = max_dates  # training, several dates: at most this many dates a tile (None: all)
        # training, several sensors: each group of channels `(start, stop)` of a tile dropped with this probability
        self.sensor_groups = None if sensor_groups is None else [(int(a), int(b)) for a, b in sensor_groups]
        self.sensor_dropout = float(sensor_dropout)
        self.targets = targets  # per-pixel values (`schema.TARGETS`) as "target" float32 (B, T, T), NaN where unknown
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
        return {**self.__dict__, "_readers": None, "_values": None}  # workers open their own arrays

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
        images, labels = self._open()[:2]
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker])
        block = max(self.shuffle_shards * self.shard_tiles, self.batch_size) if self.shuffle else self.batch_size
        # and leaves out its share of the batches the rank yielded before: drawn as before (the same random
        # numbers, so the batches after them are the uninterrupted epoch's) but not decoded
        skip = worker_delivered(used, worker, workers)
        buffer = _Buffer()

        def batches() -> Iterator[np.ndarray]:  # each batch's tiles (their places in the buffer), in order
            for start, stop in plan.ranges.tolist():
                buffer.add(images.chunks(start, stop), labels.chunks(start, stop) if labels else None, start, stop)
                if self.targets:
                    buffer.values += self._targets().chunks(start, stop)
                if len(buffer.tiles) >= block:
                    yield from self._drain(buffer, rng, final=False)
            yield from self._drain(buffer, rng, final=True)

        made = 0
        for made, which in enumerate(batches(), start=1):
            if made > skip:
                yield self._batch(buffer, which, rng)
            else:
                if self._drops_sensors():  # the sensors `_batch` would have dropped
                    self._draw_sensors(rng, None, len(which))
                if self.augment:
                    rng.integers(0, 8, len(which), dtype=np.uint8)  # the turns `_batch` would have drawn
                    if self._time_draws():  # and the dates it would have dropped and picked
                        self._draw_dates(rng, self._open()[3][buffer.tiles[which]])
        assert made == plan.batches, f"worker {worker} made {made} batches, planned {plan.batches}"

    def _open(self) -> tuple[ShardReader, ShardReader | None, np.ndarray, np.ndarray | None, np.ndarray | None]:
        # opened lazily in each process (a forked worker must not reuse its parent's handles)
        if self._readers is None or self._readers[0] != os.getpid():
            root = Path(self.store)
            direct = getattr(self, "direct_decode", True)
            images = open_images(root, direct=direct)  # (time, band, y, x) tiles, whatever the schema version
            labels = ShardReader(root / schema.LABELS, direct=direct) if self.labels else None
            # tiles without a single nodata pixel (in any band, on any date) need no nodata mask: most of them
            complete = zarr.open_array(str(root / schema.VALID_FRACTION), mode="r")[:] >= 1.0
            date_valid = dates = None
            if images.tile_shape[0] > 1:  # several dates: each date's valid share and its day go into the batch
                date_valid = zarr.open_array(str(root / schema.DATE_VALID), mode="r")[:].astype(np.float32)
                dates = zarr.open_array(str(root / schema.DATES), mode="r")[:].astype(np.int64)  # days, NaT: NO_DATE
            self._readers = (os.getpid(), images, labels, complete, date_valid, dates)
        return self._readers[1:]

    def _targets(self) -> ShardReader:
        """The store's per-pixel values (`schema.TARGETS`), opened once per process."""
        held = getattr(self, "_values", None)
        if held is None or held[0] != os.getpid():
            held = (os.getpid(), ShardReader(Path(self.store) / schema.TARGETS, direct=getattr(self, "direct_decode", True)))
            self._values = held
        return held[1]

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
        images, labels, complete, date_valid, _ = self._open()
        steps, channels, size = images.tile_shape[0], images.tile_shape[1], images.tile_shape[-1]
        n = len(which)
        channels = channels if self.bands is None else len(self.bands)
        picks = self._picks(steps)
        if self.handover is not None:
            x, y, tile, turn, time, batch = self.handover.take(n, channels, size, labels=self.labels, turns=self.augment,
                                                               batch_size=self.batch_size, steps=steps, picks=picks)
        else:
            empty = shared_empty if self.private_shared else torch.empty
            # one date: (B, C, H, W), as models take it; several: (B, T, C, H, W)
            image = empty((n, channels, size, size) if steps == 1 else (n, steps, channels, size, size), dtype=torch.uint16)
            label = empty((n, size, size), dtype=torch.uint8) if self.labels else None
            tile, turn = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint8) if self.augment else None
            x, y = image.numpy(), None if label is None else label.numpy()
            batch = ({"image": image, "tile": torch.from_numpy(tile)} | ({"label": label} if self.labels else {})
                     | ({"turn": torch.from_numpy(turn)} if self.augment else {}))
            time = None
            if steps > 1:
                time = {"dates": np.empty((n, steps), np.int64), "date_valid": np.empty((n, steps), np.float32)}
                time |= {"date_pick": np.empty((n, picks), np.int64)} if picks else {}
                batch |= {k: torch.from_numpy(v) for k, v in time.items()}
        tile[:] = buffer.tiles[which]
        order = which.tolist()
        if self.bands is None:
            decode = images.decode  # each tile's bytes straight into its place: (C, H, W) and (1, C, H, W) alike
            for i, k in enumerate(order):
                decode(buffer.images[k], x[i])
        else:
            scratch = np.empty(images.tile_shape, dtype=images.dtype)  # (T, all bands, H, W)
            for i, k in enumerate(order):
                images.decode(buffer.images[k], scratch)
                x[i] = scratch[0, self.bands] if steps == 1 else scratch[:, self.bands]
        incomplete = ~complete[tile]
        if self._drops_sensors():
            incomplete |= self._drop_sensors(rng, x)  # a tile that lost a sensor may have pixels without data now
        if y is not None:
            decode = labels.decode
            for i, k in enumerate(order):
                decode(buffer.labels[k], y[i])
            for i in np.flatnonzero(incomplete).tolist():  # a pixel without data: every band at nodata
                if steps == 1:
                    missing = x[i].max(axis=0) == 0 if self.nodata == 0 else (x[i] == self.nodata).all(axis=0)
                else:  # ... on every date
                    missing = (x[i].max(axis=1) == 0).all(axis=0) if self.nodata == 0 else (x[i] == self.nodata).all(axis=(0, 1))
                y[i][missing] = self.ignore_index
        if self.targets:
            batch["target"] = self._target_batch(buffer, order, x, steps)
        if turn is not None:
            turn[:] = rng.integers(0, 8, n, dtype=np.uint8)
        if time is not None:
            time["dates"][:] = self._open()[4][tile]
            time["date_valid"][:] = date_valid[tile]
            if self._time_draws():
                pick = self._draw_dates(rng, time["date_valid"])
                if pick is not None:
                    time["date_pick"][:] = pick
        return batch

    def _drops_sensors(self) -> bool:
        return self.sensor_dropout > 0 and self.sensor_groups is not None and len(self.sensor_groups) > 1

    def _draw_sensors(self, rng: np.random.Generator, seen: np.ndarray | None, n: int | None = None) -> np.ndarray:
        """Which sensor groups of each tile to drop, (n, G) bool, given `seen` (n, G), whether each group has data in
        the tile: each with probability `sensor_dropout`, and where that would drop every group with data, all but one
        of them (chosen at random). The same numbers are drawn whatever `seen` (None: draw only, a resumed epoch's)."""
        groups = len(self.sensor_groups)
        n = len(seen) if seen is not None else n
        chance, spare = rng.random((n, groups)), rng.random(n)
        if seen is None:
            return chance < self.sensor_dropout
        drop = (chance < self.sensor_dropout) & seen
        lost = seen.any(axis=1) & ~(seen & ~drop).any(axis=1)
        for i in np.flatnonzero(lost).tolist():
            options = np.flatnonzero(seen[i])
            drop[i, options[int(spare[i] * len(options))]] = False
        return drop

    def _drop_sensors(self, rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        """Training's sensor dropout on the batch `x` (n, [T,] C, H, W), in place: a dropped group's bands set to the
        store's nodata; returns which tiles lost one (n,) bool."""
        n = len(x)
        seen = np.empty((n, len(self.sensor_groups)), dtype=bool)
        for g, (a, b) in enumerate(self.sensor_groups):
            part = x[:, ..., a:b, :, :].reshape(n, -1)
            seen[:, g] = part.max(axis=1) != 0 if self.nodata == 0 else (part != self.nodata).any(axis=1)
        drop = self._draw_sensors(rng, seen)
        for i, g in zip(*np.nonzero(drop), strict=True):
            a, b = self.sensor_groups[g]
            x[i][..., a:b, :, :] = self.nodata
        return drop.any(axis=1)

    def _picks(self, steps: int) -> int:
        """The dates a training tile keeps with `max_dates` (0: all, no pick)."""
        if steps > 1 and self.augment and self.max_dates is not None and self.max_dates < steps:
            return int(self.max_dates)
        return 0

    def _time_draws(self) -> bool:
        steps = self._open()[0].tile_shape[0]
        return steps > 1 and self.augment and (self.date_dropout > 0 or self._picks(steps) > 0)

    def _draw_dates(self, rng: np.random.Generator, date_valid: np.ndarray) -> np.ndarray | None:
        """Training's date augmentation, in place on `date_valid` (n, T): each date dropped (its validity set to
        0) with probability `date_dropout`, but a tile's best date is never dropped with all the others; then,
        with `max_dates`, the dates each tile keeps (n, K) in time order, valid ones before invalid ones, at
        random among each. The same numbers are drawn whatever the values (a resumed epoch draws them again)."""
        n, steps = date_valid.shape
        if self.date_dropout > 0:
            drop = rng.random((n, steps)) < self.date_dropout
            kept = np.where(drop, 0, date_valid)
            lost = (kept.max(axis=1) <= 0) & (date_valid.max(axis=1) > 0)
            drop[lost, date_valid[lost].argmax(axis=1)] = False
            date_valid[drop] = 0
        picks = self._picks(steps)
        if not picks:
            return None
        priority = rng.random((n, steps)) + (date_valid > 0)
        return np.sort(np.argsort(-priority, axis=1, kind="stable")[:, :picks], axis=1)

    def _target_batch(self, buffer: _Buffer, order: list[int], x: np.ndarray, steps: int) -> torch.Tensor:
        """The batch's per-pixel values (B, T, T) float32, NaN wherever the tile has no value or no data."""
        reader = self._targets()
        size = reader.tile_shape[-1]
        out = torch.empty((len(order), size, size), dtype=torch.float32)
        y = out.numpy()
        for i, k in enumerate(order):
            reader.decode(buffer.values[k], y[i])
        missing = x.max(axis=-3) == 0 if self.nodata == 0 else (x == self.nodata).all(axis=-3)
        if steps > 1:
            missing = missing.all(axis=1)
        y[missing] = np.nan
        return out


class _Buffer:
    """The shuffle buffer: tiles as stored (encoded chunks, about half the bytes of decoded tiles), waiting to
    be drawn into batches."""

    def __init__(self) -> None:
        self.images: list = []
        self.labels: list = []
        self.values: list = []  # per-pixel values' chunks (TileStream with targets)
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
        self.values = [ShardReader.detach(self.values[k]) for k in which] if self.values else []
        self.tiles = self.tiles[which] if which else np.zeros(0, dtype=np.int64)
