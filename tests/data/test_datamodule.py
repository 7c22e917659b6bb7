"""TileDataModule: drives a Lightning Trainer, exposes the band contract, refuses bad input in one line."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import zarr
from torch import nn

from eoscale import schema
from eoscale.classes import ClassTable
from eoscale.data import TileDataModule, read_store_attrs
from eoscale.errors import BandMismatchError, IncompleteStoreError, InputError, StoreError, StoreNotFoundError
from tests.data.conftest import BANDS


class PixelClassifier(L.LightningModule):
    """A 1×1 convolution: the smallest segmentation model."""

    def __init__(self, bands: int, classes: int, ignore_index: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(bands, classes, 1)
        self.loss = nn.CrossEntropyLoss(ignore_index=ignore_index)
        self.seen: dict[int, list[int]] = {}
        self.batches: list[dict[str, torch.Tensor]] = []  # as training_step received them

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).extend(batch["tile"].tolist())
        self.batches.append({k: v.clone() for k, v in batch.items()})
        return self.loss(self.conv(batch["image"]), batch["label"])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(self.conv(batch["image"]), batch["label"]))

    def predict_step(self, batch, batch_idx):
        return batch["tile"], self.conv(batch["image"]).argmax(1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**{**defaults, **kwargs})


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*suggested max number of worker.*")
        yield


def test_fast_dev_run_trains_a_1x1_conv_on_normalised_batches(store):
    dm = TileDataModule(store, batch_size=8, num_workers=1)
    model = PixelClassifier(dm.num_bands, dm.num_classes, dm.ignore_index)
    before = model.conv.weight.detach().clone()
    _trainer(fast_dev_run=2).fit(model, datamodule=dm)
    assert len(model.seen[0]) == 16
    assert not torch.equal(before, model.conv.weight)
    # the datamodule's on_after_batch_transfer ran: float32 normalised images and int64 labels reach the model
    images = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r")[:, 0]  # (tile, band, y, x): one date
    mean = torch.tensor(dm.statistics["mean"]).view(-1, 1)
    std = torch.tensor(dm.statistics["std"]).view(-1, 1)
    for batch in model.batches:
        assert set(batch) == {"image", "label", "tile"}
        assert (batch["image"].dtype, batch["label"].dtype, batch["tile"].dtype) == (torch.float32, torch.int64, torch.int64)
        for i, tile in enumerate(batch["tile"].tolist()):
            raw = torch.from_numpy(images[tile].astype("float32")).flatten(1)
            expected = torch.where((raw == 0).any(0), 0.0, (raw - mean) / std)
            # turned tiles hold the same values per band: compare them sorted
            got = batch["image"][i].flatten(1)
            torch.testing.assert_close(got.sort(1).values, expected.sort(1).values, rtol=1e-5, atol=1e-4)


def test_lightning_sets_the_epoch_on_persistent_workers(store):
    dm = TileDataModule(store, batch_size=16, num_workers=2, seed=3)
    model = PixelClassifier(dm.num_bands, dm.num_classes, dm.ignore_index)
    _trainer(max_epochs=2, limit_val_batches=0).fit(model, datamodule=dm)
    expected = TileDataModule(store, batch_size=16, num_workers=2, seed=3)
    expected.setup("fit")
    loader = expected.train_dataloader()
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        assert model.seen[epoch] == [t for batch in loader for t in batch["tile"].tolist()]
    assert model.seen[0] != model.seen[1]
    start, stop = dm.split_range("train")
    assert sorted(model.seen[0]) == list(range(start, stop))


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_trainer_predicts_every_tile_of_the_chosen_split_once(store):
    dm = TileDataModule(store, batch_size=16, num_workers=1, predict_split="val")
    model = PixelClassifier(dm.num_bands, dm.num_classes, dm.ignore_index)
    out = _trainer().predict(model, datamodule=dm)
    tiles = torch.cat([tile for tile, _ in out]).tolist()
    assert sorted(tiles) == list(range(*dm.split_range("val")))
    assert out[0][1].shape[1:] == (dm.tile_size, dm.tile_size)


def test_band_contract_and_class_weights(store):
    dm = TileDataModule(store, batch_size=8)
    attrs = read_store_attrs(store)
    assert dm.band_names == BANDS and dm.num_bands == 10
    assert dm.tile_size == 16 and dm.ignore_index == 255
    assert dm.class_table == ClassTable.from_records(attrs["classes"]) and dm.num_classes == 4
    assert dm.statistics["mean"] == attrs["statistics"]["mean"]
    weights = dm.class_weights()
    assert weights.shape == (4,) and weights.dtype == torch.float32 and (weights > 0).all()
    start, stop = dm.split_range("train")
    counts = zarr.open_array(str(Path(store) / schema.CLASS_COUNTS), mode="r")[start:stop].sum(0)
    assert torch.argmax(weights).item() == counts.argmin()  # the rarest class weighs most


def _copy(store: str, tmp_path: Path, **attrs) -> str:
    """A copy of the store with some attributes changed (tests only: eoscale itself never edits a store)."""
    path = tmp_path / "copy.zarr"
    shutil.copytree(store, path)
    zarr.open_group(str(path), mode="r+").attrs.update(attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
    return str(path)


def test_a_band_of_std_0_in_an_old_store_is_refused_naming_it(store, tmp_path):
    """Guards issue 46 item 4: a store from before ingest refused a band without valid pixels holds mean 0 and std 0
    for it, which the loader clamped to 1e-6: a ×1,000,000 scale of that band."""
    stats = read_store_attrs(store)["statistics"]
    path = _copy(store, tmp_path, statistics={**stats, "std": [0.0, *stats["std"][1:]]})
    with pytest.raises(InputError, match=f"tile store {path!r} gives band B02 a std of 0 .* ingest again without band "
                                         "B02"):
        TileDataModule(path, batch_size=4).setup("fit")
    TileDataModule(path, batch_size=4, bands=BANDS[1:]).setup("fit")  # a choice of bands without it trains


def test_a_batch_larger_than_the_train_share_is_refused_or_lowered_with_fit_batch_size(store, capsys):
    """Guards issue 46 item 7: the default recipe (fit_batch_size) fits a small store at the batch its train split
    holds, said in one line, instead of refusing; without the option the refusal stands, as before."""
    start, stop = TileDataModule(store).split_range("train")
    with pytest.raises(InputError, match=rf"batch_size=1000 is larger than each rank's share .* at most {stop - start}"):
        TileDataModule(store, batch_size=1000).setup("fit")
    dm = TileDataModule(store, batch_size=1000, num_workers=0, fit_batch_size=True)
    dm.setup("fit")
    assert dm.batch_size == stop - start and len(dm.train_dataloader()) == 1
    assert capsys.readouterr().out.strip().endswith(f"lowered to {stop - start} (fit_batch_size)")
    assert len(dm.val_dataloader()) == 1  # validation at the lowered batch too


def test_missing_store_says_to_ingest(tmp_path):
    dm = TileDataModule(tmp_path / "nothing.zarr")
    with pytest.raises(StoreNotFoundError, match="run 'eoscale ingest' first"):
        dm.prepare_data()


def test_incomplete_store_is_refused(store, tmp_path):
    dm = TileDataModule(_copy(store, tmp_path, complete=False))
    with pytest.raises(IncompleteStoreError, match="not finished"):
        dm.prepare_data()


def test_store_of_another_version_is_refused(store, tmp_path):
    dm = TileDataModule(_copy(store, tmp_path, eoscale_schema_version=99))
    with pytest.raises(StoreError, match="schema version 99"):
        dm.setup("fit")


def test_unknown_band_names_the_bands_there_are(store):
    with pytest.raises(BandMismatchError, match="'B99' is not in tile store .* choose from B02, B03"):
        TileDataModule(store, bands=["B02", "B99"]).setup("fit")


def test_empty_split_is_refused_and_empty_val_turns_validation_off(store, tmp_path):
    splits = read_store_attrs(store)["splits"]
    path = _copy(store, tmp_path, splits={**splits, "test": [0, 0], "val": [0, 0]})
    with pytest.raises(InputError, match="'test' split .* has no tiles: ingest again with a --split"):
        TileDataModule(path).setup("test")
    dm = TileDataModule(path, batch_size=8, num_workers=0)
    dm.setup("fit")
    assert dm.val_dataloader() == []


def test_batch_larger_than_a_rank_share_is_refused(store):
    with pytest.raises(InputError, match=r"batch_size=1000 is larger .* use a batch size of at most 200"):
        TileDataModule(store, batch_size=1000).setup("fit")


def test_train_fraction_trains_on_a_fixed_subset_and_leaves_evaluation_whole(store):
    dm = TileDataModule(store, batch_size=4, num_workers=0, train_fraction=0.1, seed=2)
    dm.setup("fit")
    start, stop = dm.split_range("train")
    subset = {t for a, b in dm.tile_ranges("train") for t in range(a, b)}
    assert len(subset) == round(0.1 * (stop - start)) and subset <= set(range(start, stop))
    loader = dm.train_dataloader()
    epochs = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        epochs.append([t for batch in loader for t in batch["tile"].tolist()])
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(subset)  # once per epoch, the same subset
    assert epochs[0] != epochs[1] and len(loader) == -(-len(subset) // 4)
    assert [t for b in dm.val_dataloader() for t in b["tile"].tolist()] == list(range(*dm.split_range("val")))
    again = TileDataModule(store, train_fraction=0.1, seed=2).tile_ranges("train")
    assert np.array_equal(again, dm.tile_ranges("train"))  # deterministic from the seed
    other = TileDataModule(store, train_fraction=0.1, seed=3).tile_ranges("train")
    assert not np.array_equal(other, dm.tile_ranges("train"))
    # class weights count only the labels trained on
    weights = dm.class_weights()
    counts = zarr.open_array(str(Path(store) / schema.CLASS_COUNTS), mode="r").oindex[sorted(subset)].sum(0)
    present = counts > 0
    expected = np.zeros(len(counts))
    expected[present] = counts.sum() / (present.sum() * counts[present])
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6)


def test_train_fraction_smaller_than_a_batch_is_refused(store):
    with pytest.raises(InputError, match=r"batch_size=32 is larger .*\(20 tiles on each of 1 ranks, train_fraction=0.1\)"
                                         r": use a batch size of at most 20 or a larger train_fraction"):
        TileDataModule(store, batch_size=32, train_fraction=0.1).setup("fit")


@pytest.mark.parametrize("options, match", [
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"predict_split": "holdout"}, "choose one of train, val, test"),
    ({"train_fraction": 0}, "train_fraction must be more than 0 and at most 1, got 0"),
    ({"train_fraction": 1.5}, "train_fraction must be more than 0 and at most 1, got 1.5"),
])
def test_bad_options_are_refused_at_once(store, options, match):
    with pytest.raises(InputError, match=match):
        TileDataModule(store, **options)
