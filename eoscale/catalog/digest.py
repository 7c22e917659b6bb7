"""Digests that lineage is checked against: a file's sha256, a folder's, and a tile store's fingerprint.

Files are read in `CHUNK`-sized pieces, so a scene of several GB costs one pass and 8 MiB of memory (hashlib
releases the GIL on large updates, so a thread pool hashes several files at once).

A store's fingerprint is the sha256 of the sorted list of its files, each with its size and sha256, except
the STAC Collection that describes the store (`schema.COLLECTION_FILE`, which holds the fingerprint). It
changes when any byte of the store changes, and it is the same wherever the store is copied. `eoscale ingest`
computes it from the digests its shard tasks took of the shards they wrote (`known`), reading only the
metadata files again; `eoscale lineage` reads the whole store.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eoscale.store import schema

CHUNK = 8 * 2**20  # bytes read at a time
OK, CHANGED, MISSING, UNKNOWN = "OK", "CHANGED", "MISSING", "unknown"


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 (hex) of a file's content, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Every file under `folder` as sorted POSIX paths relative to it, except the relative paths in `skip`."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = (Path(root) / name).relative_to(folder).as_posix()
            if rel not in skip:
                found.append(rel)
    return sorted(found)


def _tree_digest(folder: Path, *, skip: tuple[str, ...] = (), known: Mapping[str, str] | None = None,
                 workers: int | None = None) -> str:
    rels = _files(folder, skip=skip)
    known = dict(known or {})
    todo = [r for r in rels if r not in known]
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        known.update(zip(todo, pool.map(lambda r: file_sha256(folder / r), todo), strict=True))
    listing = [[r, (folder / r).stat().st_size, known[r]] for r in rels]
    return hashlib.sha256(json.dumps(listing, separators=(",", ":")).encode()).hexdigest()


def path_sha256(path: str | os.PathLike) -> str:
    """A file's sha256, or for a folder (a sharded checkpoint, an adapter) the sha256 of its file listing with
    each file's size and sha256."""
    path = Path(path)
    return _tree_digest(path) if path.is_dir() else file_sha256(path)


def store_fingerprint(store: str | os.PathLike, *, known: Mapping[str, str] | None = None,
                      workers: int | None = None) -> str:
    """The fingerprint of the tile store at `store` (see the module docstring); `known` maps relative paths to
    sha256s already taken (those files are not read again)."""
    return _tree_digest(Path(store), skip=(schema.COLLECTION_FILE,), known=known, workers=workers)


def file_record(path: str | os.PathLike) -> dict:
    """`{path, size, sha256}` of a file (absolute path) or folder, as lineage records it."""
    path = Path(path).resolve()
    size = path.stat().st_size if path.is_file() else sum((path / r).stat().st_size for r in _files(path))
    return {"path": str(path), "size": size, "sha256": path_sha256(path)}


def check_record(record: Mapping | None, *, key: str = "sha256", digest=path_sha256) -> tuple[str, str | None]:
    """(status, digest now) of a recorded `{path, <key>}`: `OK`, `CHANGED`, `MISSING` (no file at the path), or
    `unknown` (nothing was recorded)."""
    if not record or not record.get("path"):
        return UNKNOWN, None
    path = Path(record["path"])
    if not path.exists():
        return MISSING, None
    now = digest(path)
    if not record.get(key):
        return UNKNOWN, now
    return (OK if now == record[key] else CHANGED), now
