"""`Handover`: the shared-memory batch buffers that `TileLoader`'s workers fill again once the main process let go.

Why: a fresh shared-memory buffer per batch (what `default_collate` does) cost 3–6 ms per 32 tiles of 10×64×64
here (2-core development machine), mostly page faults on its new pages: as much as decoding the tiles. A batch
travels as one flat uint8 tensor (tile ids, images, labels, turns: one file descriptor to pass instead of
several) with a ticket; `Handover` decides when a worker may fill that buffer again (see the class).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import get_worker_info

from eoscale._compat.torch import CHECKED as TORCH
from eoscale._compat.torch import FALLBACK, new_shared_storage

TORCH_CHECKED = (f">={TORCH.low}", f"<{TORCH.high}")
"""The torch versions whose private DataLoader internals the handover hooks were checked against
(`eoscale._compat.torch.CHECKED`). On any other torch, `TileLoader` falls back to plain DataLoader batches
(`shared_memory=False`) with one warning; to widen the range, re-check those internals and run
tests/_compat/test_torch.py and tests/data/test_handover.py."""


def torch_checked(version: str | None = None) -> bool:
    """Whether `version` (default: the installed torch) is within the checked range."""
    return TORCH.holds(torch.__version__ if version is None else version)


def hooks_allowed() -> bool:
    """`torch_checked()`, warning once when not: the handover's private hooks are then not installed."""
    return TORCH.allowed(FALLBACK)


_WIRE = "_eoscale_packed"  # the key of a packed batch between a worker and TileLoader


class Handover:
    """Batch buffers in shared memory that `TileLoader`'s workers fill again once the main process let go.

    How, safely: each worker keeps up to `SLOTS` buffers. The main process unpacks each batch into views and
    keeps a weak reference to its storage. When that has expired, no tensor in the main process uses the buffer
    any more (views, pinned copies and batches held by the caller all keep it alive), and the main process
    writes the ticket into `state[worker, slot]`, shared memory made before the workers start; the worker reuses
    a buffer only when its state shows the ticket it was sent with, so a late release from an earlier worker
    process cannot free a buffer of the current one. A worker with no free buffer takes a fresh one, so a caller
    that keeps batches only loses the speed-up.
    """

    SLOTS = 8  # in flight per worker: prefetch_factor (2) queued, plus the batches the consumer holds

    def __init__(self, workers: int) -> None:
        self.state = torch.zeros((workers, self.SLOTS), dtype=torch.int64).share_memory_()
        self._held: list[tuple[int, int, int, StorageWeakRef]] = []  # main process: (worker, slot, ticket, storage)
        self._buffers: list[list] = []  # a worker's: [buffer, ticket it was last sent with, sent before]
        self._tickets = 0
        self._token = 0  # a worker's name for its buffers, random: unique across worker processes

    def __getstate__(self) -> dict:
        return {"state": self.state, "_held": [], "_buffers": [], "_tickets": 0, "_token": 0}

    # --- in a worker ------------------------------------------------------------------------------------
    def take(self, n: int, channels: int, size: int, *, labels: bool, turns: bool, batch_size: int,
             steps: int = 1, picks: int = 0):
        """Numpy views to fill (images, labels or None, tile ids, turns or None, the time parts: a dict of "dates",
        "date_valid" and, with `picks`, "date_pick", or None for one date) and the batch to yield for `n` tiles."""
        worker, state = get_worker_info().id, self.state.numpy()
        need = packed_bytes(batch_size, channels, size, labels, turns, steps, picks)
        used = packed_bytes(n, channels, size, labels, turns, steps, picks)
        self._token = self._token or int.from_bytes(os.urandom(8), "little") >> 1
        self._tickets += 1
        ticket = os.getpid() << 32 | self._tickets  # unique across worker processes
        slot = next((i for i, (buffer, sent, _) in enumerate(self._buffers)
                     if state[worker, i] == sent and len(buffer) >= need), -1)
        if slot < 0 and len(self._buffers) < self.SLOTS:
            slot = len(self._buffers)
            self._buffers.append([shared_empty((need,), torch.uint8), 0, False])
        if slot >= 0:
            buffer, _, before = self._buffers[slot]
            self._buffers[slot] = [buffer, ticket, True]
            state[worker, slot] = 0  # in use
            packed = _Mapped(self._token, slot, None if before else buffer, used)
        else:
            buffer = shared_empty((need,), torch.uint8)
            packed = buffer[:used]
        image, label, tile, turn, time = packed_views(buffer.numpy(), n, channels, size, labels, turns, steps, picks)
        wire = {"packed": packed,
                "layout": (worker, slot, ticket, n, channels, size, labels, turns, steps, picks, self._token)}
        return image, label, tile, turn, time, {_WIRE: wire}

    # --- in the main process ----------------------------------------------------------------------------
    def received(self, batch: object) -> None:
        """Note a batch that arrived from a worker, and let the workers have back the buffers no longer used.
        Called on every batch received, also on those a new epoch's start throws away."""
        state, still = self.state.numpy(), []
        for held_worker, held_slot, held_ticket, storage in self._held:
            if storage.expired():
                state[held_worker, held_slot] = held_ticket  # free for the worker to fill again
            else:
                still.append((held_worker, held_slot, held_ticket, storage))
        self._held = still
        if isinstance(batch, dict) and _WIRE in batch and batch[_WIRE]["layout"][1] >= 0:
            worker, slot, ticket = batch[_WIRE]["layout"][:3]
            self._held.append((worker, slot, ticket, StorageWeakRef(batch[_WIRE]["packed"].untyped_storage())))

    @staticmethod
    def unpack(batch: dict) -> dict:
        """The batch a worker sent as `{"image", "label", "tile", "turn"}` (and, of several dates, "dates",
        "date_valid", "date_pick"): views of its buffer, but for the small per-tile parts, copied out so that
        keeping them does not keep the buffer."""
        if _WIRE not in batch:
            return batch
        packed, (_, _, _, n, channels, size, labels, turns, steps, picks, _) = batch[_WIRE]["packed"], batch[_WIRE]["layout"]
        image, label, tile, turn, time = packed_views(packed, n, channels, size, labels, turns, steps, picks)
        return ({"image": image, "tile": tile.clone()} | ({"label": label} if labels else {})
                | ({"turn": turn.clone()} if turns else {}) | {k: v.clone() for k, v in (time or {}).items()})


class _Mapped:
    """A slot's buffer on its way to the main process: the buffer itself (one file descriptor to pass, and a
    mapping to make) only the first time; then only its name, `(token, slot)`, which the main process maps
    to the buffer it keeps from then on (`_MAPPED`). Passing the descriptor and mapping the buffer anew cost
    the main process ~1 ms a batch here (2-core development machine), a fifth of all the loader's CPU time.
    Unpickled, in the main process (or its pin-memory thread), it becomes a tensor of the batch's bytes with a
    storage of its own, so that `Handover.received` sees when nothing uses this batch any more."""

    def __init__(self, token: int, slot: int, buffer: torch.Tensor | None, nbytes: int) -> None:
        self.token, self.slot, self.buffer, self.nbytes = token, slot, buffer, nbytes

    def __reduce__(self):
        return _mapped, (self.token, self.slot, self.buffer, self.nbytes)


_MAPPED: dict[int, dict[int, torch.Tensor]] = {}  # main process: worker token → {slot: the buffer, mapped once}


def _mapped(token: int, slot: int, buffer: torch.Tensor | None, nbytes: int) -> torch.Tensor:
    slots = _MAPPED.setdefault(token, {})
    if buffer is not None:
        slots[slot] = buffer  # the first batch of this buffer: a worker's batches arrive in the order sent
    # a new storage over the same memory (it keeps the buffer alive while anything uses it)
    return torch.from_numpy(slots[slot].numpy()[:nbytes])


def forget(tokens) -> None:
    """Let go of the buffers of workers that have stopped (their batches still held keep theirs alive)."""
    for token in tokens:
        _MAPPED.pop(token, None)


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor for a batch; in a DataLoader worker, in shared memory already, as `default_collate`
    does, so that handing it to the main process does not copy it once more."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = new_shared_storage(math.prod(shape) * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def packed_bytes(n: int, channels: int, size: int, labels: bool, turns: bool = False, steps: int = 1,
                 picks: int = 0) -> int:
    time = 8 * n * steps + 8 * n * picks + 4 * n * steps if steps > 1 else 0
    return 8 * n + time + 2 * n * steps * channels * size * size + (n * size * size if labels else 0) + (n if turns else 0)


def packed_views(flat, n: int, channels: int, size: int, labels: bool, turns: bool = False, steps: int = 1,
                 picks: int = 0):
    """(images uint16 (n, C, T, T) — of several dates (n, steps, C, T, T) —, labels uint8 (n, T, T) or None, tile
    ids int64 (n,), turns uint8 (n,) or None, and of several dates a dict of "dates" int64 (n, steps),
    "date_pick" int64 (n, picks) where `picks`, "date_valid" float32 (n, steps); else None) as views of a flat
    uint8 buffer (numpy array or tensor): the widest items first, so that every part is aligned to its item
    size. A single-date batch's layout is the one from before the time axis, byte for byte."""
    as_type = (lambda a, t: a.view(t)) if isinstance(flat, np.ndarray) else (lambda a, t: a.view(_TORCH[t]))
    at = 8 * n
    tile = as_type(flat[:at], np.int64)
    time = None
    if steps > 1:
        time = {"dates": as_type(flat[at : at + 8 * n * steps], np.int64).reshape(n, steps)}
        at += 8 * n * steps
        if picks:
            time["date_pick"] = as_type(flat[at : at + 8 * n * picks], np.int64).reshape(n, picks)
            at += 8 * n * picks
        time["date_valid"] = as_type(flat[at : at + 4 * n * steps], np.float32).reshape(n, steps)
        at += 4 * n * steps
    label_at = at + 2 * n * steps * channels * size * size
    image = as_type(flat[at:label_at], np.uint16).reshape((n, channels, size, size) if steps == 1
                                                          else (n, steps, channels, size, size))
    turn_at = label_at + (n * size * size if labels else 0)
    label = flat[label_at:turn_at].reshape(n, size, size) if labels else None
    turn = flat[turn_at : turn_at + n] if turns else None
    return image, label, tile, turn, time


_TORCH = {np.int64: torch.int64, np.uint16: torch.uint16, np.float32: torch.float32}
