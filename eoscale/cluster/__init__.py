"""Dask clients for the bulk array work, in one place: a local cluster by default, an existing scheduler, or
worker processes that are Slurm jobs (`eoscale.cluster.slurm`, sized by a cluster profile,
`eoscale.cluster.profiles`).

Below the stages on purpose: `ingest` runs its graph here without knowing about Slurm job templates, and
`eoscale.slurm` renders jobs from the same profiles.

A local cluster uses one single-threaded worker process per core: rasterio/GDAL and the Blosc codecs
release the GIL only in parts, and separate processes measured faster than threads for ingest here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from eoscale.errors import InputError


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@contextmanager
def dask_client(
    *, workers: int | None = None, scheduler: str | None = None, preload: tuple[str, ...] = ()
) -> Iterator[object]:
    """A `distributed.Client`: connected to `scheduler` when given (an address such as tcp://host:8786, or a
    running cluster object such as `slurm_cluster`'s, whose TLS credentials the client then uses), else to a
    fresh local cluster of `workers` processes (default: one per available core; one worker is a thread of
    this process).

    `preload` names modules each local worker imports while it starts, in parallel, instead of during its
    first task (the ingest task modules take about half a second to import).
    """
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout="10s") if isinstance(scheduler, str) else Client(scheduler)
        except OSError as err:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler!r} ({err}): is it running?") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = default_workers() if workers is None else workers
    if n < 1:
        raise InputError(f"--workers must be at least 1, got {n}")
    # one worker runs in this process (a thread): a worker process would cost its start-up and its imports
    # (about 1.5 CPU s, measured) for the same one task at a time; several workers are processes, as GDAL and
    # numpy work in them without the GIL and a scene reader's state stays its own
    cluster = LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=n > 1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
        preload=list(preload),
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
