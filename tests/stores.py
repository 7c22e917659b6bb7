"""Tiny seeded tile stores made by the real `eoscale ingest`, for the tests of any folder.

`make_store` writes two small 10-band Sentinel-2-like scenes (`tests.rasters`: UTM 32N, class regions visible
in the pixels, a nodata corner) with EPSG:3035 label rasters, and ingests them at tile 32 in shards of 8 tiles.
"""

from __future__ import annotations

from pathlib import Path

from tests.rasters import CLASSES_CSV, write_labels, write_scene

TILE = 32


def make_store(folder: Path, *, band_names: list[str] | None = None, size: int = 160, seed: int = 0) -> Path:
    """Ingest two `size`×`size` scenes into `folder/tiles.zarr` and return the store's path."""
    from eoscale.ingest import ingest

    folder.mkdir(parents=True, exist_ok=True)
    scenes, labels = [], []
    for i in range(2):
        scene = folder / f"scene{i}.tif"
        classes = write_scene(scene, height=size, width=size, seed=seed + i, band_names=band_names,
                              origin=(310_000.0 + 4_000 * i, 5_650_000.0), nodata_box=(slice(0, 20), slice(0, 30)))
        write_labels(folder / f"labels{i}.tif", scene, classes)
        scenes.append(str(scene))
        labels.append(str(folder / f"labels{i}.tif"))
    (folder / "classes.csv").write_text(CLASSES_CSV)
    out = folder / "tiles.zarr"
    ingest(scenes, out, labels=labels, classes=str(folder / "classes.csv"), tile_size=TILE, shard_tiles=8,
           split_block=1, workers=1, progress=False)
    return out
