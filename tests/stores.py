"""Tiny seeded tile stores made by the real `eoscale ingest`, for the tests of any folder.

`make_store` writes two small 10-band Sentinel-2-like scenes (`tests.rasters`: UTM 32N, class regions visible
in the pixels, a nodata corner) with EPSG:3035 label rasters, and ingests them at tile 32 in shards of 8 tiles.
"""

from __future__ import annotations

from pathlib import Path

from tests.rasters import CLASSES_CSV, write_labels, write_scene

TILE = 32


def make_store(folder: Path, *, band_names: list[str] | None = None, size: int = 160, height: int | None = None,
               width: int | None = None, count: int = 2, seed: int = 0, tile_size: int = TILE, shard_tiles: int = 8,
               split: tuple[float, float, float] | None = None, own_grid_labels: bool = False) -> Path:
    """Ingest `count` scenes of `height`×`width` (default `size`²) px into `folder/tiles.zarr`; returns its path.

    Labels are in EPSG:3035 at 20 m, as European land-cover products come; with `own_grid_labels` the first
    scene's are on its own grid instead, so that they equal its pixels' classes exactly (`class_of_pixels`)."""
    from eoscale.ingest import ingest

    folder.mkdir(parents=True, exist_ok=True)
    scenes, labels = [], []
    for i in range(count):
        scene = folder / f"scene{i}.tif"
        classes = write_scene(scene, height=height or size, width=width or size, seed=seed + i, band_names=band_names,
                              origin=(310_000.0 + 4_000 * i, 5_650_000.0), nodata_box=(slice(0, 20), slice(0, 30)))
        on_grid = own_grid_labels and i == 0
        write_labels(folder / f"labels{i}.tif", scene, classes, **({"crs": "EPSG:32632", "resolution": 10.0}
                                                                  if on_grid else {}))
        scenes.append(str(scene))
        labels.append(str(folder / f"labels{i}.tif"))
    (folder / "classes.csv").write_text(CLASSES_CSV)
    out = folder / "tiles.zarr"
    ingest(scenes, out, labels=labels, classes=str(folder / "classes.csv"), tile_size=tile_size,
           shard_tiles=shard_tiles, split_block=1, workers=1, progress=False, **({"split": split} if split else {}))
    return out
