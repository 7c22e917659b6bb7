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
  of batches; Lightning calls its `sampler.set_epoch(epoch)` at the start of every training epoch. The training
  loader is resumable: a checkpoint saved in the middle of an epoch (`ModelCheckpoint(every_n_train_steps=…)`,
  a Slurm requeue) records how many of the epoch's batches were trained, and the resumed fit trains exactly
  the rest of that epoch, the same batches an uninterrupted run would have (tests/data/test_resume.py).

- `on_after_batch_transfer`: in the training process, on each batch once Lightning moved it to the device; it
  calls `normalise`. Lightning (checked with 2.6, `LightningModule._apply_batch_transfer_handler`) calls the
  datamodule's hook whenever the Trainer was given the datamodule, and prefers it to the LightningModule's.

The LightningModule's batches are `{"image": float32 (B, C, T, T), "label": int64 (B, T, T), "tile": int64 (B,)}`
("label" only with `labels=True`); with `target="values"` (a store ingested with `--targets`), "target" float32
(B, T, T) per-pixel values (NaN where unknown or without data, turned with the image) instead of "label", loaded
without the shared-memory handover. A store of T > 1 dates a tile gives "image" float32 (B, T, C, H, W) (the
same per-band statistics on every date; a date without observations reads 0), "date_valid" float32 (B, T), each
date's share of pixels with data (0: a masked step, or one where the chosen `bands` hold nothing, which models
leave out, as predict and serve do) and "dates" int64 (B, T), days since
1970-01-01 (`eoscale.data.stream.NO_DATE` where unknown); training may drop dates (`date_dropout`) and keep
`max_dates` of them a tile; every date of a tile turns alike. `date_step=k` reads such a store as a single-date one:
step k of every tile, 4-D batches as of a one-date store (its pixels without data on that date read 0), so a
single-date model can be fitted on any one date of a season (`eoscale bench temporal`). Images are normalised with the store's per-band mean and std (of the chosen
bands); a pixel without data (the store's nodata in every band) reads 0 in every band and `ignore_index` in the
label. A store of several sensors (`sensor_groups`: each sensor a group of consecutive bands) is normalised group by
group: where all of a group's bands are the store's nodata, that group's channels read 0 (clouds in the optical group,
radar border noise, a missing sensor), and a pixel without data is one where every group is; with
`sensor_dropout`, training drops each sensor group of a tile with that probability (its channels read 0 there, as a
missing sensor's), never every group that has data in the tile, drawn in the workers as the turns are. Training
tiles get a random one of the 8 square symmetries (flips and 90° turns), the same for image and label: the
workers draw it (a "turn" per tile, from the seed, epoch, rank and worker), `normalise` applies it on the device
(`eoscale.data.augment`). The dataloaders themselves yield the compact batches that the workers made (uint16
images, uint8 labels: a third of the bytes to hand over, pin and copy; "turn" in training); code that iterates
one by hand calls `normalise` on each batch, after moving it to its device:

    for batch in dm.predict_dataloader():
        batch = dm.normalise({k: v.to(device, non_blocking=True) for k, v in batch.items()})

Each epoch delivers every tile of a split once across all ranks and workers, with one documented exception
(`eoscale.data.partition`): so that every rank takes the same number of steps, training leaves out
`d = n − W·L` tiles an epoch (W ranks of L tiles: at most W − 1, and one a rank more where a rank's share would
end in a batch of one), other ones each epoch, in turn through the split (each once every n / d epochs; any
two consecutive epochs train on every tile), and validation, test and prediction repeat at most W − 1 tiles;
use the `tile` ids to drop the repeats where they matter (with one rank there are none).
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import get_worker_info
from torch.utils.data.dataloader import _InfiniteConstantSampler

from eoscale._compat.lightning import device_mesh
from eoscale._compat.torch import HookedLoader, HookedWorkerIter, shutdown_workers
from eoscale.classes import ClassTable
from eoscale.contract import check_std
from eoscale.data.augment import dihedral
from eoscale.data.handover import _WIRE, Handover, forget, hooks_allowed
from eoscale.data.partition import train_subset
from eoscale.data.stream import TileStream
from eoscale.errors import BandMismatchError, InputError
from eoscale.inputs.prepare import dates_held, prepare, presence_from_nodata
from eoscale.inputs.spec import InputSpec
from eoscale.sensors import recorded_sensor
from eoscale.sensors.groups import SensorGroup, as_record, groups_of, select_groups
from eoscale.store import schema
from eoscale.store.open import open_store, read_store_attrs, time_steps


class TileDataModule(LightningDataModule):
    """A tile store's train/val/test splits as streams of whole-shard reads; see the module docstring.

    `bands` picks bands by name (default: all, in store order); `labels=False` leaves labels out (for
    pretraining on images); `predict_split` is the split `predict_dataloader` reads; `seed` fixes the training
    order of every epoch; `shuffle_shards` is the size of the shuffle buffer in shards (memory per worker:
    about `shuffle_shards × shard_tiles` tiles); `augment=False` turns off the flips and turns; `train_fraction`
    trains on that share of the 'train' split only (as if only it were labelled): a fixed choice, by `seed`, of
    short strips of neighbouring tiles (`eoscale.data.partition.train_subset`), the same every epoch and on
    every rank, while validation, test and prediction keep their whole splits; of a store of several dates,
    training drops each date with probability `date_dropout` and keeps at most `max_dates` dates a tile (the
    valid ones first, at random, in time order; evaluation keeps every date); of a store of several sensors, training
    drops each sensor of a tile with probability `sensor_dropout` (never every sensor with data there, so a store of
    one sensor drops nothing, and one config fits stores of one sensor and of several; evaluation keeps all);
    `pin_memory`
    (default: when CUDA is available) pins the compact batches, so that their copy to the GPU can overlap the
    step. A batch size larger than a rank's share of the training split is refused in `setup`, or with
    `fit_batch_size` lowered to that share, said in one line (the default recipe's choice, so that a small scene's
    store trains); evaluation splits accept it (one short batch per rank).

    Args (the two switches over private internals; outputs, tile order and batch contents, are the same either
    way, tests/data/test_datamodule.py):
        shared_memory: with workers, hand batches over through `eoscale.data.handover` (reused shared-memory
            buffers, hooked into torch's private DataLoader internals, checked with the torch versions in
            `handover.TORCH_CHECKED`; outside them it is off, with one warning). False: plain DataLoader
            batches, no private hooks installed. It pays, so it stays: compare the "shared_memory_off" row with
            "loader_compact" in benchmarks/loader.json (`eoscale bench loader`; 2-core CPU machine so far).
        direct_decode: decode each shard's file directly (`eoscale.data.stream.ShardReader`, bypassing zarr's
            codec pipeline). False: the same whole-shard reads through zarr's public API. It pays, so it stays: compare the
            "direct_decode_off" row with "loader_compact" in benchmarks/loader.json.
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
        train_fraction: float = 1.0,
        shared_memory: bool = True,
        direct_decode: bool = True,
        target: str = "classes",
        date_dropout: float = 0.0,
        max_dates: int | None = None,
        date_step: int | None = None,
        sensor_dropout: float = 0.0,
        fit_batch_size: bool = False,
    ) -> None:
        super().__init__()
        if date_step is not None and (isinstance(date_step, bool) or not isinstance(date_step, int) or date_step < 0):
            raise InputError(f"date_step must be a step index of the store's dates (0 or more), got {date_step!r}")
        if not 0 <= sensor_dropout < 1:
            raise InputError(f"sensor_dropout must be at least 0 and less than 1, got {sensor_dropout}")
        if not 0 <= date_dropout < 1:
            raise InputError(f"date_dropout must be at least 0 and less than 1, got {date_dropout}")
        if max_dates is not None and max_dates < 1:
            raise InputError(f"max_dates must be at least 1 (or left out for every date), got {max_dates}")
        if target not in ("classes", "values"):
            raise InputError(f"target={target!r}: TileDataModule loads 'classes' (labels) or 'values' (per-pixel "
                             f"targets of a store ingested with --targets)")
        if batch_size < 1:
            raise InputError(f"batch_size must be at least 1, got {batch_size}")
        if num_workers < 0:
            raise InputError(f"num_workers must be 0 or more, got {num_workers}")
        if shuffle_shards < 1:
            raise InputError(f"shuffle_shards must be at least 1, got {shuffle_shards}")
        if not 0 < train_fraction <= 1:
            raise InputError(f"train_fraction must be more than 0 and at most 1, got {train_fraction}")
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
        self.train_fraction = float(train_fraction)
        self.shared_memory = bool(shared_memory)
        self.direct_decode = bool(direct_decode)
        self.target = target
        self.date_dropout = float(date_dropout)
        self.sensor_dropout = float(sensor_dropout)
        self.max_dates = max_dates
        self.date_step = date_step
        self.fit_batch_size = bool(fit_batch_size)
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._attrs: dict | None = None
        self._streams: dict[str, TileStream] = {}
        self._spec: InputSpec | None = None
        self._groups: list[tuple[int, int]] | None = None

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
    def sensor(self) -> str:
        """The sensor of the store's bands (`eoscale.sensors`); a store from before it was recorded: Sentinel-2
        (`recorded_sensor`)."""
        return recorded_sensor(self.attrs.get(schema.ATTR_SENSOR), self.attrs[schema.ATTR_BANDS])

    @property
    def time_steps(self) -> int:
        """The dates a tile of the batches holds (T; 1: a single-date store, or one step of a season with
        `date_step`, whose batches are 4-D)."""
        steps = self.store_time_steps  # (a date_step outside the store's steps is refused there)
        return 1 if self.date_step is not None else steps

    @property
    def store_time_steps(self) -> int:
        """The dates a tile of the store holds."""
        steps = time_steps(self.attrs)
        if self.date_step is not None and self.date_step >= steps:
            raise InputError(f"date_step={self.date_step} is not a step of tile store {self.store!r}, which holds "
                             f"{steps} date(s) a tile: choose one of 0 to {steps - 1}")
        return steps

    @property
    def band_names(self) -> list[str]:
        return [self.attrs[schema.ATTR_BANDS][i] for i in self.band_indices]

    @property
    def num_bands(self) -> int:
        return len(self.band_indices)

    @property
    def sensor_groups(self) -> tuple[SensorGroup, ...]:
        """The sensors of the chosen bands, each a group of consecutive channels (`eoscale.sensors.groups`); a store
        of one sensor: one group."""
        groups = groups_of(self.attrs.get(schema.ATTR_SENSORS), self.attrs[schema.ATTR_BANDS], self.sensor)
        return select_groups(groups, self.band_names)

    @property
    def input_spec(self) -> InputSpec:
        """The spec of the chosen bands (`eoscale.inputs.spec`): the store's recorded one, or the one its attributes
        imply, with the store's statistics of the chosen bands."""
        if self._spec is None:
            stats = self.statistics
            spec = InputSpec.from_store_attrs(self.attrs).select(self.band_names)
            self._spec = spec.with_statistics(stats["mean"], stats["std"])
        return self._spec

    @property
    def input_spec_record(self) -> dict:
        """The input spec as the checkpoint's band contract records it (`BandContract.input_spec`)."""
        return self.input_spec.to_dict()

    @property
    def sensors_record(self) -> list[dict] | None:
        """What a checkpoint's contract records of the sensors (`BandContract.sensors`): None for a store of one."""
        if self.attrs.get(schema.ATTR_SENSORS) is None:
            return None
        return as_record(self.sensor_groups)

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
    def labelled(self) -> bool:
        """False for a store ingested without label rasters (`eoscale ingest` without `--labels`: every label is
        `ignore_index`; images for pretraining only); a store that does not list its inputs counts as labelled."""
        inputs = self.attrs.get(schema.ATTR_INPUTS)
        return inputs is None or any(record.get("role") == "labels" for record in inputs)

    @property
    def target_info(self) -> dict | None:
        """With `target="values"`: the store's per-pixel target (name, units, mean, std, min, max), which the band
        contract records (the task normalises targets by mean and std, `BandContract.activate` undoes it)."""
        if self.target != "values":
            return None
        attrs = self.attrs
        if attrs.get(schema.ATTR_TARGET_KIND) != "values":
            raise InputError(f"tile store {self.store!r} holds no per-pixel values: ingest it with --targets RASTER "
                             f"for target='values'")
        stats = attrs[schema.ATTR_TARGET_STATISTICS]
        return {"name": attrs.get(schema.ATTR_TARGET_NAME) or "value", "units": attrs.get(schema.ATTR_TARGET_UNITS),
                **{k: float(stats[k]) for k in ("mean", "std", "min", "max")}}

    @property
    def statistics(self) -> dict[str, list[float]]:
        """The normalisation used: per-band mean and std of the chosen bands, in their order."""
        stats = self.attrs[schema.ATTR_STATISTICS]
        return {k: [float(stats[k][i]) for i in self.band_indices] for k in ("mean", "std")}

    def split_range(self, split: str) -> tuple[int, int]:
        start, stop = self.attrs[schema.ATTR_SPLITS][split]
        return int(start), int(stop)

    def tile_ranges(self, split: str) -> np.ndarray:
        """The tiles this datamodule reads from `split`, as an (R, 2) array of `[start, stop)` ranges: the
        whole split, but for 'train' with `train_fraction` < 1, its subset."""
        ranges = np.asarray([self.split_range(split)], dtype=np.int64)
        if split == "train" and self.train_fraction < 1:
            return train_subset(ranges, self.train_fraction, seed=self.seed)
        return ranges

    def class_weights(self, split: str = "train") -> torch.Tensor:
        """Inverse-frequency class weights from the per-tile class counts of the tiles read from `split`
        (`tile_ranges`: only the subset with a `train_fraction`), summed with Dask, scaled so that a balanced
        split gives 1 for every class; classes absent from the split get 0."""
        tiles = np.concatenate([np.arange(a, b) for a, b in self.tile_ranges(split)])
        counts = open_store(self.store)[schema.CLASS_COUNTS].isel({schema.TILE: tiles}).sum(schema.TILE)
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
        if self.target == "values":
            self.target_info  # noqa: B018  (a store without values is refused here, in one line)
        # a store written before ingest refused a band of std 0 (no valid pixel): a ×1,000,000 scale, refused here
        check_std(self.band_names, self.statistics["std"], what=f"tile store {self.store!r}")
        for split in wanted[stage]:
            optional = stage == "fit" and split == "val"  # an empty val split only turns validation off
            start, stop = self.split_range(split)
            if stop <= start:  # (a train_fraction too small for a batch is refused in _stream)
                if optional:
                    self._streams.pop(split, None)
                    continue
                raise InputError(
                    f"the {split!r} split of tile store {self.store!r} has no tiles: ingest again with a --split "
                    f"that gives it a share, or use another split"
                )
            self._streams[split] = self._stream(split, rank=rank, world_size=world_size)

    def train_dataloader(self) -> TileLoader:
        """The 'train' split's loader; under a Trainer, its state counts the batches trained (see `TileLoader`)."""
        loader = self._loader("train")
        if self.trainer is not None:
            # what was trained, not what was taken: a checkpoint saved when a step failed (OnExceptionCheckpoint)
            # counts that step's batch as not done, and Lightning trains it again on resuming
            loop = self.trainer.fit_loop
            loader.progress = lambda: loop.epoch_loop.batch_progress.current.processed
        return loader

    def val_dataloader(self) -> TileLoader | list:
        return self._loader("val") if "val" in self._streams else []

    def test_dataloader(self) -> TileLoader:
        return self._loader("test")

    def predict_dataloader(self) -> TileLoader:
        return self._loader(self.predict_split)

    def on_after_batch_transfer(self, batch: dict[str, torch.Tensor], dataloader_idx: int) -> dict[str, torch.Tensor]:
        """On the training device, after Lightning moved the compact batch there: `normalise` it. (A
        LightningModule that overrides this hook too is not called: Lightning warns and uses this one.)"""
        return self.normalise(batch)

    # --- the device side of the batch contract ----------------------------------------------------------
    def normalise(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The loader's compact batch as models take it, on the batch's device: uint16 images become float32
        normalised with the store's statistics of the chosen bands (0 wherever a pixel has no data),
        uint8 labels become int64 (`ignore_index` stays); a training batch's "turn" (one of the 8 symmetries
        per tile, drawn in the workers) turns image and label alike (`eoscale.data.augment`), and is dropped.
        Anything already converted is left as it is, so calling it twice is harmless. Lightning calls it through
        `on_after_batch_transfer`; call it yourself when iterating a dataloader by hand (after `.to(device)`, so
        that the conversion and the turns run there)."""
        out = dict(batch)
        if self.date_step is not None and out.get("image") is not None and out["image"].ndim == 5:
            # one step of a season (`date_step`): a single-date batch, masked where that date has no data
            k = self.date_step
            out["image"] = out["image"][:, k]
            step_valid = out.pop("date_valid")[:, k]  # a masked step reads 0, as a pixel without data does
            out.pop("dates", None)
        else:
            step_valid = None
        pick = out.pop("date_pick", None)
        if pick is not None:  # training's chosen dates of each tile, in time order (`TileStream`, max_dates)
            out["image"] = out["image"][torch.arange(len(pick), device=pick.device)[:, None], pick]
            out["date_valid"] = out["date_valid"].gather(1, pick)
            out["dates"] = out["dates"].gather(1, pick)
        turn = out.pop("turn", None)
        if turn is not None and "target" in out:  # per-pixel values turn as the image does
            out["target"] = dihedral(out["target"].unsqueeze(1), None, turn)[0].squeeze(1)
        if turn is not None:
            out["image"], out["label"] = dihedral(out["image"], out.get("label"), turn)
            if out["label"] is None:
                del out["label"]
        image = out.get("image")
        if image is not None and image.dtype == torch.uint16:
            # one preparation for every stage (`eoscale.inputs.prepare`): each sensor group 0 where all its bands are
            # the store's nodata, each date 0 where the store says it holds nothing of the tile
            spec = self.input_spec
            x = image.to(torch.float32)  # before any comparison: CUDA has few kernels for uint16
            presence = presence_from_nodata(spec, x)
            if step_valid is not None:
                presence = presence & (step_valid > 0)[:, None, None, None]
            date_valid = out["date_valid"] > 0 if x.ndim == 5 else None
            out["image"] = prepare(spec, x, presence=presence, date_valid=date_valid)
            if date_valid is not None:
                # the store's date_valid counts every sensor's data; a date where the chosen bands hold nothing (a
                # radar pass for the optical bands, an optical date for the radar's) is no date for this model, as
                # predict and serve find it (`dates_held` of the prepared window)
                out["date_valid"] = out["date_valid"] * dates_held(out["image"])
        label = out.get("label")
        if label is not None and label.dtype == torch.uint8:
            out["label"] = label.to(torch.int64)
        return out

    def _group_channels(self) -> list[tuple[int, int]]:
        """Each sensor group's channels `(start, stop)` among the chosen bands (one group for a store of one)."""
        if self._groups is None:
            self._groups = [(g.start, g.stop) for g in self.sensor_groups]
        return self._groups

    # --- helpers -------------------------------------------------------------------------------------------
    def _rank_and_world_size(self) -> tuple[int, int]:
        return data_parallel(self.trainer)

    def _stream(self, split: str, *, rank: int, world_size: int) -> TileStream:
        stream = self._make_stream(split, rank=rank, world_size=world_size)
        if split == "train" and self.fit_batch_size and 0 < stream.tiles_per_rank < self.batch_size:
            # every rank has the same share (eoscale.data.partition), so every rank lowers it alike
            if rank == 0:
                print(f"batch_size={self.batch_size} is larger than each rank's share of the 'train' split "
                      f"({stream.tiles_per_rank} tiles on each of {world_size} ranks): lowered to "
                      f"{stream.tiles_per_rank} (fit_batch_size)")
            self.batch_size = stream.tiles_per_rank
            stream = self._make_stream(split, rank=rank, world_size=world_size)
        if split == "train" and stream.tiles_per_rank < self.batch_size:
            subset = f", train_fraction={self.train_fraction:g}" if self.train_fraction < 1 else ""
            raise InputError(
                f"batch_size={self.batch_size} is larger than each rank's share of the 'train' split "
                f"({stream.tiles_per_rank} tiles on each of {world_size} ranks{subset}): use a batch size of at most "
                f"{max(stream.tiles_per_rank, 1)}{' or a larger train_fraction' if subset else ''}"
            )
        return stream

    def _make_stream(self, split: str, *, rank: int, world_size: int) -> TileStream:
        train = split == "train"
        stream = TileStream(
            self.store, self.tile_ranges(split), shard_tiles=int(self.attrs[schema.ATTR_SHARD_TILES]),
            batch_size=self.batch_size, nodata=int(self.attrs[schema.ATTR_NODATA]), ignore_index=self.ignore_index,
            bands=None if self.bands is None else self.band_indices, labels=self.labels and self.target != "values", shuffle=train,
            augment=train and self.augment, seed=self.seed, shuffle_shards=self.shuffle_shards, rank=rank,
            world_size=world_size, direct_decode=self.direct_decode,
            **({"targets": True} if self.target == "values" else {}),
            **({"date_dropout": self.date_dropout, "max_dates": self.max_dates}
               if self.store_time_steps > 1 and self.date_step is None else {}),
            **({"sensor_groups": self._group_channels(), "sensor_dropout": self.sensor_dropout}
               if train and self.sensor_dropout > 0 and len(self._group_channels()) > 1 else {}),
        )
        return stream

    def _loader(self, split: str) -> TileLoader:
        if split not in self._streams:
            raise RuntimeError(f"no {split!r} stream: call setup() with the stage that uses it first")
        # the shared-memory handover carries images and labels only: per-pixel values come the plain way
        return TileLoader(self._streams[split], num_workers=self.num_workers, pin_memory=self.pin_memory,
                          shared_memory=self.shared_memory and self.target != "values")


def data_parallel(trainer) -> tuple[int, int]:
    """This rank's data-parallel rank and the data-parallel size: the ranks that take different batches.

    eoscale's strategies say it themselves (`data_parallel()`, their protocol: `eoscale.train.strategies.protocol`,
    a layer above this one): the ranks of one tensor-parallel group take the same batches, and so do a pipeline's
    stages. Lightning's own `ModelParallelStrategy` says it by its sampler arguments; under any other strategy
    every rank of the process group (or of the Trainer, `trainer` may be None) is a replica of its own."""
    strategy = getattr(trainer, "strategy", None)
    own = getattr(strategy, "data_parallel", None)
    if callable(own):
        rank, size = own()[:2]
        return int(rank), int(size)
    if device_mesh(strategy) is not None:
        sampler = strategy.distributed_sampler_kwargs
        return int(sampler["rank"]), int(sampler["num_replicas"])
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    if trainer is not None:
        return trainer.global_rank, trainer.world_size
    return 0, 1


class _EpochSampler(_InfiniteConstantSampler):
    """The DataLoader's sampler slot for an IterableDataset, forwarding `set_epoch` to the stream."""

    def __init__(self, stream: TileStream) -> None:
        super().__init__()
        self.stream = stream

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)


class TileLoader(HookedLoader):
    """A DataLoader of a `TileStream`'s ready-made batches, whose `sampler.set_epoch` reaches the stream.

    Lightning (checked with 2.6) calls `set_epoch` on `dataloader.sampler` at every training epoch's start and
    never on an IterableDataset, while a DataLoader refuses a sampler for one; so the sampler slot is filled
    after construction with one that forwards. Workers are persistent by default (starting them took 0.2–0.6 s
    per epoch here); the stream's epoch is in shared memory, so they see each new one. With workers, batches
    come through a `Handover`: buffers the workers fill again once the main process no longer uses them.

    Resumable in the middle of an epoch (the `state_dict` / `load_state_dict` pair Lightning saves in its
    checkpoints and loads before it iterates again): the state is the epoch and how many of its batches were
    used; a loader given it starts that epoch after them, with the batches the uninterrupted epoch would have
    had next. "Used" is what `progress()` says if set (TileDataModule sets it to the Trainer's count of trained
    batches), else the batches this loader yielded.
    """

    def __init__(self, dataset: TileStream, *, shared_memory: bool = True, **kwargs) -> None:
        kwargs.update(batch_size=None, sampler=None, batch_sampler=None)
        kwargs.setdefault("persistent_workers", kwargs.get("num_workers", 0) > 0)
        workers = kwargs.get("num_workers", 0)
        self.shared_memory = shared_memory  # `shared_memory=False`: no Handover, none of its private hooks
        self.handover = Handover(workers) if workers > 0 and shared_memory and hooks_allowed() else None
        # off (or on another torch): workers make their batches with torch.empty, and torch's own pickling moves
        # them to shared memory, not through the private `UntypedStorage._new_shared`
        dataset.private_shared = bool(shared_memory and hooks_allowed())
        if self.handover is not None:
            user_init = kwargs.get("worker_init_fn")
            if isinstance(user_init, functools.partial) and user_init.func is _start_worker:
                user_init = user_init.args[1]  # a copy of a TileLoader (Lightning re-creates them to predict)
            kwargs["worker_init_fn"] = functools.partial(_start_worker, self.handover, user_init)
        super().__init__(dataset, **kwargs)
        object.__setattr__(self, "sampler", _EpochSampler(dataset))  # DataLoader.__setattr__ forbids this
        self.progress = None  # a callable: batches of the current epoch used so far (see the class docstring)
        self._position = [dataset.epoch, 0]  # the epoch being iterated, batches yielded in it (a resumed one's included)

    def __iter__(self):
        # a generator: the workers start on the first `next`, not on `iter`. Lightning calls `iter` on the
        # training loader (FitLoop.setup_data) before it sets the epoch (on_advance_start); DataLoader's own
        # `__iter__` set the workers going at once, so a run resumed at epoch e made that epoch in epoch 0's order
        stream = self.dataset
        resume = stream.resume_point
        self._position = [stream.epoch, stream.resumed_batches]
        trained = int(self.progress()) if self.progress is not None else 0
        if trained > self._position[1] and _first_rank():  # resumed mid-epoch, from a checkpoint without our state
            warnings.warn(f"resuming epoch {stream.epoch} after {trained} batches from a checkpoint that does not "
                          f"record the training loader's place (written before eoscale recorded it): that epoch "
                          f"starts again from its first batch", stacklevel=2)
        for batch in super().__iter__():
            self._position[1] += 1
            yield batch
        if resume is not None and resume[0] == self._position[0]:
            stream.resume(-1, 0)  # the resumed epoch is over: its next iteration is a whole one

    def state_dict(self) -> dict:
        """Where the current epoch stands: `{"epoch", "batches"}` (used so far), and `"layout"`: what decides
        which tiles make each batch (ranks, batch size, workers, seed, shuffle buffer, the split's tiles)."""
        epoch, batches = self._position
        if self.progress is not None:
            batches = int(self.progress())
        return {"epoch": int(epoch), "batches": int(batches), "layout": self._layout()}

    def load_state_dict(self, state: dict) -> None:
        """Resume the epoch `state` names after the batches it had used. From a run of another layout (world
        size, batch size, workers, seed, …), where the same batches cannot be made, the epoch continues with
        the batches that follow that many in this layout, and a warning names what differs."""
        stream = self.dataset
        batches = int(state["batches"])
        saved, layout = state.get("layout", {}), self._layout()
        differ = [f"{key} {saved.get(key)} → {value}" for key, value in layout.items() if saved.get(key) != value]
        if differ and _first_rank():  # every rank loads the state: say it once
            warnings.warn(
                f"resuming epoch {state['epoch']} after {batches} batches of a run that differed in "
                f"{', '.join(differ)}: the rest of that epoch is not exactly the tiles the first run left", stacklevel=2)
        stream.resume(int(state["epoch"]), min(batches, len(stream)))

    def _layout(self) -> dict:
        stream = self.dataset
        split = hashlib.blake2b(np.ascontiguousarray(stream.split, dtype=np.int64).tobytes(), digest_size=8)
        return {"world_size": stream.world_size, "batch_size": stream.batch_size, "batches": len(stream),
                "workers": self.num_workers, "seed": stream.seed, "shuffle_shards": stream.shuffle_shards,
                "split": split.hexdigest()}

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)

    def close(self) -> None:
        """Stop the persistent workers now. Code that iterates a loader by hand calls it (or uses the loader as
        a context manager); Lightning stops them itself at the end of fit, validate and predict.

        Why not leave it to garbage collection: a loader held in a reference cycle (a LightningDataModule keeps
        one) is freed by the cyclic collector, which runs the index queues' finalizers — stopping the threads
        that feed them — before the iterator's `__del__` sends each worker its stop: the workers never hear it
        and the DataLoader waits its 5 s join timeout for each before killing them (measured: 5.3 s a loader)."""
        iterator, self._iterator = getattr(self, "_iterator", None), None
        shutdown_workers(iterator)

    def __enter__(self) -> TileLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def worker_iterator(self) -> HookedWorkerIter | None:
        return _HandoverIter(self) if self.handover is not None else None


def _first_rank() -> bool:
    """Whether this process is rank 0 of the process group, or there is none: where a warning every rank would
    give is given."""
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()
                and torch.distributed.get_rank() != 0)


def _start_worker(handover: Handover, user_init, worker_id: int) -> None:
    get_worker_info().dataset.handover = handover  # this worker's copy of the stream
    if user_init is not None:
        user_init(worker_id)


class _HandoverIter(HookedWorkerIter):
    """The DataLoader's own worker iterator, unpacking each batch as it arrives (see `Handover`), through the
    hooks of `eoscale._compat.torch` (torch's private DataLoader internals live there, with their checked versions)."""

    def __init__(self, loader: TileLoader) -> None:
        self._handover = loader.handover
        self._tokens: set[int] = set()  # of this iterator's workers, whose buffers the main process maps
        super().__init__(loader)

    def on_received(self, data: object) -> None:
        self._handover.received(data)
        if isinstance(data, dict) and _WIRE in data:
            self._tokens.add(data[_WIRE]["layout"][-1])

    def on_shutdown(self) -> None:
        forget(getattr(self, "_tokens", ()))  # the workers have stopped: unmap their buffers (but where batches still hold them)
        self._tokens = set()

    def on_next(self, batch: object) -> object:
        return self._handover.unpack(batch)
