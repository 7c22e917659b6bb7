"""Moved: PyTriton's numpy-2 fix lives in `eoscale._compat.pytriton` with every other private-API use."""

from eoscale._compat.pytriton import (  # noqa: F401
    ANCHOR,
    HELPERS,
    PROXY_FILE,
    REPLACEMENTS,
    patch_proxy,
    stub_library_path,
    use_dlpack_proxy,
)
