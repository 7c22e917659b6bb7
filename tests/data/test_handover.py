"""Handover: workers fill their batch buffers again only once the main process let go of them, so batches
that are kept stay intact; batches come out the same as without workers."""

from __future__ import annotations

import collections

import pytest
import torch

from eoscale.data import TileDataModule, handover
from eoscale.data.handover import _WIRE, Handover


@pytest.fixture
def slots_used(monkeypatch):
    """(worker, slot) of every packed batch the main process unpacks (slot -1: a buffer used once)."""
    used = collections.Counter()
    received = Handover.received

    def recording(self, batch):
        if isinstance(batch, dict) and _WIRE in batch:
            used[tuple(batch[_WIRE]["layout"][:2])] += 1
        return received(self, batch)

    monkeypatch.setattr(Handover, "received", recording)
    return used


def _by_tile(batches) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    return {t: (b["image"][i], b["label"][i]) for b in batches for i, t in enumerate(b["tile"].tolist())}


def test_buffers_are_reused_and_kept_batches_stay_intact(store, slots_used, request):
    expected = TileDataModule(store, batch_size=4, num_workers=0)
    expected.setup("validate")
    reference = _by_tile([{k: v.clone() for k, v in b.items()} for b in expected.val_dataloader()])

    dm = TileDataModule(store, batch_size=4, num_workers=2)
    dm.setup("validate")
    loader = dm.val_dataloader()
    request.addfinalizer(loader.close)  # its workers stop now, not at a garbage collection (TileLoader.close)
    for _ in range(2):  # batches dropped at once: the workers take the same few buffers again
        for batch in loader:
            assert set(batch) == {"image", "label", "tile"} and batch["image"].dtype == torch.uint16
    assert max(slots_used.values()) > 1 and all(slot >= 0 for _, slot in slots_used)

    kept = list(loader)  # every batch kept: no buffer may be filled again while the main process holds it
    assert any(slot < 0 for _, slot in slots_used)  # the workers ran out of free buffers and took new ones
    got = _by_tile(kept)
    assert got.keys() == reference.keys()
    for tile, (image, label) in reference.items():
        assert torch.equal(got[tile][0], image) and torch.equal(got[tile][1], label), f"tile {tile} changed"


def test_epochs_cut_short_do_not_use_up_the_buffers(store, slots_used, request):
    dm = TileDataModule(store, batch_size=4, num_workers=1)
    dm.setup("fit")
    loader = dm.train_dataloader()
    request.addfinalizer(loader.close)
    for epoch in range(2 * Handover.SLOTS):  # as limit_train_batches does: the queued batches are thrown away
        loader.set_epoch(epoch)
        next(iter(loader))
    slots_used.clear()
    assert sum(1 for _ in loader) > Handover.SLOTS  # every batch dropped at once
    assert all(slot >= 0 for _, slot in slots_used)


def test_a_user_worker_init_fn_still_runs_and_is_not_wrapped_twice(store, request):
    dm = TileDataModule(store, batch_size=8, num_workers=1)
    dm.setup("validate")
    loader = dm.val_dataloader()
    request.addfinalizer(loader.close)
    copy = type(loader)(loader.dataset, num_workers=1, worker_init_fn=loader.worker_init_fn)  # as Lightning does
    assert copy.worker_init_fn.args == (copy.handover, None)
    calls = torch.zeros(1, dtype=torch.int64).share_memory_()

    def init(worker_id):
        calls.add_(1)

    with type(loader)(loader.dataset, num_workers=1, worker_init_fn=init, persistent_workers=False) as mine:
        assert len(list(mine)) == len(loader) and int(calls) == 1


def test_the_main_process_maps_each_buffer_once_and_unmaps_it_when_the_workers_stop(store, slots_used, request):
    dm = TileDataModule(store, batch_size=2, num_workers=2)
    dm.setup("validate")
    loader = dm.val_dataloader()
    request.addfinalizer(loader.close)
    expected = [t for batch in loader for t in batch["tile"].tolist()]
    before = set(handover._MAPPED)  # the persistent workers' of `loader`
    mine = type(loader)(loader.dataset, num_workers=2, persistent_workers=False)
    mapped, tiles = collections.defaultdict(set), []
    for batch in mine:
        tiles += batch["tile"].tolist()
        for token, slots in handover._MAPPED.items():
            for slot, buffer in slots.items():
                mapped[token, slot].add(buffer.data_ptr())
    assert tiles == expected and len(tiles) // 2 > 2 * Handover.SLOTS  # slots reused
    new = {key: ptrs for key, ptrs in mapped.items() if key[0] not in before}
    assert len({token for token, _ in new}) == 2  # one name per worker
    assert all(len(ptrs) == 1 for ptrs in new.values())  # each buffer mapped once, then named
    assert set(handover._MAPPED) == before  # the epoch's workers stopped: nothing of theirs stays mapped


def test_torch_is_within_the_range_the_hooks_were_checked_against():
    assert handover.torch_checked(), (
        f"torch {torch.__version__} is outside handover.TORCH_CHECKED {handover.TORCH_CHECKED}: re-check the private "
        "DataLoader internals the handover hooks (_get_iterator, _try_get_data, _next_data, _shutdown_workers, "
        "UntypedStorage._new_shared), run tests/data/test_handover.py, then widen TORCH_CHECKED"
    )
    assert handover.torch_checked("2.14.1+cu130") and not handover.torch_checked("2.15.0")
    assert not handover.torch_checked("2.13.9")


def test_shared_memory_off_uses_no_private_allocator(store, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("UntypedStorage._new_shared called with shared_memory=False")

    monkeypatch.setattr(torch.UntypedStorage, "_new_shared", refuse)  # forked workers inherit it
    for options in ({"shared_memory": False}, {"shared_memory": False, "labels": False}):
        dm = TileDataModule(store, batch_size=4, num_workers=1, seed=3, **options)
        dm.setup("fit")
        with dm.train_dataloader() as loader:
            assert sum(len(b["tile"]) for b in loader) > 0
    dm = TileDataModule(store, batch_size=4, num_workers=1, seed=3)
    dm.setup("fit")
    loader = dm.train_dataloader()
    loader.handover = None  # the plain path with the switch on: it does allocate there (the test can fail)
    loader.dataset.private_shared = True
    plain = iter(torch.utils.data.DataLoader(loader.dataset, batch_size=None, num_workers=1))
    with pytest.raises(Exception, match="_new_shared called"):
        list(plain)
    plain._shutdown_workers()  # now, not at a garbage collection (see TileLoader.close)


@pytest.mark.parametrize("switch", ["shared_memory", "direct_decode"])
def test_each_switch_leaves_tile_order_and_batches_unchanged(store, switch):
    def batches(**options):
        dm = TileDataModule(store, batch_size=4, num_workers=1, seed=3, **options)
        dm.setup("fit")
        loader = dm.train_dataloader()
        if not options.get(switch, True):
            if switch == "shared_memory":
                assert loader.handover is None  # no private hooks: the DataLoader's own iterator
            else:
                assert not loader.dataset._open()[0].direct  # whole shards through zarr
        with loader:
            return [{k: v.clone() for k, v in b.items()} for b in loader]

    on, off = batches(), batches(**{switch: False})
    assert [b["tile"].tolist() for b in on] == [b["tile"].tolist() for b in off]
    for a, b in zip(on, off, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("shared_memory", [True, False])
def test_close_stops_the_workers_cleanly_even_from_a_reference_cycle(store, shared_memory):
    # a loader held in a reference cycle (a LightningDataModule holds its loaders so) is freed by the cyclic
    # collector, which stops its index queues' feeder threads before the iterator's __del__ sends the workers
    # their stop: they never hear it, and torch kills each after a 5 s join. close() stops them first, cleanly.
    dm = TileDataModule(store, batch_size=8, num_workers=1, shared_memory=shared_memory)
    dm.setup("fit")
    loader = dm.train_dataloader()
    loader.cycle = loader  # the reference cycle
    for _ in range(2):
        assert sum(len(b["tile"]) for b in loader) > 0
    workers = list(loader._iterator._workers)
    assert workers and all(w.is_alive() for w in workers)
    with loader:
        pass
    assert loader._iterator is None
    assert [w.exitcode for w in workers] == [0] * len(workers)  # exited on their own, not terminated
    # the loader still works after close: a new iterator and new workers
    assert sum(len(b["tile"]) for b in loader) > 0
    loader.close()
