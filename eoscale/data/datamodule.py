"""`TileDataModule`: a tile store's splits as Lightning dataloaders, each tile once per epoch on all ranks.

    dm = TileDataModule("runs/tiles.zarr", batch_size=64, num_workers=8, bands=["B02", "B03", "B04", "B08"])
    model = build_model("resnet18", in_chans=dm.num_bands, num_classes=dm.num_classes)
    Trainer(strategy="ddp", devices=4).fit(LitModel(model), datamodule=dm)

Where the hooks run (Lightning's rules):

- `__init__` and the properties (`num_bands`, `band_names`, `num_classes`, `class_table`, `tile_size`,
  `ignore_index`, `statistics`, `class_weights()`): anywhere, on any rank; they read only the store's metadata
  (and, for the weights, its per-tile class counts through Dask), so models can be built before training.
- `prepare_data`: once per node (local rank 0), before the process group exists; it only checks that the store
  can be read and keeps no state, because the other ranks never run it.
- `setup(stage)`: on every rank, after the process group exists; it checks the options against the store and
  makes this rank's `TileStream`s, so the rank and world size are known here.
- `*_dataloader`: on every rank, after `setup`. Each returns a `TileLoader`, whose length is the rank's number
  of batches; Lightning calls its `sampler.set_epoch(epoch)` at the start of every training epoch.

Batches are `{"image": float32 (B, C, T, T), "label": int64 (B, T, T), "tile": int64 (B,)}` ("label" only with
`labels=True`). Images are normalised with the store's per-band mean and std (of the chosen bands); a pixel
where any chosen band is nodata reads 0 in every band and `ignore_index` in the label. Training tiles get a
random one of the 8 square symmetries (flips and 90° turns), the same for image and label.
Each epoch delivers every tile of a split once across all ranks and workers, with one documented exception
(`eoscale.data.partition`): with W ranks, training drops at most W − 1 tiles of the epoch's shuffled order and
validation, test and prediction repeat at most W − 1 tiles, so that every rank takes the same number of
steps; use the `tile` ids to drop the repeats where they matter (with one rank there are none).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _InfiniteConstantSampler

from eoscale import schema
from eoscale.classes import ClassTable
from eoscale.data.store import open_store, read_store_attrs
from eoscale.data.stream import TileStream
from eoscale.errors import BandMismatchError, InputError


class TileDataModule(LightningDataModule):
    """A tile store's train/val/test splits as streams of whole-shard reads; see the module docstring.

    `bands` picks bands by name (default: all, in store order); `labels=False` leaves labels out (for
    pretraining on images); `predict_split` is the split `predict_dataloader` reads; `seed` fixes the training
    order of every epoch; `shuffle_shards` is the size of the shuffle buffer in shards (memory per worker:
    about `shuffle_shards × shard_tiles` tiles); `augment=False` turns off the flips and turns. A batch size
    larger than a rank's share of the training split is refused in `setup`; evaluation splits accept it (one
    short batch per rank).
    """

    def __init__(
        self,
        store: str | os.PathLike,
        *,
        batch_size: int = 32,
        num_workers: int = 4,
        bands: list[str] | None = None,
        labels: bool = True,
        augment: bool = True,
        predict_split: str = "test",
        seed: int = 0,
        shuffle_shards: int = 4,
        pin_memory: bool | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise InputError(f"batch_size must be at least 1, got {batch_size}")
        if num_workers < 0:
            raise InputError(f"num_workers must be 0 or more, got {num_workers}")
        if shuffle_shards < 1:
            raise InputError(f"shuffle_shards must be at least 1, got {shuffle_shards}")
        if predict_split not in schema.SPLITS:
            raise InputError(f"predict_split={predict_split!r} is not a split: choose one of {', '.join(schema.SPLITS)}")
        self.save_hyperparameters()
        self.store = str(store)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.bands = None if bands is None else list(bands)
        self.labels = labels
        self.augment = augment
        self.predict_split = predict_split
        self.seed = seed
        self.shuffle_shards = shuffle_shards
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._attrs: dict | None = None
        self._streams: dict[str, TileStream] = {}

    # --- the band contract, readable before any hook runs -----------------------------------------------
    @property
    def attrs(self) -> dict:
        """The store's validated attributes (metadata only; read once)."""
        if self._attrs is None:
            self._attrs = read_store_attrs(self.store)
        return self._attrs

    @property
    def band_indices(self) -> list[int]:
        names = self.attrs[schema.ATTR_BANDS]
        if self.bands is None:
            return list(range(len(names)))
        unknown = [b for b in self.bands if b not in names]
        if unknown:
            raise BandMismatchError(
                f"band {', '.join(map(repr, unknown))} is not in tile store {self.store!r}: choose from {', '.join(names)}"
            )
        return [names.index(b) for b in self.bands]

    @property
    def band_names(self) -> list[str]:
        return [self.attrs[schema.ATTR_BANDS][i] for i in self.band_indices]

    @property
    def num_bands(self) -> int:
        return len(self.band_indices)

    @property
    def class_table(self) -> ClassTable:
        return ClassTable.from_records(self.attrs[schema.ATTR_CLASSES])

    @property
    def num_classes(self) -> int:
        return len(self.attrs[schema.ATTR_CLASSES])

    @property
    def tile_size(self) -> int:
        return int(self.attrs[schema.ATTR_TILE_SIZE])

    @property
    def ignore_index(self) -> int:
        return int(self.attrs[schema.ATTR_IGNORE_INDEX])

    @property
    def statistics(self) -> dict[str, list[float]]:
        """The normalisation used: per-band mean and std of the chosen bands, in their order."""
        stats = self.attrs[schema.ATTR_STATISTICS]
        return {k: [float(stats[k][i]) for i in self.band_indices] for k in ("mean", "std")}

    def split_range(self, split: str) -> tuple[int, int]:
        start, stop = self.attrs[schema.ATTR_SPLITS][split]
        return int(start), int(stop)

    def class_weights(self, split: str = "train") -> torch.Tensor:
        """Inverse-frequency class weights from the store's per-tile class counts (summed with Dask),
        scaled so that a balanced split gives 1 for every class; classes absent from the split get 0."""
        start, stop = self.split_range(split)
        counts = open_store(self.store)[schema.CLASS_COUNTS].isel({schema.TILE: slice(start, stop)}).sum(schema.TILE)
        counts = np.asarray(counts.values, dtype=np.float64)
        present = counts > 0
        weights = np.zeros_like(counts)
        weights[present] = counts.sum() / (present.sum() * counts[present])
        return torch.as_tensor(weights, dtype=torch.float32)

    # --- Lightning hooks ---------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Once per node: fail early when the store is missing, unfinished or of another version. No state."""
        read_store_attrs(self.store)

    def setup(self, stage: str) -> None:
        """On every rank: make this rank's streams for `stage` ('fit', 'validate', 'test' or 'predict')."""
        rank, world_size = self._rank_and_world_size()
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": (self.predict_split,)}
        if stage not in wanted:
            raise InputError(f"stage={stage!r} is not a Lightning stage: choose one of {', '.join(wanted)}")
        for split in wanted[stage]:
            optional = stage == "fit" and split == "val"  # an empty val split only turns validation off
            start, stop = self.split_range(split)
            if stop <= start:
                if optional:
                    self._streams.pop(split, None)
                    continue
                raise InputError(
                    f"the {split!r} split of tile store {self.store!r} has no tiles: ingest again with a --split "
                    f"that gives it a share, or use another split"
                )
            self._streams[split] = self._stream(split, rank=rank, world_size=world_size)

    def train_dataloader(self) -> TileLoader:
        return self._loader("train")

    def val_dataloader(self) -> TileLoader | list:
        return self._loader("val") if "val" in self._streams else []

    def test_dataloader(self) -> TileLoader:
        return self._loader("test")

    def predict_dataloader(self) -> TileLoader:
        return self._loader(self.predict_split)

    # --- helpers -------------------------------------------------------------------------------------------
    def _rank_and_world_size(self) -> tuple[int, int]:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        if self.trainer is not None:
            return self.trainer.global_rank, self.trainer.world_size
        return 0, 1

    def _stream(self, split: str, *, rank: int, world_size: int) -> TileStream:
        train = split == "train"
        stats = self.statistics
        stream = TileStream(
            self.store, self.split_range(split), shard_tiles=int(self.attrs[schema.ATTR_SHARD_TILES]),
            batch_size=self.batch_size, mean=np.asarray(stats["mean"]), std=np.asarray(stats["std"]),
            nodata=int(self.attrs[schema.ATTR_NODATA]), ignore_index=self.ignore_index,
            bands=None if self.bands is None else self.band_indices, labels=self.labels, shuffle=train,
            augment=train and self.augment, seed=self.seed, shuffle_shards=self.shuffle_shards, rank=rank,
            world_size=world_size,
        )
        if train and stream.tiles_per_rank < self.batch_size:
            raise InputError(
                f"batch_size={self.batch_size} is larger than each rank's share of the 'train' split "
                f"({stream.tiles_per_rank} tiles on each of {world_size} ranks): use a batch size of at most "
                f"{max(stream.tiles_per_rank, 1)}"
            )
        return stream

    def _loader(self, split: str) -> TileLoader:
        if split not in self._streams:
            raise RuntimeError(f"no {split!r} stream: call setup() with the stage that uses it first")
        return TileLoader(self._streams[split], num_workers=self.num_workers, pin_memory=self.pin_memory)


class _EpochSampler(_InfiniteConstantSampler):
    """The DataLoader's sampler slot for an IterableDataset, forwarding `set_epoch` to the stream."""

    def __init__(self, stream: TileStream) -> None:
        super().__init__()
        self.stream = stream

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)


class TileLoader(DataLoader):
    """A DataLoader of a `TileStream`'s ready-made batches, whose `sampler.set_epoch` reaches the stream.

    Lightning (checked with 2.6) calls `set_epoch` on `dataloader.sampler` at every training epoch's start and
    never on an IterableDataset, while a DataLoader refuses a sampler for one; so the sampler slot is filled
    after construction with one that forwards. Workers are persistent by default (starting them took 0.2–0.6 s
    per epoch here); the stream's epoch is in shared memory, so they see each new one.
    """

    def __init__(self, dataset: TileStream, **kwargs) -> None:
        kwargs.update(batch_size=None, sampler=None, batch_sampler=None)
        kwargs.setdefault("persistent_workers", kwargs.get("num_workers", 0) > 0)
        super().__init__(dataset, **kwargs)
        object.__setattr__(self, "sampler", _EpochSampler(dataset))  # DataLoader.__setattr__ forbids this

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
