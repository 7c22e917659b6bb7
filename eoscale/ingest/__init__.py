"""Stage 1: rasters (GeoTIFF/COG scenes, label rasters) → a sharded Zarr v3 tile store, by a Dask graph.

The only writer of tile stores. `ingest()` is the entry point; `eoscale ingest` is its command.
The package imports nothing heavy itself: Dask workers import only the task modules they run
(`scan`, `writer`), not xarray and dask.array, which cost about a second per worker process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eoscale.ingest.run import IngestSummary, ingest

__all__ = ["IngestSummary", "ingest"]


def __getattr__(name: str):
    if name in __all__:
        from eoscale.ingest import run

        return getattr(run, name)
    raise AttributeError(f"module 'eoscale.ingest' has no attribute {name!r}")
