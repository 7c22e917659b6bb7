"""Batches of a store of several dates (T = 3, `tests.time_stores`): (B, T, C, H, W) images normalised per band
over every date, a date without observations (or dropped) reading 0, the same turn for every date of a tile,
training's date dropout and `max_dates` pick, and each throughput switch giving the same batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

from eoscale.data import TileDataModule
from eoscale.data.augment import _turned
from eoscale.data.stream import NO_DATE
from eoscale.errors import InputError
from eoscale.store import schema


@pytest.fixture(scope="module")
def arrays(season) -> dict[str, np.ndarray]:
    group = zarr.open_group(season, mode="r")
    return {name: group[name][:] for name in (schema.IMAGES, schema.LABELS, schema.DATES, schema.DATE_VALID)}


def _normalised(dm: TileDataModule, split: str = "train") -> list[dict[str, torch.Tensor]]:
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    with loader:
        return [(dict(b), dm.normalise({k: v.clone() for k, v in b.items()})) for b in loader]


def _expected(dm: TileDataModule, arrays: dict, tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    raw = arrays[schema.IMAGES][tiles].astype(np.float32)  # (B, T, C, H, W)
    stats = dm.statistics
    mean, std = (np.asarray(stats[k], np.float32)[:, None, None] for k in ("mean", "std"))
    keep = (raw.max(axis=2, keepdims=True) > 0) & (arrays[schema.DATE_VALID][tiles] > 0)[:, :, None, None, None]
    nodata = (raw.max(axis=2) == 0).all(axis=1)  # no data on any date
    return (raw - mean) / std * keep, np.where(nodata, schema.IGNORE_INDEX, arrays[schema.LABELS][tiles])


def test_batches_of_three_dates_are_normalised_per_band_on_every_date(season, arrays):
    dm = TileDataModule(season, batch_size=8, num_workers=1, seed=2, augment=False)
    assert dm.time_steps == 3
    dm.setup("fit")
    seen, masked_steps = [], 0
    for _raw, batch in _normalised(dm) + _normalised(dm, "val"):
        tiles = batch["tile"].numpy()
        seen += tiles.tolist()
        assert batch["image"].shape == (len(tiles), 3, dm.num_bands, 16, 16) and batch["image"].dtype == torch.float32
        image, label = _expected(dm, arrays, tiles)
        np.testing.assert_allclose(batch["image"].numpy(), image, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(batch["label"].numpy(), label)
        np.testing.assert_array_equal(batch["date_valid"].numpy(), arrays[schema.DATE_VALID][tiles])
        np.testing.assert_array_equal(batch["dates"].numpy(), arrays[schema.DATES][tiles])
        empty = batch["date_valid"].numpy() == 0
        masked_steps += int(empty.sum())
        assert (batch["image"].numpy()[empty] == 0).all()  # a date without observations reads 0, not its nodata
    assert len(seen) == len(set(seen))
    assert masked_steps > 0 and (arrays[schema.DATES] != NO_DATE).all()


def test_a_tile_is_turned_alike_on_every_date(season, arrays):
    dm = TileDataModule(season, batch_size=8, num_workers=0, seed=2)
    dm.setup("fit")
    turns = set()
    for raw, batch in _normalised(dm)[:6]:
        tiles = raw["tile"].numpy()
        image, label = _expected(dm, arrays, tiles)
        for i, turn in enumerate(raw["turn"].tolist()):
            turns.add(turn)
            np.testing.assert_allclose(batch["image"][i].numpy(), _turned(image[i], turn), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(batch["label"][i].numpy(), _turned(label[i], turn))
    assert len(turns) > 3


def test_date_dropout_and_max_dates_pick_valid_dates_in_time_order(season, arrays):
    dm = TileDataModule(season, batch_size=8, num_workers=1, seed=4, augment=True, date_dropout=0.3, max_dates=2)
    dm.setup("fit")
    dropped = kept = 0
    for raw, batch in _normalised(dm):
        tiles = raw["tile"].numpy()
        pick = raw["date_pick"].numpy()
        assert pick.shape == (len(tiles), 2) and (np.diff(pick, axis=1) > 0).all()  # in time order
        assert batch["image"].shape[1] == 2 and batch["date_valid"].shape == batch["dates"].shape == (len(tiles), 2)
        np.testing.assert_array_equal(batch["dates"].numpy(), np.take_along_axis(arrays[schema.DATES][tiles], pick, 1))
        stored = arrays[schema.DATE_VALID][tiles]
        after = raw["date_valid"].numpy()  # after dropout, before the pick
        assert (after <= stored).all() and ((after == 0) | (after == stored)).all()
        dropped += int(((after == 0) & (stored > 0)).sum())
        kept += int((after > 0).sum())
        assert ((after.max(axis=1) > 0) | (stored.max(axis=1) == 0)).all()  # a tile with data keeps a date
        # the valid dates come first: a tile with two or more left has two valid dates picked
        picked_valid = (batch["date_valid"].numpy() > 0).sum(axis=1)
        np.testing.assert_array_equal(picked_valid, np.minimum((after > 0).sum(axis=1), 2))
        assert (batch["image"].numpy()[batch["date_valid"].numpy() == 0] == 0).all()
    assert 0.15 < dropped / (dropped + kept) < 0.45


def test_evaluation_keeps_every_date(season):
    dm = TileDataModule(season, batch_size=8, num_workers=0, date_dropout=0.5, max_dates=1)
    dm.setup("fit")
    raw, batch = _normalised(dm, "val")[0]
    assert "date_pick" not in raw and batch["image"].shape[1] == 3


@pytest.mark.parametrize("switch", [{"shared_memory": False}, {"direct_decode": False}, {"num_workers": 0},
                                    {"pin_memory": True}])
def test_each_throughput_switch_gives_the_same_batches_of_three_dates(season, switch):
    def batches(**options):
        dm = TileDataModule(season, **{"batch_size": 4, "num_workers": 1, "seed": 3, "date_dropout": 0.2,
                                       "max_dates": 2, **options})
        dm.setup("fit")
        loader = dm.train_dataloader()
        if options.get("num_workers", 1) > 0 and options.get("shared_memory", True):
            assert loader.handover is not None  # several dates travel through the shared-memory buffers too
        with loader:
            return [{k: v.clone() for k, v in b.items()} for b in loader]

    if switch.get("pin_memory") and not torch.cuda.is_available():
        pytest.skip("pinning needs an accelerator")
    on, off = batches(), batches(**switch)
    assert len(on) == len(off) > 0
    for a, b in zip(on, off, strict=True):
        assert a.keys() == b.keys() == {"image", "label", "tile", "turn", "dates", "date_valid", "date_pick"}
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("options, match", [({"date_dropout": 1.0}, "date_dropout must be"),
                                            ({"max_dates": 0}, "max_dates must be at least 1")])
def test_bad_date_options_are_refused_in_one_line(season, options, match):
    from eoscale.errors import InputError

    with pytest.raises(InputError, match=match) as err:
        TileDataModule(season, **options)
    assert "\n" not in str(err.value)


def test_date_step_reads_one_step_of_a_season_as_a_single_date_store(season, arrays):
    dm = TileDataModule(season, batch_size=8, num_workers=1, seed=2, augment=False, date_step=1)
    assert dm.time_steps == 1 and dm.store_time_steps == 3
    dm.setup("fit")
    masked = 0
    for _raw, batch in _normalised(dm) + _normalised(dm, "val"):
        tiles = batch["tile"].numpy()
        assert batch["image"].shape == (len(tiles), dm.num_bands, 16, 16) and "date_valid" not in batch
        image, label = _expected(dm, arrays, tiles)
        np.testing.assert_allclose(batch["image"].numpy(), image[:, 1], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(batch["label"].numpy(), label)  # labelled where any date holds data
        masked += int((arrays[schema.DATE_VALID][tiles, 1] == 0).sum())
    assert masked > 0  # the masked step (tests.time_stores) is among them, and reads 0
    with pytest.raises(InputError, match="date_step=3 is not a step of tile store .* choose one of 0 to 2"):
        TileDataModule(season, date_step=3).time_steps  # noqa: B018
