"""One writer per tile store: two `eoscale ingest` runs into the same output do not interleave.

The first takes `<output>.lock` (an OS file lock, released by the kernel if the process dies); a second run
into the same output stops at once with one line instead of racing it through the same `.partial` folder.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock, Timeout

from eoscale.errors import OutputExistsError

F = TypeVar("F", bound=Callable)


class StoreBusyError(OutputExistsError):
    """Another process is writing this tile store."""


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
