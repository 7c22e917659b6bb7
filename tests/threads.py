"""One torch thread at a time, for runs compared value for value (and for the machine's shared cores)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def single_thread() -> Iterator[None]:
    """One torch thread inside: the same reductions in the same order, run after run; the count restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
