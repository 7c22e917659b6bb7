"""TileStream: whole-shard reads equal zarr's, batches are handed over compact (uint16 images, uint8 labels),
augmentation (drawn in the workers, applied by `normalise`) keeps labels on their pixels, `normalise` uses the store's statistics, bands are picked by name,
nodata becomes ignore."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from eoscale import schema
from eoscale.data import TileDataModule, augment, open_store
from eoscale.data.augment import dihedral
from eoscale.data.stream import ShardReader
from eoscale.store import reader
from tests.data.conftest import BANDS
from tests.rasters import class_of_pixels


@pytest.mark.parametrize("array", [schema.IMAGES, schema.LABELS])
def test_direct_shard_reads_equal_zarr(store, array):
    reader = ShardReader(Path(store) / array)
    assert reader.direct  # the layout eoscale ingest writes
    expected = zarr.open_array(str(Path(store) / array), mode="r")
    for start, stop in [(0, 8), (3, 29), (100, 101), (expected.shape[0] - 5, expected.shape[0])]:
        np.testing.assert_array_equal(reader.read(start, stop), expected[start:stop])
    reader._direct = None  # zarr's own path gives the same
    np.testing.assert_array_equal(reader.read(3, 29), expected[3:29])


def test_dihedral_moves_image_and_label_together():
    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, 1000, (16, 3, 8, 8), generator=g).to(torch.uint16)
    label = (image[:, 1].long() % 7).to(torch.uint8)  # a function of the pixels
    turn = torch.arange(16) % 8
    turned, turned_label = dihedral(image, label, turn)
    assert turned.dtype == torch.uint16 and turned_label.dtype == torch.uint8
    torch.testing.assert_close(turned_label, (turned[:, 1].long() % 7).to(torch.uint8))
    torch.testing.assert_close(turned[turn == 0], image[turn == 0])
    # the 8 choices are the 8 distinct symmetries of the square: np.rot90, then a left-right mirror for t >= 4
    for t in range(8):
        expected = np.rot90(image.numpy(), t % 4, axes=(-2, -1))
        expected = expected[..., ::-1] if t >= 4 else expected
        got, _ = dihedral(image, None, torch.full((16,), t))
        np.testing.assert_array_equal(got.numpy(), expected)
    tile = torch.arange(64.0).reshape(1, 1, 8, 8)
    assert len({dihedral(tile, None, torch.tensor([t]))[0].numpy().tobytes() for t in range(8)}) == 8
    # the accelerators' path (a gather through a table of pixel indices) turns exactly as the CPU's
    index = augment._table(8, torch.device("cpu"))[turn]
    torch.testing.assert_close(augment._gather(image, index), turned)
    torch.testing.assert_close(augment._gather(label, index), turned_label)


def test_augmented_training_batches_keep_labels_on_their_pixels(store):
    dm = TileDataModule(store, batch_size=16, num_workers=0, augment=True)
    dm.setup("fit")
    scene = open_store(store)[schema.SCENE].values
    stored_images = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r")[:, 0]  # one date
    stored_labels = zarr.open_array(str(Path(store) / schema.LABELS), mode="r")
    mean, std = (np.asarray(dm.statistics[k])[:, None, None] for k in ("mean", "std"))
    turned = checked = 0
    for compact in dm.train_dataloader():
        assert compact["turn"].dtype == torch.uint8 and compact["image"].dtype == torch.uint16
        batch = dm.normalise(compact)  # where the turns happen now (on the device, in training)
        assert "turn" not in batch
        image, label = batch["image"].numpy(), batch["label"].numpy()
        for i, tile in enumerate(batch["tile"].tolist()):
            t = int(compact["turn"][i])
            # the tile as stored, turned by the batch's choice: image and label alike
            expected = np.rot90(stored_labels[tile], t % 4, axes=(-2, -1))
            expected = expected[..., ::-1] if t >= 4 else expected
            known = label[i] != dm.ignore_index
            np.testing.assert_array_equal(label[i][known], expected[known])
            turned += not np.array_equal(label[i], stored_labels[tile])
            if scene[tile] != 0:
                continue  # scene 0's labels are on its own grid: label == class of the pixels, exactly
            raw = np.rint(image[i] * std + mean).astype(np.int64)  # back from the normalised image
            np.testing.assert_array_equal(label[i][known], class_of_pixels(raw[0])[known])
            raw_stored = stored_images[tile].astype(np.int64)
            np.testing.assert_array_equal(np.sort(raw[:, known].ravel()), np.sort(np.rot90(
                raw_stored, t % 4, axes=(-2, -1))[..., ::-1 if t >= 4 else 1][:, known].ravel()))
            checked += 1
    assert turned > 0 and checked > 0  # the augmentation did turn tiles, and scene 0 was checked


def test_evaluation_batches_are_not_turned(store):
    dm = TileDataModule(store, batch_size=16, num_workers=0, augment=True)
    dm.setup("validate")
    labels = zarr.open_array(str(Path(store) / schema.LABELS), mode="r")
    for batch in dm.val_dataloader():
        assert "turn" not in batch
        np.testing.assert_array_equal(batch["label"].numpy(), labels.oindex[batch["tile"].numpy()])


def test_workers_hand_over_compact_batches_and_normalise_converts_them(store):
    dm = TileDataModule(store, batch_size=8, num_workers=1)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "label", "tile", "turn"}  # training: each tile's turn, for `normalise` to apply
    assert (batch["image"].dtype, batch["label"].dtype, batch["tile"].dtype) == (torch.uint16, torch.uint8, torch.int64)
    assert batch["image"].shape == (8, len(BANDS), dm.tile_size, dm.tile_size)
    ready = dm.normalise(batch)
    assert set(ready) == {"image", "label", "tile"}
    assert (ready["image"].dtype, ready["label"].dtype, ready["tile"].dtype) == (torch.float32, torch.int64, torch.int64)
    assert batch["image"].dtype == torch.uint16  # the input batch is left as it was
    again = dm.normalise(ready)  # converted batches pass through unchanged
    assert all(again[k] is ready[k] for k in ready)
    torch.testing.assert_close(ready["label"], dihedral(batch["image"], batch["label"], batch["turn"])[1].long())


def test_normalisation_uses_store_statistics_of_bands_picked_by_name(store):
    dm = TileDataModule(store, batch_size=8, num_workers=0, bands=["B08", "B03"])
    dm.setup("validate")
    attrs = open_store(store).attrs
    stats = attrs[schema.ATTR_STATISTICS]
    assert dm.band_names == ["B08", "B03"] and dm.num_bands == 2
    assert dm.statistics == {"mean": [stats["mean"][6], stats["mean"][1]], "std": [stats["std"][6], stats["std"][1]]}
    images = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r")[:, 0]  # one date
    labels = zarr.open_array(str(Path(store) / schema.LABELS), mode="r")
    mean = np.asarray(dm.statistics["mean"], dtype=np.float32)[:, None, None]
    std = np.asarray(dm.statistics["std"], dtype=np.float32)[:, None, None]
    for batch in dm.val_dataloader():
        batch = dm.normalise(batch)
        assert batch["image"].dtype == torch.float32 and batch["label"].dtype == torch.int64
        for i, tile in enumerate(batch["tile"].tolist()):
            raw = images[tile][[6, 1]]
            nodata = (raw == attrs[schema.ATTR_NODATA]).any(axis=0)
            expected = np.where(nodata, 0.0, (raw.astype(np.float32) - mean) / std)
            np.testing.assert_allclose(batch["image"][i].numpy(), expected, rtol=1e-5, atol=1e-4)
            label = batch["label"][i].numpy()
            assert (label[nodata] == dm.ignore_index).all()
            np.testing.assert_array_equal(label[~nodata], labels[tile][~nodata])


@pytest.mark.parametrize("nodata", [0, 7])  # 0: the max-over-bands path; 7: the general one
def test_normalise_masks_pixels_with_every_band_at_nodata(store, nodata):
    dm = TileDataModule(store)
    dm._attrs = {**dm.attrs, schema.ATTR_NODATA: nodata}
    image = torch.full((1, len(BANDS), 2, 2), 1000, dtype=torch.uint16)
    image[0, :, 0, 1] = nodata  # a pixel without data: every band at the store's nodata
    image[0, 3, 1, 0] = nodata  # one dark band at one pixel: data (GDAL's all-bands semantics)
    out = dm.normalise({"image": image, "tile": torch.zeros(1, dtype=torch.int64)})
    assert (out["image"][0, :, 0, 1] == 0).all() and (out["image"][0, :, 1, :] != 0).all()


def test_nodata_pixels_are_ignored_and_zero(store):
    dm = TileDataModule(store, batch_size=8, num_workers=0, augment=False)
    dm.setup("fit")
    found = 0
    for batch in dm.train_dataloader():
        raw = zarr.open_array(str(Path(store) / schema.IMAGES), mode="r").oindex[batch["tile"].numpy()][:, 0]
        nodata = (raw == 0).all(axis=1)
        found += int(nodata.sum())
        assert (batch["label"].numpy()[nodata] == dm.ignore_index).all()  # folded in the workers already
        batch = dm.normalise(batch)
        assert (batch["image"].numpy().transpose(1, 0, 2, 3)[:, nodata] == 0).all()
        assert (batch["image"].numpy().transpose(1, 0, 2, 3)[:, ~nodata] != 0).mean() > 0.99
    assert found > 0


def test_label_free_batches_have_no_label(store):
    dm = TileDataModule(store, batch_size=8, num_workers=0, labels=False)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"image", "tile", "turn"}
    assert batch["image"].shape == (8, len(BANDS), dm.tile_size, dm.tile_size)
    assert set(dm.normalise(batch)) == {"image", "tile"} and dm.normalise(batch)["image"].dtype == torch.float32


def test_workers_without_a_batch_are_fine(store):
    dm = TileDataModule(store, batch_size=64, num_workers=3)  # fewer batches than workers
    dm.setup("validate")
    loader = dm.val_dataloader()
    tiles = [t for batch in loader for t in batch["tile"].tolist()]
    assert len(loader) == -(-len(tiles) // 64)
    assert tiles == list(range(*dm.split_range("val")))  # evaluation keeps store order within a worker


@pytest.mark.parametrize("bands", [None, ["B08", "B03"]])
def test_batches_through_zarr_equal_the_direct_reads(store, monkeypatch, bands):
    def batches():
        dm = TileDataModule(store, batch_size=8, num_workers=0, bands=bands, seed=5)
        dm.setup("fit")
        return [dm.normalise(b) for b in dm.train_dataloader()]

    direct = batches()
    monkeypatch.setattr(reader, "_direct_layout", lambda array: None)  # a layout the direct path does not know
    through_zarr = batches()
    assert len(direct) == len(through_zarr) > 0
    for a, b in zip(direct, through_zarr, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
