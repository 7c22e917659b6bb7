"""A store of several sensors in the loader: each sensor group normalised with its own nodata (0 where it has none),
labels ignored only where no group has data, and training's sensor dropout (never every group of a tile; the same
batches whatever the workers, and after a resume)."""

from __future__ import annotations

import pytest
import torch

from eoscale.data.datamodule import TileDataModule
from eoscale.errors import InputError


def _batches(dm: TileDataModule, split: str) -> list[dict]:
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    with loader:
        return [dm.normalise(b) for b in loader]


def test_each_sensor_group_reads_0_where_it_has_no_data(sensor_store: str):
    dm = TileDataModule(sensor_store, batch_size=4, num_workers=0)
    optical, radar = dm.sensor_groups
    assert (optical.name, radar.name, optical.channels, radar.channels) == ("sentinel-2", "sentinel-1", slice(0, 8),
                                                                            slice(8, 10))
    assert dm.sensors_record == [g.to_dict() for g in dm.sensor_groups]
    dm.setup("fit")
    batches = _batches(dm, "val")
    x = torch.cat([b["image"] for b in batches])
    label = torch.cat([b["label"] for b in batches])
    assert (x[:, optical.channels, :8] == 0).all() and (x[:, radar.channels, :, :6] == 0).all()
    seen_optical = (x[:, optical.channels] != 0).any(1)
    seen_radar = (x[:, radar.channels] != 0).any(1)
    # the groups' gaps are their own: rows 0-7 keep their radar, columns 0-5 their optical data
    assert seen_radar[:, :8, 6:].float().mean() > 0.5 and seen_optical[:, 8:, :6].float().mean() > 0.5
    # a pixel without data (ignored) is one where neither group has any: one group's gap keeps its labels
    assert (label[~(seen_optical | seen_radar)] == dm.ignore_index).all()
    assert (label[:, :8, 6:] != dm.ignore_index).float().mean() > 0.5
    assert (label[:, 8:, :6] != dm.ignore_index).float().mean() > 0.5


def test_one_sensor_normalises_as_before(store: str):
    """A store of one sensor: the per-group rule is exactly the one rule of before, bit for bit."""
    dm = TileDataModule(store, batch_size=4, num_workers=0)
    assert len(dm.sensor_groups) == 1 and dm.sensors_record is None
    dm.setup("fit")
    with dm.val_dataloader() as loader:
        raw = next(iter(loader))
    got = dm.normalise(raw)["image"]
    stats = dm.statistics
    mean = torch.tensor(stats["mean"]).view(1, -1, 1, 1)
    scale = 1.0 / torch.tensor(stats["std"]).clamp_min(1e-6).view(1, -1, 1, 1)
    x = raw["image"].to(torch.float32)
    expected = x.sub_(mean).mul_(scale).mul_(raw["image"].to(torch.float32).amax(dim=-3, keepdim=True) != 0)
    assert torch.equal(got, expected) and got.numpy().tobytes() == expected.numpy().tobytes()


def _train(store: str, *, workers: int = 0, seed: int = 0, epoch: int = 0, dropout: float = 0.5,
           shared_memory: bool = False) -> list[dict]:
    dm = TileDataModule(store, batch_size=4, num_workers=workers, sensor_dropout=dropout, seed=seed,
                        shared_memory=shared_memory)
    dm.setup("fit")
    loader = dm.train_dataloader()
    # the shared-memory handover is the path asked for (not silently the plain loader's: the comparisons below
    # would then compare the plain loader with itself)
    assert (loader.handover is not None) == (workers > 0 and shared_memory)
    loader.set_epoch(epoch)
    with loader:
        return [dm.normalise(b) for b in loader]


def test_sensor_dropout_drops_whole_groups_never_all(sensor_store: str):
    batches = _train(sensor_store)
    x = torch.cat([b["image"] for b in batches])
    label = torch.cat([b["label"] for b in batches])
    optical = (x[:, :8] != 0).flatten(1).any(1)
    radar = (x[:, 8:] != 0).flatten(1).any(1)
    assert (optical | radar).all()  # never every group of a tile
    assert (~optical).sum() > 0 and (~radar).sum() > 0 and (optical & radar).sum() > 0  # each dropped now and then
    assert 0.2 < float((~optical | ~radar).float().mean()) < 0.8
    # a tile without its optical group: its pixels without radar (here columns 0-5, after the turn) are ignored
    for i in torch.nonzero(~optical).flatten().tolist():
        no_radar = ~(x[i, 8:] != 0).any(0)
        assert no_radar.any() and (label[i][no_radar] == 255).all()
    # without dropout, nothing is dropped
    x = torch.cat([b["image"] for b in _train(sensor_store, dropout=0.0)])
    assert (x[:, :8] != 0).flatten(1).any(1).all() and (x[:, 8:] != 0).flatten(1).any(1).all()


def _dropped(batches: list[dict]) -> list[tuple[int, bool, bool]]:
    out = []
    for b in batches:
        for tile, x in zip(b["tile"].tolist(), b["image"], strict=True):
            out.append((tile, bool((x[:8] != 0).any()), bool((x[8:] != 0).any())))
    return sorted(out)


def test_sensor_dropout_is_drawn_from_the_seed_and_epoch(sensor_store: str):
    first = _train(sensor_store)
    again = _train(sensor_store)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
    assert _dropped(_train(sensor_store, epoch=1)) != _dropped(first)  # another epoch, other drops
    assert _dropped(_train(sensor_store, seed=1)) != _dropped(first)  # another seed too


def test_workers_drop_sensors_alike_through_shared_memory_and_without(sensor_store: str):
    """With 2 workers, the batches they hand over through the shared-memory buffers (`eoscale.data.handover`, where the
    dropout writes into the buffer itself) are the plain DataLoader's, draws included."""
    shared = _train(sensor_store, workers=2, shared_memory=True)
    plain = _train(sensor_store, workers=2, shared_memory=False)
    assert len(shared) == len(plain)
    for a, b in zip(shared, plain, strict=True):
        assert torch.equal(a["tile"], b["tile"]) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["label"], b["label"])
    assert _dropped(shared) != _dropped(_train(sensor_store, workers=2, dropout=0.0))


def test_a_resumed_epoch_drops_what_the_uninterrupted_one_did(sensor_store: str):
    dm = TileDataModule(sensor_store, batch_size=4, num_workers=0, sensor_dropout=0.5, shared_memory=False)
    dm.setup("fit")
    loader = dm.train_dataloader()
    loader.set_epoch(1)
    with loader:
        whole = [dm.normalise(b) for b in loader]
    loader.load_state_dict({"epoch": 1, "batches": 3, "layout": loader.state_dict()["layout"]})
    with loader:
        rest = [dm.normalise(b) for b in loader]
    assert len(rest) == len(whole) - 3
    for a, b in zip(whole[3:], rest, strict=True):
        assert torch.equal(a["tile"], b["tile"]) and torch.equal(a["image"], b["image"])
        assert torch.equal(a["label"], b["label"])


def test_sensor_dropout_out_of_range_is_one_line(sensor_store: str):
    with pytest.raises(InputError, match="sensor_dropout must be at least 0 and less than 1, got 1"):
        TileDataModule(sensor_store, sensor_dropout=1.0)


def test_a_store_of_one_sensor_drops_nothing(store: str):
    """Sensor dropout never drops every group of a tile: on a store of one sensor, the batches of before."""
    for a, b in zip(_train(store, dropout=0.5), _train(store, dropout=0.0), strict=True):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
