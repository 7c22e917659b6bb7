"""A full-size synthetic scene for the benchmarks (a whole 10,980² Sentinel-2 tile) without the memory of
synthesising one: `eoscale synth` renders a scene whole (~100 bytes a pixel: ~12 GB at 10,980²), so one
piece of at most PIECE² pixels is synthesised and repeated over the scene's grid, strip by strip.

The scene is the piece's multiband GeoTIFF profile (10 bands, pixel-interleaved, 256² deflate blocks) at the
full size; its labels are the piece's labels on the scene's 20 m grid (in the scene's CRS), repeated the same
way, so ingest still warps them (10 m from 20 m). Pixels repeat every piece, which changes neither what a
tile costs to read and compress nor the compression ratio of a tile.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

PIECE = 2196  # 10,980 / 5: the full tile is 5 × 5 pieces


def synthesize_full_size(out: Path, size: int, *, seed: int = 0) -> dict[str, object]:
    """Write `out/scene.tif`, `out/labels.tif` and the class table; returns {"scenes", "labels", "classes"}."""
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.warp import reproject

    from eoscale.synth import synthesize

    pieces = math.ceil(size / PIECE)
    piece = math.ceil(size / pieces)
    synth = synthesize(out / "piece", scenes=1, size=piece, seed=seed)
    scene, labels = out / "scene.tif", out / "labels.tif"
    with rasterio.open(synth.scene_paths[0]) as src:
        pixels, profile, tags = src.read(), src.profile, src.tags()
        descriptions = src.descriptions
        transform, crs = src.transform, src.crs
    profile.update(width=size, height=size, num_threads="all_cpus")  # deflate on every core: it is set-up, not measured
    with rasterio.open(scene, "w", **profile) as dst:
        _write_repeated(dst, pixels)
        dst.update_tags(**tags)
        for i, text in enumerate(descriptions, start=1):
            if text:
                dst.set_band_description(i, text)
    # the piece's labels on its own 20 m grid in the scene's CRS, then repeated like the pixels
    coarse = transform @ transform.scale(2)
    piece_labels = np.zeros((1, math.ceil(piece / 2), math.ceil(piece / 2)), dtype=np.uint8)
    with rasterio.open(synth.label_paths[0]) as src:
        reproject(rasterio.band(src, 1), piece_labels[0], dst_transform=coarse, dst_crs=crs, src_nodata=src.nodata,
                  dst_nodata=0, resampling=Resampling.nearest)
    half = math.ceil(size / 2)
    with rasterio.open(labels, "w", driver="GTiff", width=half, height=half, count=1, dtype="uint8", crs=crs,
                       transform=coarse, nodata=0, tiled=True, blockxsize=256, blockysize=256, compress="deflate") as dst:
        _write_repeated(dst, piece_labels)
    classes = out / "classes.csv"
    shutil.copy(synth.class_table_path, classes)
    (out / "fullsize.json").write_text(json.dumps({"size": size, "piece": piece, "seed": seed}) + "\n")
    shutil.rmtree(out / "piece")
    return {"scenes": [str(scene)], "labels": [str(labels)], "classes": str(classes)}


def full_size_inputs(out: Path) -> dict[str, object] | None:
    """The inputs of the scene `synthesize_full_size` wrote into `out` (None if it holds none): benchmarks take
    such a folder as --data, to be rerun on one scene without building it again."""
    if not (out / "fullsize.json").is_file():
        return None
    return {"scenes": [str(out / "scene.tif")], "labels": [str(out / "labels.tif")], "classes": str(out / "classes.csv")}


def _write_repeated(dst, piece: np.ndarray, rows_at_a_time: int = 256) -> None:
    """Fill `dst` with `piece` (band, y, x) repeated in both directions, in strips of whole block rows."""
    height, width = dst.height, dst.width
    cols = np.arange(width) % piece.shape[2]
    for top in range(0, height, rows_at_a_time):
        rows = np.arange(top, min(top + rows_at_a_time, height)) % piece.shape[1]
        dst.write(piece[:, rows][:, :, cols], window=((top, top + len(rows)), (0, width)))
