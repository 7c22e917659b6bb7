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


# the sensors of `make_sensor_store`'s 10 bands: 8 "optical" ones, then 2 "radar" ones (every band of the scenes shows
# the classes, so each sensor alone separates them)
SENSORS = (("sentinel-2", 8), ("sentinel-1", 2))


def make_sensor_store(folder: Path, *, sensors: tuple[tuple[str, int], ...] = SENSORS, gaps: bool = True,
                      **kwargs) -> Path:
    """A store of several sensors from `make_store`'s: its `sensors` attribute groups the 10 bands as `sensors` says
    (name, band count), and with `gaps` each group has its own nodata: in every tile, the first group's bands read the
    store's nodata (0) in rows 0-7 (a cloud) and the second group's in columns 0-5 (radar border noise), so pixels of
    one group only, of the other only, of both and (the scenes' nodata corner) of none are all there.

    The groups are written into the ingested store (as `eoscale ingest` of several sensors records them: the bands of
    each sensor side by side, `eoscale.sensors.groups`), pixels without any data now ignored in the labels and the
    tiles' valid shares updated; the statistics and class counts stay the ingest's."""
    import zarr

    from eoscale.store import schema

    out = make_store(folder, **kwargs)
    group = zarr.open_group(str(out), mode="r+")
    bands = list(group.attrs[schema.ATTR_BANDS])
    assert sum(n for _, n in sensors) == len(bands), "the sensors must cover the store's bands"
    record, start = [], 0
    for name, count in sensors:
        record.append({"name": name, "bands": bands[start:start + count]})
        start += count
    group.attrs[schema.ATTR_SENSORS] = record
    # and its input spec as ingest records it from those attributes (`eoscale.inputs.spec`)
    from eoscale.inputs.spec import SPEC_KEY, InputSpec

    attrs = {k: v for k, v in group.attrs.asdict().items() if k != SPEC_KEY}
    group.attrs[SPEC_KEY] = InputSpec.from_store_attrs(attrs).to_dict(statistics=False)
    if gaps:
        images = zarr.open_array(str(out / schema.IMAGES), mode="r+")  # (tile, time, band, y, x)
        first, second = sensors[0][1], sensors[0][1] + sensors[1][1]
        data = images[:]
        data[:, :, :first, 0:8, :] = 0
        data[:, :, first:second, :, 0:6] = 0
        images[:] = data
        # where both gaps meet there is no data now: as ingest marks such pixels (labels ignored, the tile's share)
        missing = (data == 0).all(axis=(1, 2))  # (tile, y, x)
        labels = zarr.open_array(str(out / schema.LABELS), mode="r+")
        ignored = labels[:]
        ignored[missing] = group.attrs[schema.ATTR_IGNORE_INDEX]
        labels[:] = ignored
        zarr.open_array(str(out / schema.VALID_FRACTION), mode="r+")[:] = 1 - missing.mean(axis=(1, 2))
    return out
