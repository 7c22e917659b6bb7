"""Staging: every needed asset of a frozen item list downloaded into the cache (`eoscale.acquire.cache`), where the
login node has internet, so that the compute nodes read the cache only.

Items are downloaded `jobs` at a time (an Item's assets one after another); each asset through
`eoscale.acquire.fetch` (retries, resume, size and checksum). A rerun keeps every asset already whole (its recorded
size, or with `verify` its checksum too) and fetches only what is missing or damaged. An asset that fails does not
stop the others: the run finishes what it can, then stops in one line naming the first item and asset that failed.
Memory stays flat in the number of Items: each download streams in 1 MiB blocks to disk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pystac
import requests

from eoscale.acquire import cache as layout
from eoscale.acquire import checksum
from eoscale.acquire.fetch import DownloadError, Expected, download
from eoscale.acquire.retry import RetryPolicy

log = logging.getLogger(__name__)
RASTER_SUFFIXES = (".tif", ".tiff", ".jp2")


@dataclass
class StageReport:
    """What a staging run did (also appended to the cache's stage log)."""

    items: int = 0
    assets: int = 0
    fetched: int = 0
    kept: int = 0
    damaged: int = 0
    retries: int = 0
    waited_s: float = 0.0
    bytes: int = 0
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)

    @property
    def megabytes_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds else 0.0


def stage(items: list[pystac.Item], cache: str | os.PathLike, *, assets: list[str] | None = None,
          policy: RetryPolicy | None = None, sign: Callable[[str], str] | None = None, jobs: int = 4,
          verify: bool = False, check_rasters: bool = True) -> StageReport:
    """Stage `items` into `cache` (see the module docstring); raises DownloadError, after the others are done, if any
    asset failed."""
    policy = policy or RetryPolicy()
    folder = layout.open_cache(cache, create=True)
    wanted = [(item, layout.needed_assets(item, assets)) for item in items]  # every item's refusal before any download
    report = StageReport(items=len(items), assets=sum(len(keys) for _, keys in wanted))
    lock = threading.Lock()
    local = threading.local()
    start = time.perf_counter()

    def one(item: pystac.Item, keys: list[str]) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        _stage_item(local.session, folder, item, keys, policy=policy, sign=sign, verify=verify,
                    check_rasters=check_rasters, report=report, lock=lock)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(one, item, keys) for item, keys in wanted]:
            future.result()
    report.seconds = time.perf_counter() - start
    layout.append_log(folder, {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **asdict(report)})
    if report.failed:
        raise DownloadError(f"{len(report.failed)} of {report.assets} assets could not be staged in {str(folder)!r} "
                            f"(the others are; a rerun fetches only what is missing); first: {report.failed[0]}")
    return report


def _stage_item(session: requests.Session, folder: Path, item: pystac.Item, keys: list[str], *, policy: RetryPolicy,
                sign, verify: bool, check_rasters: bool, report: StageReport, lock: threading.Lock) -> None:
    where = layout.item_folder(folder, item)
    where.mkdir(parents=True, exist_ok=True)
    record = layout.read_record(where)
    complete = True
    for key in keys:
        asset = item.assets[key]
        name = layout.asset_file(key, asset)
        path = where / name
        what = f"STAC item {item.id!r} asset {key!r}"
        kept = _whole(path, record.get(key), verify)
        if kept:
            with lock:
                report.kept += 1
            continue
        damaged = path.exists()
        expected = Expected(asset.extra_fields.get("file:size"), asset.extra_fields.get("file:checksum"))
        check = _check_raster if check_rasters and path.suffix.lower() in RASTER_SUFFIXES else None
        try:
            fetched = download(session, asset.href, str(path), what=what, policy=policy, expected=expected,
                               sign=sign, check=check)
        except (DownloadError, ValueError) as err:  # ValueError: a file:checksum eoscale cannot read
            log.error("%s", err)
            with lock:
                report.failed.append(str(err) if isinstance(err, DownloadError) else f"{what}: {err}")
            complete = False
            continue
        record[key] = {"href": asset.href, "file": name, "size": fetched.size, "checksum": fetched.checksum}
        layout.write_record(where, record)
        with lock:
            report.fetched += 1
            report.damaged += damaged
            report.retries += fetched.retries
            report.waited_s += fetched.waited
            report.bytes += fetched.received
    if complete:
        layout.write_staged_item(where, item, {k: record[k] for k in keys})


def _whole(path: Path, facts: dict | None, verify: bool) -> bool:
    """Whether the staged file at `path` is the one recorded (its size; with `verify` its checksum too)."""
    if facts is None or not path.is_file() or path.stat().st_size != facts.get("size"):
        return False
    return not verify or checksum.file_multihash(str(path)) == facts.get("checksum")


def _check_raster(path: str) -> None:
    """Read the last block of each band (a COG's full-resolution tiles lie at the end of the file): a file cut short
    whose size nobody stated fails here, not in ingest hours later."""
    import rasterio
    from rasterio.errors import RasterioError

    try:
        with rasterio.open(path) as src:
            *_, (_, window) = src.block_windows(1)
            src.read(window=window)
    except RasterioError as err:
        raise ValueError(f"GDAL cannot read its last block ({str(err).splitlines()[0]})") from None
