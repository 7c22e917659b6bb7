"""`eoscale bench acquire`: staging a season's Items from a local HTTP server (`eoscale stage`, then the staged bands
read) against a direct `odc.stac.load` of the same Items and bands, alternated in one run; and the peak memory of
staging 20 and 200 Items over one tile (each in a fresh process), beside odc-stac's for the same 200.

The scenes are a synthetic season (`eoscale synth --layout cog --dates N`: Earth Search-like Items over one place);
the server is Starlette's `StaticFiles` under uvicorn in its own process (range requests answered 206), as
`tests/acquire` serves them. Both sides take the 10 m bands (blue, green, red, nir: the same pixels, no resampling on
either side) and use the same number of concurrent reads (`--jobs`). The ratio is eoscale's items/s over
odc-stac's: ≥ 1 means staging and reading the cache is at least as fast as loading straight from the server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BANDS = ["blue", "green", "red", "nir"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=1024, help="scene edge in pixels (default: %(default)s)")
    parser.add_argument("--dates", type=int, default=6, help="dated scenes of the one place (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side, alternated (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=4, help="concurrent downloads / reads (default: %(default)s)")
    parser.add_argument("--memory-items", type=int, default=200,
                        help="Items over one tile for the memory figures (default: %(default)s)")
    parser.add_argument("--memory-size", type=int, default=256, help="their scene edge (default: %(default)s)")


def _season(root: Path, size: int, dates: int) -> list[Path]:
    from eoscale.synth.dataset import synthesize

    synthesize(root, scenes=1, size=size, seed=11, layout="cog", dates=dates)
    return sorted(root.glob("scenes/*/*/*.json"))


def _served_items(paths: list[Path], root: Path, url: str, copies: int = 1) -> list[dict]:
    """The Items with hrefs at the server; `copies` > 1 repeats them under new ids (many Items over one tile)."""
    out = []
    for copy in range(copies):
        for path in paths:
            item = json.loads(path.read_text())
            item["id"] = item["id"] + (f"_{copy:03d}" if copies > 1 else "")
            item["collection"] = "sentinel-2-l2a"
            for asset in item["assets"].values():
                local = (path.parent / asset["href"]).resolve().relative_to(root.resolve())
                asset["href"] = f"{url}/{local.as_posix()}"
            out.append(item)
    return out


class _Server:
    """uvicorn + StaticFiles over `root` in its own process."""

    def __init__(self, root: Path):
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        code = ("import uvicorn; from starlette.staticfiles import StaticFiles; "
                f"uvicorn.run(StaticFiles(directory={str(root)!r}), host='127.0.0.1', port={self.port}, "
                "log_level='critical', lifespan='off')")
        self.process = subprocess.Popen([sys.executable, "-c", code])
        import requests

        for _ in range(200):
            try:
                requests.get(self.url, timeout=1)
                return
            except requests.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("the asset server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _eoscale_side(items, cache: Path, jobs: int) -> float:
    """Stage the bands, then read them from the cache: seconds."""
    import rasterio

    from eoscale.acquire.cache import item_folder
    from eoscale.acquire.stage import stage

    start = time.perf_counter()
    stage(items, cache, assets=BANDS, jobs=jobs)
    for item in items:
        for key in BANDS:
            with rasterio.open(item_folder(cache, item) / f"{key}.tif") as src:
                src.read(1)
    return time.perf_counter() - start


def _odc_side(items, jobs: int) -> float:
    import warnings

    import odc.stac

    start = time.perf_counter()
    with warnings.catch_warnings():  # odc-geo 0.5.3 under affine 3 and shapely 2.1: deprecations of their APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        data = odc.stac.load(items, bands=BANDS, groupby="id", pool=jobs)
        data.load()
    return time.perf_counter() - start


def _peak_rss_mib(code: str, scratch: Path) -> float:
    """Peak resident memory of a fresh Python process running `code`: its VmHWM, read by itself at exit (a child's
    ru_maxrss on Linux starts at its parent's peak, which would hide the figure)."""
    report = scratch / f"vmhwm-{time.monotonic_ns()}.txt"
    wrapper = (f"import atexit\n"
               f"atexit.register(lambda: open({str(report)!r}, 'w').write(next(l for l in open('/proc/self/status') "
               f"if l.startswith('VmHWM'))))\n{code}\n")
    done = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"a measured process failed: {done.stderr[-2000:]}")
    return int(report.read_text().split()[1]) / 1024  # kB


def run(args: argparse.Namespace) -> int:
    import pystac

    from eoscale.acquire.frozen import write_list
    from eoscale.bench.record import record

    os.environ.setdefault("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR")  # no directory listings over HTTP (both sides)
    tmp = Path(tempfile.mkdtemp(prefix="eoscale-bench-acquire-"))
    server = None
    try:
        scenes = _season(tmp / "season", args.size, args.dates)
        small = _season(tmp / "small", args.memory_size, 1) if args.memory_items else []
        server = _Server(tmp)
        items = [pystac.Item.from_dict(d) for d in _served_items(scenes, tmp, server.url)]
        mb = sum((tmp / Path(item.assets[k].href.split(server.url + "/", 1)[1])).stat().st_size
                 for item in items for k in BANDS) / 1e6
        times: dict[str, list[float]] = {"eoscale": [], "odc": []}
        for r in range(args.repeats):
            for side in (("eoscale", "odc") if r % 2 == 0 else ("odc", "eoscale")):
                if side == "eoscale":
                    times[side].append(_eoscale_side(items, tmp / f"cache-{r}", args.jobs))
                    shutil.rmtree(tmp / f"cache-{r}")
                else:
                    times[side].append(_odc_side(items, args.jobs))
                print(f"run {r + 1} {side}: {times[side][-1]:.2f} s")
        median = {side: float(np.median(t)) for side, t in times.items()}
        figures: dict = {
            "command": "eoscale bench acquire " + " ".join(sys.argv[sys.argv.index("acquire") + 1:]
                                                           if "acquire" in sys.argv else []),
            "commit": _commit(),
            "setup": {"items": len(items), "size_px": args.size, "bands": BANDS, "jobs": args.jobs,
                      "compressed_mb": round(mb, 2), "repeats": args.repeats},
            "seconds": times,
            "items_per_s": {side: len(items) / t for side, t in median.items()},
            "ratio_eoscale_over_odc": median["odc"] / median["eoscale"],
        }
        if args.memory_items:
            figures["memory"] = _memory(tmp, small, server.url, args.memory_items, args.jobs, write_list)
        print(json.dumps({k: v for k, v in figures.items() if k != "seconds"}, indent=1))
        if args.record:
            print(f"recorded in {record('acquire', figures, directory=args.record)}")
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _memory(tmp: Path, scene: list[Path], url: str, many: int, jobs: int, write_list) -> dict:
    """Peak RSS (MiB) of `eoscale stage` of 20 and of `many` Items over one tile, and of odc.stac.load of `many`."""
    import pystac

    out: dict = {}
    for count in (20, many):
        items = [pystac.Item.from_dict(d) for d in _served_items(scene, tmp, url, copies=count)]
        listing = write_list(items, tmp / f"mem-{count}.json", {"bench": "acquire"}, overwrite=True)
        argv = ["eoscale", "stage", "--items", str(listing), "--cache", str(tmp / f"mem-{count}"), "--jobs", str(jobs),
                "--assets", ",".join([*BANDS, "scl"])]
        out[f"stage_{count}_items_peak_rss_mib"] = _peak_rss_mib(
            f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_module('eoscale', run_name='__main__')", tmp)
    listing = tmp / f"mem-{many}.json"
    code = ("import odc.stac\nfrom eoscale.acquire.frozen import read_list\n"
            f"items, _ = read_list({str(listing)!r})\n"
            f"odc.stac.load(items, bands={[*BANDS, 'scl']!r}, groupby='id', pool={jobs}).load()")
    out[f"odc_load_{many}_items_peak_rss_mib"] = _peak_rss_mib(code, tmp)
    out["baseline_python_eoscale_import_peak_rss_mib"] = _peak_rss_mib("import eoscale.acquire.stage", tmp)
    out["scene_px"] = [int(v) for v in json.loads(scene[0].read_text())["assets"]["red"]["proj:shape"]]
    return out


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
