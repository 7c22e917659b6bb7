"""Stage 2: reading tile stores (never writing them): validation, streaming into Lightning."""

from eoscale.store.open import open_store, read_store_attrs

__all__ = ["TileDataModule", "TileLoader", "TileStream", "open_store", "read_store_attrs"]

_LAZY = {"TileDataModule": "eoscale.data.datamodule", "TileLoader": "eoscale.data.datamodule",
         "TileStream": "eoscale.data.stream"}


def __getattr__(name: str):
    # torch and Lightning load only when the DataModule is asked for, so 'eoscale info' stays quick
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'eoscale.data' has no attribute {name!r}")
