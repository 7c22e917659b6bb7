"""Files of one result written as a set: each under a hidden `.partial` name, then renamed into place in a given
order, the last one marking the set finished (the sample's design, the assessment's JSON); whatever fails on the
way leaves no partial file behind, and nothing under the final names."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def partial(path: Path) -> Path:
    """The hidden name `path` is written under (suffix kept: GDAL and matplotlib pick formats by it)."""
    return path.with_name(f".{path.stem}.partial{path.suffix}")


@contextmanager
def published(paths: Sequence[Path]) -> Iterator[None]:
    """Write each of `paths` to its `partial` name inside the block; after it, rename them in order."""
    try:
        yield
        for path in paths:
            os.replace(partial(path), path)
    finally:
        for path in paths:
            partial(path).unlink(missing_ok=True)
