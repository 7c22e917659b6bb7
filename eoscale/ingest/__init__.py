"""Stage 1: rasters (GeoTIFF/COG scenes, label rasters) → a sharded Zarr v3 tile store, by a Dask graph.

The only writer of tile stores. `ingest()` is the entry point; `eoscale ingest` is its command.
"""

from eoscale.ingest.run import IngestSummary, ingest

__all__ = ["IngestSummary", "ingest"]
