"""glibc's heap settings for the Dask worker processes that cut large arrays (ingest's scan, label and shard tasks).

Dask's nanny starts every worker with MALLOC_TRIM_THRESHOLD_=65536 (`distributed.nanny.pre-spawn-environ`), to
give memory back to the system sooner. Setting it also switches off glibc's dynamic mmap threshold: every
allocation over 128 KiB (a shard's 21 MB of pixels, each window read's buffer, every numpy temporary) is then a
fresh mmap that the kernel zeroes page by page, and is unmapped again when freed. On a 10,980² scene the same
shard task took 1.7x as long in a process with that variable as without it (benchmarks/README.md, ingest.json:
the shard phase before and after). `large_arrays_from_the_heap` puts back
what glibc would have settled on by itself: allocations up to 32 MiB (its maximum mmap threshold) come from the
heap and are reused, and the heap is trimmed above 64 MiB of free memory at its top, so a worker's memory stays
bounded (tests/ingest/test_memory.py).

It is called by the tasks themselves, not at worker start-up, so that workers started by others (a Slurm
cluster's `dask worker`, a scheduler given with --scheduler) get it too; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems: the most mallopt accepts
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # glibc's own rule when it raises the mmap threshold dynamically

_done_in: int | None = None  # the process that set them (a forked child sets them again)


def large_arrays_from_the_heap() -> bool:
    """Set this process's mmap and trim thresholds once (see the module docstring); whether they are set."""
    global _done_in
    if _done_in == os.getpid():
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    _done_in = os.getpid() if ok else None
    return ok
