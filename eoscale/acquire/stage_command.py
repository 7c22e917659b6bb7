"""`eoscale stage`: download the assets of a frozen item list into a cache, on a node with internet.

    eoscale stage --items s2-2024.parquet --cache $SCRATCH/eoscale-cache --jobs 8
    eoscale stage --items pc-s2.parquet --sign planetary-computer      # Planetary Computer: signed hrefs

A rerun fetches only what is missing or damaged. The compute nodes then read the cache only:
`eoscale ingest --items LIST --cache DIR`, `eoscale predict --items LIST --cache DIR`.
"""

from __future__ import annotations

import argparse
import logging


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", required=True, metavar="LIST", help="the frozen item list ('eoscale search')")
    parser.add_argument("--cache", metavar="DIR", help="the cache folder (default: beside the list, LIST's name with "
                        ".cache, e.g. s2-2024.cache/)")
    parser.add_argument("--assets", type=lambda t: [k.strip() for k in t.split(",") if k.strip()], metavar="KEY,…",
                        help="asset keys to stage (default: each item's band assets its sensor reads and its mask, "
                             "SCL or QA_PIXEL)")
    parser.add_argument("--sign", metavar="planetary-computer|MODULE:FUNCTION",
                        help="sign each href before each request (a function href -> signed href; renewed every try, "
                             "so an expiring token does not stop a long run)")
    parser.add_argument("--jobs", type=int, default=4, help="items downloaded at once (default: %(default)s)")
    parser.add_argument("--retries", type=int, default=5,
                        help="retries of an asset on HTTP 429/5xx, timeouts and broken connections (default: "
                             "%(default)s)")
    parser.add_argument("--backoff", type=float, default=1.0,
                        help="seconds before the first retry, doubling after each (a server's Retry-After wins; "
                             "default: %(default)s)")
    parser.add_argument("--retry-budget", type=float, default=600.0, metavar="SECONDS",
                        help="most seconds an asset may spend waiting between retries (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds without a byte before a try is given up (a stalled connection; default: "
                             "%(default)s)")
    parser.add_argument("--verify", action="store_true",
                        help="check the checksum of what is already staged too (default: its size)")


def run(args: argparse.Namespace) -> int:
    from eoscale.acquire.cache import default_cache
    from eoscale.acquire.frozen import read_list
    from eoscale.acquire.retry import RetryPolicy
    from eoscale.acquire.signing import resolve
    from eoscale.acquire.stage import stage
    from eoscale.errors import InputError

    if args.retries < 0 or args.jobs < 1 or args.timeout <= 0 or args.backoff < 0 or args.retry_budget < 0:
        raise InputError(f"--retries, --backoff and --retry-budget must be ≥ 0, --jobs ≥ 1 and --timeout > 0; got "
                         f"{args.retries}, {args.backoff}, {args.retry_budget}, {args.jobs}, {args.timeout}")
    log = logging.getLogger("eoscale.acquire")  # its retries and failures as lines of this command; no other logger
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("eoscale stage: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)
        log.propagate = False
    items, _ = read_list(args.items)
    cache = args.cache or default_cache(args.items)
    policy = RetryPolicy(attempts=args.retries + 1, backoff=args.backoff, budget=args.retry_budget, timeout=args.timeout)
    report = stage(items, cache, assets=args.assets, policy=policy, sign=resolve(args.sign), jobs=args.jobs,
                   verify=args.verify)
    print(f"eoscale stage: {report.items} items, {report.assets} assets in {cache}: {report.fetched} fetched "
          f"({report.damaged} of them damaged before), {report.kept} already there; {report.retries} retries "
          f"({report.waited_s:.1f} s waited); {report.bytes / 1e6:.1f} MB in {report.seconds:.1f} s "
          f"({report.megabytes_per_second:.1f} MB/s)")
    print(f"  next (offline): eoscale ingest --items {args.items} --cache {cache} …")
    return 0
