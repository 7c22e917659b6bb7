"""A small catalog served for real: three synthetic Sentinel-2 COG scenes (64 px, Earth Search-like Items) whose
assets the asset server serves, their Items (hrefs rewritten to it, `eo:cloud_cover` 10/30/90, the first two with
`file:size` and `file:checksum` as some archives state them) in a `rustac serve` STAC API. Started once per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def served_path(scenes: Path, item_id: str, band_file: str) -> str:
    """The asset server's path of one file of a scene."""
    return f"/scenes/{item_id}/{band_file}"
