"""A small catalog served for real: three synthetic Sentinel-2 COG scenes (64 px, Earth Search-like Items) whose
assets the asset server serves, their Items (hrefs rewritten to it, `eo:cloud_cover` 10/30/90, the first two with
`file:size` and `file:checksum` as some archives state them) in a `rustac serve` STAC API. Started once per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoscale.acquire.cache import MARKER
from eoscale.acquire.checksum import file_multihash
from eoscale.cli import main
from tests.acquire.servers import AssetServer, StacApi, write_item_collection

COLLECTION = "sentinel-2-l2a"
CLOUD = (10.0, 30.0, 90.0)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("acquire-scenes")
    assert main(["synth", str(root), "--layout", "cog", "--scenes", "3", "--size", "64", "--seed", "3",
                 "--nodata-fraction", "0.05"]) == 0
    return root


def local_items(scenes: Path) -> list[Path]:
    """The synthetic Items with local hrefs (what `--stac` reads), in date order."""
    return sorted(scenes.glob("scenes/*/*.json"))


@pytest.fixture(scope="module")
def assets(scenes):
    with AssetServer(scenes) as server:
        yield server


@pytest.fixture(scope="module")
def api(scenes, assets, tmp_path_factory):
    served = []
    for n, path in enumerate(local_items(scenes)):
        item = json.loads(path.read_text())
        item["collection"] = COLLECTION
        item["properties"]["eo:cloud_cover"] = CLOUD[n]
        for asset in item["assets"].values():
            local = path.parent / asset["href"]
            asset["href"] = f"{assets.url}/{local.resolve().relative_to(scenes.resolve()).as_posix()}"
            if n < 2:
                asset["file:size"] = local.stat().st_size
                asset["file:checksum"] = file_multihash(str(local))
        served.append(item)
    items = write_item_collection(served, tmp_path_factory.mktemp("acquire-api") / "items.json")
    with StacApi(items) as server:
        yield server


FAST = ["--timeout", "0.5", "--backoff", "0.01", "--jobs", "2"]


def search(api, out: Path, *extra: str) -> int:
    return main(["search", "--api", api.url, "--collections", COLLECTION, "--bbox", "6.0,51.0,6.3,51.1",
                 "--output", str(out), *extra])


@pytest.fixture(scope="module")
def frozen(api, tmp_path_factory) -> Path:
    """Every item of the API as a frozen list (ItemCollection JSON)."""
    path = tmp_path_factory.mktemp("acquire-list") / "items.json"
    assert search(api, path) == 0
    return path


def stage(frozen: Path, cache: Path, *extra: str) -> int:
    return main(["stage", "--items", str(frozen), "--cache", str(cache), *FAST, *extra])


@pytest.fixture(scope="module")
def staged(frozen, assets, scenes, tmp_path_factory) -> Path:
    """The frozen list staged (one 503 retried on the way)."""
    cache = tmp_path_factory.mktemp("acquire-cache") / "cache"
    assets.clear()
    assets.plan(f"/scenes/{local_items(scenes)[1].stem}/B03.tif", "503")  # one retry, for predict's MLflow run
    assert stage(frozen, cache) == 0
    assert (cache / MARKER).is_file()
    return cache
