"""A training epoch resumed from a checkpoint taken in its middle trains exactly the batches it had left."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning.pytorch.callbacks import Callback, OnExceptionCheckpoint

from eoscale.data import TileDataModule
from eoscale.data.partition import worker_batches, worker_delivered
from tests.data.test_datamodule import PixelClassifier, _trainer


def _batches(loader) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in batch.items()} for batch in loader]


# and of a store of 3 dates, with training's date dropout and pick (drawn after the turns, from the same numbers)
TIME = {"date_dropout": 0.3, "max_dates": 2}
KEYS = {"image", "label", "tile", "turn"}


@pytest.mark.parametrize("workers, dates", [(0, 1), (2, 1), (3, 1), (0, 3), (3, 3)])
def test_a_loader_resumed_after_n_batches_yields_exactly_the_rest_of_the_epoch(request, workers, dates):
    store = request.getfixturevalue("store" if dates == 1 else "season")
    dm = TileDataModule(store, batch_size=8, num_workers=workers, seed=5, **(TIME if dates > 1 else {}))
    dm.setup("fit")
    with dm.train_dataloader() as loader:
        assert len(loader) % 3 != 0  # workers with different numbers of batches (3 workers)
        loader.set_epoch(2)
        whole = _batches(loader)
        assert loader.state_dict()["batches"] == len(whole) == len(loader)
        layout = loader.state_dict()["layout"]
        for used in (0, 1, 2, 5, len(whole) - 1, len(whole)):
            loader.set_epoch(0)  # whatever epoch it was at: the state names the epoch
            loader.load_state_dict({"epoch": 2, "batches": used, "layout": layout})
            rest = _batches(loader)
            assert len(rest) == len(whole) - used
            for got, expected in zip(rest, whole[used:], strict=True):
                assert got.keys() == expected.keys() == (KEYS if dates == 1 else KEYS | {"dates", "date_valid", "date_pick"})
                for key in got:  # the same tiles, in the same order, with the same turns
                    assert torch.equal(got[key], expected[key]), (used, key)
            assert loader.state_dict()["batches"] == len(whole)
        # once the resumed epoch has ended, that epoch is whole again
        assert loader.dataset.resume_point is None
        assert len(_batches(loader)) == len(whole)


def test_worker_delivered_counts_whole_rounds_then_the_first_workers():
    for batches in range(0, 12):
        for workers in (1, 2, 3, 5):
            sizes = [worker_batches(batches, w, workers)[1] - worker_batches(batches, w, workers)[0]
                     for w in range(workers)]
            turns = [w for r in range(max(sizes, default=0)) for w in range(workers) if r < sizes[w]]
            for used in range(batches + 1):
                assert [worker_delivered(used, w, workers) for w in range(workers)] == \
                    [turns[:used].count(w) for w in range(workers)]


def test_resume_from_another_layout_warns_and_names_what_differs(store):
    dm = TileDataModule(store, batch_size=8, num_workers=0, seed=5)
    dm.setup("fit")
    loader = dm.train_dataloader()
    state = {"epoch": 1, "batches": 2, "layout": {**loader.state_dict()["layout"], "workers": 2, "seed": 4}}
    with pytest.warns(UserWarning, match="differed in workers 2 → 0, seed 4 → 5: the rest of that epoch is not "
                                         "exactly the tiles the first run left"):
        loader.load_state_dict(state)
    assert loader.dataset.resume_point == (1, 2)


class _Stop(Callback):
    """Save a checkpoint and stop, as `eoscale.train.launch.requeue` does: after batch `batch` of epoch `epoch`, or at
    the end of that epoch (`batch=None`, as `ModelCheckpoint` does)."""

    def __init__(self, path, epoch: int, batch: int | None) -> None:
        self.path, self.epoch, self.batch = path, epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            trainer.save_checkpoint(self.path, weights_only=False)
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch and self.batch is None:
            trainer.save_checkpoint(self.path, weights_only=False)
            trainer.should_stop = True


class _Fail(Callback):
    """Fail when batch `batch` of epoch `epoch` is about to be trained (taken from the loader, not trained)."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            raise RuntimeError("a node failed")


def _fit(store, *, callbacks=(), ckpt_path=None, max_epochs=3, **trainer) -> PixelClassifier:
    dm = TileDataModule(store, batch_size=8, num_workers=2, seed=7)
    model = PixelClassifier(dm.num_bands, dm.num_classes, dm.ignore_index)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _trainer(max_epochs=max_epochs, limit_val_batches=0, callbacks=list(callbacks), **trainer).fit(
            model, datamodule=dm, ckpt_path=ckpt_path)
    model.said = [str(w.message) for w in said]
    assert not [m for m in model.said if "not resumable" in m]
    return model


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_a_fit_resumed_mid_epoch_trains_each_tile_of_that_epoch_once(store, tmp_path):
    whole = _fit(store).seen
    assert whole[1] != whole[2]
    # stopped after the 3rd batch of epoch 1, then resumed: epoch 1 goes on where it stopped
    first = _fit(store, callbacks=[_Stop(tmp_path / "mid.ckpt", epoch=1, batch=2)]).seen
    assert first[1] == whole[1][: 3 * 8]
    model = _fit(store, ckpt_path=tmp_path / "mid.ckpt")
    resumed = model.seen
    assert not [m for m in model.said if "does not record" in m]
    assert first[1] + resumed[1] == whole[1]
    assert resumed[2] == whole[2]
    # failed with the 4th batch taken but not trained, saved by OnExceptionCheckpoint: that batch is trained on
    # resuming (Lightning counts it as not done; the loader had yielded it)
    with pytest.raises(RuntimeError, match="a node failed"):
        _fit(store, callbacks=[_Fail(epoch=1, batch=3), OnExceptionCheckpoint(tmp_path, "failed")],
             enable_checkpointing=True, default_root_dir=tmp_path)
    assert _fit(store, ckpt_path=tmp_path / "failed.ckpt").seen[1] == whole[1][3 * 8 :]
    # a checkpoint written before the loader's state was recorded: said, not silent
    old = torch.load(tmp_path / "mid.ckpt", weights_only=False)
    del old["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    torch.save(old, tmp_path / "old.ckpt")
    said = _fit(store, ckpt_path=tmp_path / "old.ckpt").said
    assert [m for m in said if m.startswith("resuming epoch 1 after 3 batches from a checkpoint that does not record")]
    # stopped at an epoch's end: the resumed run makes the next epoch in its own order (not epoch 0's: Lightning
    # takes the first batch before it sets the epoch)
    _fit(store, callbacks=[_Stop(tmp_path / "end.ckpt", epoch=0, batch=None)])
    assert _fit(store, ckpt_path=tmp_path / "end.ckpt").seen == {1: whole[1], 2: whole[2]}
