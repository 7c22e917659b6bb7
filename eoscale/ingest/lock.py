"""One writer per tile store, and only over what is its own.

Two `eoscale ingest` runs into the same output do not interleave: the first takes `<output>.lock` (an OS file
lock, released by the kernel if the process dies); a second run into the same output stops at once with one
line instead of racing it through the same `.partial` folder.

`--overwrite` replaces only what is recognisably an eoscale tile store (a Zarr group whose attributes carry
eoscale's schema version, finished or not); anything else at the output path is refused, untouched.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock, Timeout

from eoscale.errors import OutputExistsError
from eoscale.store import schema

F = TypeVar("F", bound=Callable)


class StoreBusyError(OutputExistsError):
    """Another process is writing this tile store."""


def is_tile_store(path: Path) -> bool:
    """Whether `path` is an eoscale tile store (complete or not), read from its Zarr metadata alone."""
    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and schema.ATTR_SCHEMA in (meta.get("attributes") or {})


def check_replaceable(output: Path) -> None:
    """Refuse, with one line, to replace anything at `output` that is not an eoscale tile store."""
    if (output.exists() or output.is_symlink()) and (output.is_symlink() or not output.is_dir()
                                                     or not is_tile_store(output)):
        raise OutputExistsError(
            f"{str(output)!r} exists and is not an eoscale tile store: eoscale replaces only its own stores, even "
            f"with --overwrite; choose another --output or move it away yourself"
        )


def one_writer(function: F) -> F:
    """Run `function(scenes, output, ...)` holding the lock of `output`."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def locked(*args, **kwargs):
        output = Path(signature.bind(*args, **kwargs).arguments["output"])
        path = output.with_name(output.name + ".lock")
        output.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise StoreBusyError(f"another 'eoscale ingest' is writing {str(output)!r} (it holds {str(path)!r}): "
                                 f"wait for it to finish, or stop it and rerun") from None
        try:
            return function(*args, **kwargs)
        finally:
            lock.release()
            try:  # tidy: the lock file is ours; a run that starts meanwhile holds its own open file
                os.unlink(path)
            except OSError:
                pass

    return locked  # type: ignore[return-value]
