"""zarr's private names that eoscale's whole-shard writer (`eoscale.store.writer`) relies on, in one place.

The writer puts a whole shard as one object with the bytes zarr itself would write; for that it needs

- `zarr.core.buffer.default_buffer_prototype` (the buffer type a store's `set` takes),
- `zarr.core.indexing.morton_order_iter` (the order zarr lays the chunks out in a shard),
- `zarr.core.sync.sync` (running a store's coroutine from synchronous code),
- the numcodecs objects zarr builds for its Blosc and Zstd codecs (`BloscCodec._blosc_codec`,
  `ZstdCodec._zstd_codec`), so that each chunk is encoded by the very codec zarr would use.

Checked on the versions of `CHECKED`; outside them `whole_shards()` is False, said once, and the writer leaves
every shard to zarr's public array assignment (the same bytes, about 1.6× the encoding time). Nothing here is
imported before a function is called: importing this module imports no zarr.
"""

from __future__ import annotations

from eoscale._compat import Checked

CHECKED = Checked(
    "zarr", "3.1.6", "3.2",
    "zarr.core.buffer.default_buffer_prototype, zarr.core.indexing.morton_order_iter, zarr.core.sync.sync and "
    "the Blosc/Zstd codecs' _blosc_codec/_zstd_codec",
)

__all__ = ["CHECKED", "default_buffer_prototype", "morton_order_iter", "numcodec", "sync", "whole_shards"]


def whole_shards() -> bool:
    """Whether the whole-shard writer may use the private names here (the installed zarr is within `CHECKED`);
    outside it says once that shards go through zarr's array assignment instead."""
    return CHECKED.allowed("each shard is written through zarr's array assignment instead (same bytes, slower)")


def default_buffer_prototype():
    from zarr.core.buffer import default_buffer_prototype as prototype

    return prototype()


def morton_order_iter(chunks_per_shard: tuple[int, ...]):
    """The chunk coordinates of a shard in the order zarr writes them."""
    from zarr.core.indexing import morton_order_iter as order

    return order(chunks_per_shard)


def sync(coroutine):
    """Run one of zarr's store coroutines to completion on zarr's own event loop."""
    from zarr.core.sync import sync as run

    return run(coroutine)


def numcodec(codec: object) -> object | None:
    """The numcodecs object zarr encodes with for a `BloscCodec` or `ZstdCodec` (None for any other codec, or when
    zarr no longer keeps one under the name relied on)."""
    from zarr.codecs import BloscCodec, ZstdCodec

    name = "_blosc_codec" if isinstance(codec, BloscCodec) else "_zstd_codec" if isinstance(codec, ZstdCodec) else None
    return None if name is None else getattr(codec, name, None)
