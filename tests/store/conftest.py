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


def _inputs_of_the_fixture(folder: Path) -> tuple[list[Path], list[Path], Path]:
    """The fixture's inputs, rebuilt from its own tiles: its 32 tiles cover its two 128 px scenes whole, so each
    scene's four bands (B02, B03, B04, B08, nodata 0) and its labels on the scene's grid (codes; 0 where the store
    ignores a pixel) are written back as GeoTIFFs. (`eoscale synth` made them at 945b68e; the synthetic world has
    changed since, so synthesising again would give other scenes.)"""
    import numpy as np
    import rasterio
    from affine import Affine

    from eoscale.classes import ClassTable
    from eoscale.data import open_store

    ds = open_store(V1_STORE)
    table = ClassTable.from_records(ds.attrs["classes"])
    codes = np.array(table.codes + [0] * (256 - len(table.codes)), np.uint8)  # index -> code; 255 (ignored) -> 0
    images, labels = ds["images"].values[:, 0], ds["labels"].values
    rows, cols, scene_of = ds["row_off"].values, ds["col_off"].values, ds["scene"].values
    tile = images.shape[-1]
    scenes, label_files = [], []
    for s, record in enumerate(ds.attrs["scenes"]):
        pixels = np.zeros((4, record["height"], record["width"]), np.uint16)
        classes = np.zeros((record["height"], record["width"]), np.uint8)
        for i in np.flatnonzero(scene_of == s):
            window = np.s_[rows[i] : rows[i] + tile, cols[i] : cols[i] + tile]
            pixels[(slice(None), *window)] = images[i]
            classes[window] = codes[labels[i]]
        profile = dict(driver="GTiff", width=record["width"], height=record["height"], crs=f"EPSG:{record['epsg']}",
                       transform=Affine(*record["transform"]), tiled=True, blockxsize=64, blockysize=64)
        scenes.append(folder / f"{record['id']}.tif")
        with rasterio.open(scenes[-1], "w", count=4, dtype="uint16", nodata=0, **profile) as dst:
            dst.write(pixels)
            for b, name in enumerate(ds.attrs["bands"], start=1):
                dst.set_band_description(b, name)
        label_files.append(folder / f"{record['id']}_landcover.tif")
        with rasterio.open(label_files[-1], "w", count=1, dtype="uint8", nodata=0, **profile) as dst:
            dst.write(classes, 1)
    table.save(folder / "classes.csv")
    return scenes, label_files, folder / "classes.csv"


@pytest.fixture(scope="session")
def v2_store(tmp_path_factory) -> Path:
    """The fixture's inputs ingested by this eoscale, with the command that made the fixture."""
    folder = tmp_path_factory.mktemp("v2")
    scenes, labels, classes = _inputs_of_the_fixture(folder)
    out = folder / "v2_store.zarr"
    assert main(["ingest", "--scenes", *map(str, scenes), "--labels", *map(str, labels), "--classes", str(classes),
                 "--output", str(out), "--bands", "B02,B03,B04,B08", "--tile-size", "32", "--shard-tiles", "12",
                 "--split", "0.6,0.2,0.2", "--split-block", "2", "--workers", "1", "--quiet"]) == 0
    return out
