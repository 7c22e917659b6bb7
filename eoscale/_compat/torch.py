"""torch's private DataLoader internals and shared-memory storage, used by `eoscale.data`'s batch handover.

`TileLoader` (eoscale/data/datamodule.py) hands batches from its workers to the main process in reusable
shared-memory buffers (`eoscale.data.handover`). That needs what torch does not publish:

- `DataLoader._get_iterator` (to use its own worker iterator), and of `_MultiProcessingDataLoaderIter` the methods
  `_try_get_data` (every batch received, also those a new epoch throws away), `_next_data` (the batch handed out)
  and `_shutdown_workers` (the workers have stopped): `HookedLoader` and `HookedWorkerIter` below;
- `UntypedStorage._new_shared` (a worker's fresh buffer, in shared memory already, as `default_collate` makes
  them): `new_shared_storage`.

Checked on `CHECKED`; outside it eoscale uses plain DataLoader batches (`shared_memory=False`), said once
(`CHECKED.allowed`). tests/_compat/test_torch.py and tests/data/test_handover.py fail if the internals change.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from eoscale._compat import Checked

CHECKED = Checked(
    "torch", "2.14", "2.15",
    "DataLoader internals (_get_iterator, _try_get_data, _next_data, _shutdown_workers) and UntypedStorage._new_shared")
FALLBACK = "using plain DataLoader batches (shared_memory=False)"


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """A storage of `nbytes` in shared memory (what `default_collate` makes in a DataLoader worker)."""
    return torch.UntypedStorage._new_shared(nbytes)


class HookedWorkerIter(_MultiProcessingDataLoaderIter):
    """The DataLoader's own multi-process iterator with three hooks a subclass fills in."""

    def on_received(self, data: object) -> None:
        """Every batch (as the worker sent it) that arrives, also those that a new epoch's reset throws away."""

    def on_shutdown(self) -> None:
        """After the workers have stopped."""

    def on_next(self, batch: object) -> object:
        """The batch handed to the caller (default: as it arrived)."""
        return batch

    def _try_get_data(self, *args, **kwargs):
        success, data = super()._try_get_data(*args, **kwargs)
        if success and isinstance(data, tuple) and len(data) == 2:
            self.on_received(data[1])
        return success, data

    def _shutdown_workers(self):
        super()._shutdown_workers()
        self.on_shutdown()

    def _next_data(self):
        return self.on_next(super()._next_data())


class HookedLoader(DataLoader):
    """A DataLoader whose worker iterator a subclass may supply (`worker_iterator`; None: the DataLoader's own)."""

    def worker_iterator(self) -> HookedWorkerIter | None:
        return None

    def _get_iterator(self):
        iterator = self.worker_iterator()
        return iterator if iterator is not None else super()._get_iterator()


def shutdown_workers(iterator: object) -> None:
    """Stop an iterator's workers now (a no-op for the single-process iterator)."""
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
