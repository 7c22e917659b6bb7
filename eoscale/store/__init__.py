"""The tile store's format in one package: what a store holds and how it is laid out (`schema`), opening and
validating one (`open`), writing a whole shard of an array (`writer`) and reading whole tiles of one straight
from its shard files (`reader`).

`eoscale ingest` writes stores through it, `eoscale.data` and every other reader reads them through it. It sits at
the ground of the layers (ARCHITECTURE.md): it imports only `eoscale.classes`, `eoscale.errors` and
`eoscale._compat`. Submodules are imported where they are used (`from eoscale.store import schema`, `from
eoscale.store.open import open_store`): importing the package imports no array library.
"""
