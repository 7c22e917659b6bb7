"""The stores of tests/store: the version-1 fixture written by the eoscale of before the time axis
(tests/store/data/README.md), a copy of it to damage, and the same inputs ingested by today's eoscale."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eoscale.cli import main

V1_STORE = Path(__file__).parent / "data" / "v1_store.zarr"
# the sha256 of the fixture's image shards (tests/store/data/README.md): a version-2 ingest of the same inputs
# writes the same bytes
V1_IMAGE_SHARDS = {
    "0": "0c12f3dd602458cbed49a214ee04b2d6594e7d3f8e13088cd8c86fae67505eb4",
    "1": "41fd7223860861dfc73ee61511723f1f4046089cdb02db512b29baee7e87caa2",
    "2": "3830baed02f00abaec0d294d1c2fd2755abaa0f3288d36e43e570e149d1dba6d",
}


@pytest.fixture
def v1_copy(tmp_path) -> Path:
    """A copy of the version-1 fixture, free to change."""
    return Path(shutil.copytree(V1_STORE, tmp_path / "v1_store.zarr"))


@pytest.fixture(scope="session")
def v2_store(tmp_path_factory) -> Path:
    """The fixture's inputs ingested by this eoscale, with the command that made the fixture."""
    folder = tmp_path_factory.mktemp("v2")
    assert main(["synth", "--output", str(folder / "synth"), "--scenes", "2", "--size", "128", "--seed", "0"]) == 0
    out = folder / "v2_store.zarr"
    assert main(["ingest", "--scenes", str(folder / "synth/scenes/*.tif"), "--labels", str(folder / "synth/labels/*.tif"),
                 "--classes", str(folder / "synth/classes.csv"), "--output", str(out), "--bands", "B02,B03,B04,B08",
                 "--tile-size", "32", "--shard-tiles", "12", "--split", "0.6,0.2,0.2", "--split-block", "2",
                 "--workers", "1", "--quiet"]) == 0
    return out
