"""torch's private DataLoader internals that eoscale._compat.torch relies on are still there, and its hooks run."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from eoscale._compat import torch as compat


def test_installed_torch_is_the_checked_one():
    assert compat.CHECKED.holds(), f"torch {torch.__version__} is outside {compat.CHECKED.range}"


def test_the_private_names_exist():
    assert callable(DataLoader._get_iterator)
    for name in ("_try_get_data", "_next_data", "_shutdown_workers"):
        assert callable(getattr(_MultiProcessingDataLoaderIter, name)), name
    storage = compat.new_shared_storage(64)
    assert storage.nbytes() == 64 and storage.is_shared()


class _Numbers(IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        yield from (torch.tensor([i]) for i in range(info.id, 6, info.num_workers))


class _Counting(compat.HookedWorkerIter):
    received: list = []
    stopped: list = []

    def on_received(self, data):
        if isinstance(data, torch.Tensor):  # also a worker's end-of-data marker arrives here
            _Counting.received.append(int(data))

    def on_shutdown(self):
        _Counting.stopped.append(True)

    def on_next(self, batch):
        return batch * 10


class _Loader(compat.HookedLoader):
    def worker_iterator(self):
        return _Counting(self)


def test_hooks_see_every_batch_and_the_shutdown():
    loader = _Loader(_Numbers(), batch_size=None, num_workers=2)
    iterator = iter(loader)
    out = sorted(int(b) for b in iterator)
    compat.shutdown_workers(iterator)
    assert out == [0, 10, 20, 30, 40, 50]
    assert sorted(_Counting.received) == [0, 1, 2, 3, 4, 5]
    assert _Counting.stopped
