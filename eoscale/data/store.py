"""Moved: opening a tile store is `eoscale.store.open`. This module re-exports it so that imports of
`eoscale.data.store` keep working."""

from eoscale.store.open import check_shards, open_store, read_store_attrs, shard_files, time_steps

__all__ = ["check_shards", "open_store", "read_store_attrs", "shard_files", "time_steps"]
