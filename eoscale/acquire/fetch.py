"""One asset's download: retried on the faults that pass (`eoscale.acquire.retry`), resumed where it broke off, and
checked (size, `file:checksum`) before it takes its final name.

The bytes go to `<file>.part` first; a try that breaks off (a timeout, a stalled or truncated answer) leaves them
there and the next try asks for the rest with a Range request, so a 5 GB file is not fetched again from its start.
Only a file whose size and checksum are right is renamed to its final name: a file under its final name is whole.
The href is signed before every try (`sign`): a token that expired during a long run is renewed, and a 403 answer
(an expired signature) is retried once with a fresh one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests
import urllib3

from eoscale.acquire import checksum
from eoscale.acquire.retry import RETRIED_STATUS, RetryPolicy
from eoscale.errors import UserError

log = logging.getLogger(__name__)
CHUNK = 1 << 20  # bytes a read: memory stays flat whatever the file's size
Sign = Callable[[str], str]


class DownloadError(UserError, OSError):
    """An asset that could not be downloaded (after its retries) or whose bytes are not the ones its Item states."""


@dataclass(frozen=True)
class Expected:
    """What the Item says of the file (from STAC's file extension); None where it says nothing."""

    size: int | None = None
    checksum: str | None = None


@dataclass
class Fetched:
    """What one download did: bytes received, tries that failed and were retried, seconds waited between them."""

    size: int
    checksum: str
    received: int = 0
    retries: int = 0
    waited: float = 0.0


class _Retry(Exception):
    """A failed try that may pass if tried again (`reason` for the log and the final error)."""

    def __init__(self, reason: str, retry_after: str | None = None, *, restart: bool = False):
        super().__init__(reason)
        self.reason, self.retry_after, self.restart = reason, retry_after, restart


def download(session: requests.Session, href: str, path: str, *, what: str, policy: RetryPolicy,
             expected: Expected = Expected(), sign: Sign | None = None,
             check: Callable[[str], None] | None = None) -> Fetched:
    """Download `href` to `path` (see the module docstring); `what` names the item and asset in errors and logs;
    `check(part_path)` may raise ValueError for a file that is whole but unreadable (a truncated raster)."""
    part = path + ".part"
    retries, waited, received = 0, 0.0, 0
    signed_again = False
    for attempt in range(1, policy.attempts + 1):
        try:
            received += _try(session, (sign or str)(href), part, policy)
            return Fetched(*_verify(part, path, expected, check), received=received, retries=retries, waited=waited)
        except _Retry as err:
            reason, retry_after, restart = err.reason, err.retry_after, err.restart
        except requests.HTTPError as err:
            status = err.response.status_code
            if status in (401, 403) and sign is not None and not signed_again:
                signed_again, reason, retry_after, restart = True, f"HTTP {status} (signed again)", None, False
            else:
                raise DownloadError(f"{what}: HTTP {status} {err.response.reason} from {_public(href)}"
                                    f"{_hint(status)}") from None
        except (requests.ConnectionError, requests.Timeout, urllib3.exceptions.HTTPError) as err:
            reason, retry_after, restart = f"{type(err).__name__}: {_first_line(err)}", None, False
        if restart and os.path.exists(part):
            os.remove(part)
        if attempt == policy.attempts:
            raise DownloadError(f"{what}: gave up after {attempt} tries ({reason}) from {_public(href)}: rerun the "
                                f"command later (what is already downloaded is kept) or raise --retries") from None
        delay = policy.delay(attempt, retry_after)
        if waited + delay > policy.budget:
            raise DownloadError(f"{what}: gave up after {attempt} tries ({reason}): the next wait of {delay:.3g} s "
                                f"would pass the retry budget of {policy.budget:g} s (--retry-budget); rerun the "
                                f"command later (what is already downloaded is kept)") from None
        retries += 1
        log.warning("retry %d of %s in %.1f s: %s", retries, what, delay, reason)
        time.sleep(delay)
        waited += delay
    raise AssertionError("unreachable")


def _try(session: requests.Session, url: str, part: str, policy: RetryPolicy) -> int:
    """One GET into `part`, resumed from its size; the bytes received."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    # identity: a Range counts bytes of the file, not of a compressed answer
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
    with session.get(url, headers=headers, stream=True, timeout=policy.timeout) as response:
        if response.status_code in RETRIED_STATUS:
            raise _Retry(f"HTTP {response.status_code}", response.headers.get("Retry-After"))
        if response.status_code == 416 and have:  # the part is already whole (or longer than the file): start over
            raise _Retry("HTTP 416 for the rest of a partial file", restart=True)
        response.raise_for_status()
        if have and response.status_code != 206:  # the server ignored the range: take the whole file again
            have = 0
        elif have and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
            raise _Retry(f"the rest of a partial file came as {response.headers.get('Content-Range')!r}, not from "
                         f"byte {have}", restart=True)
        received = 0
        with open(part, "ab" if have else "wb") as f:
            # read1: what has arrived, up to CHUNK; iter_content would drop a block broken off midway, and a resume
            # would fetch it again
            while block := response.raw.read1(CHUNK):
                f.write(block)
                received += len(block)
        return received


def _verify(part: str, path: str, expected: Expected, check: Callable[[str], None] | None) -> tuple[int, str]:
    """(size, multihash) of a whole `part`, renamed to `path`; a _Retry (from the start) if it is not the file stated."""
    size = os.path.getsize(part)
    if expected.size is not None and size != expected.size:
        raise _Retry(f"{size} bytes received, the item states {expected.size} (file:size)", restart=True)
    code = checksum.SHA256
    if expected.checksum:
        code, _ = checksum.parse(expected.checksum)
    digest = checksum.file_multihash(part, code)
    if expected.checksum and digest != expected.checksum.lower():
        raise _Retry(f"checksum {digest} differs from the item's file:checksum {expected.checksum}", restart=True)
    if check is not None:
        try:
            check(part)
        except ValueError as err:
            raise _Retry(f"the file is damaged: {err}", restart=True) from None
    if code != checksum.SHA256:
        digest = checksum.file_multihash(part)
    os.replace(part, path)
    return size, digest


def _public(href: str) -> str:
    """`href` without its query (a signed URL's token)."""
    return href.split("?", 1)[0]


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__


def _hint(status: int) -> str:
    if status in (401, 403):
        return ": the asset needs a signed href (--sign) or the signature has expired"
    if status == 404:
        return ": the item list may be older than the archive; search again"
    return ""
