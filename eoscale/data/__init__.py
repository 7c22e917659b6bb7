"""Stage 2: reading tile stores (never writing them): validation, streaming into Lightning."""

from eoscale.data.store import open_store, read_store_attrs

__all__ = ["open_store", "read_store_attrs"]
