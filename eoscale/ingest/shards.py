"""Moved: the whole-shard writer is `eoscale.store.writer`. This module re-exports it so that imports of
`eoscale.ingest.shards` keep working."""

from eoscale.store.writer import write_whole_shard

__all__ = ["write_whole_shard"]
