"""Writing the tile store's contents: one whole shard per task, then the finishing touches.

The skeleton (see `skeleton.py`) exists before any shard task runs. Each shard task reads its
tiles from the scenes and writes one whole shard of `images` and `labels` (`eoscale.store.writer`: the bytes
zarr would write, as one object): no two tasks ever touch the same shard. A task records what it measured
(valid fractions, class counts, band histograms) in a marker file written *after* the shard, atomically,
so a resumed ingest trusts exactly the shards that have a marker and rewrites the rest.
"""

from __future__ import annotations

import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import zarr

from eoscale.catalog.digest import file_sha256
from eoscale.classes import IGNORE_INDEX
from eoscale.cluster.heap import large_arrays_from_the_heap
from eoscale.ingest.plan import TilePlan
from eoscale.ingest.scan import load_scene_labels
from eoscale.ingest.stats import band_histograms
from eoscale.ingest.targets import load_scene_targets, target_moments
from eoscale.raster.reader import SceneReader, gdal_cache
from eoscale.raster.sources import Scene
from eoscale.store import schema
from eoscale.store.writer import write_whole_shard


def store_nodata(scenes: list[Scene]) -> int:
    """The store's nodata value: its first scene's."""
    return int(scenes[0].nodata)


def marker_path(progress: Path, shard: int) -> Path:
    return progress / f"shard-{shard:06d}.npz"


def write_shard(
    store: str,
    progress: str,
    shard: int,
    start: int,
    scene_index: np.ndarray,
    row_off: np.ndarray,
    col_off: np.ndarray,
    scenes: list[Scene],
    tile_size: int,
    num_classes: int,
    *scene_labels_ready: object,
    targets: bool = False,
) -> int:
    """Read the shard's tiles, write them as one shard, then record its marker. Returns the tile count.

    `scene_labels_ready` are the results of the label tasks of the scenes it cuts: Dask runs this task
    only once they are done (and, with `targets`, those of the scenes' value rasters: `schema.TARGETS`).
    """
    large_arrays_from_the_heap()
    n, t = len(scene_index), tile_size
    images = np.empty((n, len(scenes[0].bands), t, t), dtype=np.uint16)
    labels = np.empty((n, t, t), dtype=np.uint8)
    valid = np.empty((n, t, t), dtype=bool)
    values = np.empty((n, t, t), dtype=np.float32) if targets else None
    masked = np.zeros((len(scenes), 2), dtype=np.int64)  # per scene: pixels masked by a mask band, by nodata
    # a store of several sensors: where each sensor's group of bands holds no data (group, tile, y, x)
    group_bands = band_groups(scenes[0])
    group_missing = np.zeros((len(group_bands), n, t, t), dtype=bool) if len(group_bands) > 1 else None
    for s in np.unique(scene_index):
        scene = scenes[s]
        scene_labels = load_scene_labels(Path(progress), int(s))
        scene_values = load_scene_targets(Path(progress), int(s)) if targets else None
        reader = open_reader(scene)
        with gdal_cache(reader.cache_bytes()):
            for positions, row, col0, count in _runs(np.flatnonzero(scene_index == s), row_off, col_off, t):
                block = reader.read_masked(row, col0, t, count * t)
                block_valid = block.valid
                # pixels without data, by the scene's own reason (another sensor may have data where it has none)
                masked[s] += (int((block.by_mask & ~block_valid).sum()), int((block.by_nodata & ~block_valid).sum()))
                groups = block.groups() if group_missing is not None else ()
                label_block = scene_labels[row : row + t, col0 : col0 + count * t]
                for k, p in enumerate(positions):
                    images[p] = block.pixels[:, :, k * t : (k + 1) * t]
                    labels[p] = label_block[:, k * t : (k + 1) * t]
                    valid[p] = block_valid[:, k * t : (k + 1) * t]
                    for g, (_, missing) in enumerate(groups):
                        group_missing[g, p] = missing[:, k * t : (k + 1) * t]
                    if scene_values is not None:
                        values[p] = scene_values[row : row + t, col0 + k * t : col0 + (k + 1) * t]
    # the store has one nodata value (its first scene's), in every band of a pixel without data: whatever each
    # scene's own nodata value, mask or alpha band said, readers need only the store's (all bands at nodata)
    images.transpose(1, 0, 2, 3)[:, ~valid] = store_nodata(scenes)
    if group_missing is not None:  # each sensor's bands at nodata where it has none: clouds in the optical bands only
        for g, bands in enumerate(group_bands):
            images.transpose(1, 0, 2, 3)[bands.start:bands.stop, group_missing[g]] = store_nodata(scenes)
    labels[~valid] = IGNORE_INDEX
    if values is not None:
        values[~valid] = np.nan
    valid_fraction = valid.reshape(n, -1).mean(axis=1).astype(np.float32)
    write_and_mark(store, progress, shard, images.reshape(n, 1, *images.shape[1:]), labels, values, valid_fraction,
                   num_classes, _histograms(images, valid, group_bands, group_missing), masked)
    return n


def band_groups(scene: Scene) -> list[slice]:
    """The scene's bands as groups of consecutive bands that say where they hold data: its own bands, each other
    sensor's (`eoscale.raster.fused`), its static layers (`BandFile.static`); one group for a scene of one sensor."""
    if not any(b.sensor and b.sensor != scene.sensor for b in scene.bands):
        return [slice(0, len(scene.bands))]
    keys = [("static" if b.static else b.sensor if b.sensor and b.sensor != scene.sensor else "") for b in scene.bands]
    groups, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            groups.append(slice(start, i))
            start = i
    return groups


def _histograms(images: np.ndarray, valid: np.ndarray, groups: list[slice], missing: np.ndarray | None) -> np.ndarray:
    """Each band's histogram over the pixels where its own group holds data (`valid` everywhere for one group)."""
    if missing is None:
        return band_histograms(images, valid)
    return np.concatenate([band_histograms(images[:, bands], valid & ~missing[g]) for g, bands in enumerate(groups)])


def write_and_mark(store: str, progress: str, shard: int, images: np.ndarray, labels: np.ndarray,
                   values: np.ndarray | None, valid_fraction: np.ndarray, num_classes: int, histograms: np.ndarray,
                   masked: np.ndarray, **extra: np.ndarray) -> None:
    """Write a shard's images (tile, time, band, y, x), labels (and values) as whole shards, then its marker with
    what it measured (`extra`: more per-tile arrays, such as a time series' `date_valid`)."""
    n = len(labels)
    class_counts = np.stack([np.bincount(lab[lab != IGNORE_INDEX], minlength=num_classes)[:num_classes] for lab in labels])
    # each shard encoded here in one loop and put as one object (eoscale.store.writer: zarr's per-chunk pipeline
    # cost 1.6x the encode itself); zarr's own thread pool, where it is used, only competes with the other Dask
    # workers for the same cores
    with zarr.config.set({"threading.max_workers": 1}):
        group = zarr.open_group(store, mode="r+")
        write_whole_shard(group[schema.IMAGES], shard, images.reshape(n, *group[schema.IMAGES].shape[1:]))
        write_whole_shard(group[schema.LABELS], shard, labels)
        if values is not None:
            write_whole_shard(group[schema.TARGETS], shard, values)
    # the sha256 of the shard files just written (still in the page cache, and in parallel over the workers): the
    # store's fingerprint at finalisation then reads only its small metadata files again (eoscale.catalog.digest)
    files = [f"{name}/{group[name].metadata.encode_chunk_key((shard,) + (0,) * (group[name].ndim - 1))}"
             for name in (schema.IMAGES, schema.LABELS) + ((schema.TARGETS,) if values is not None else ())]
    files = [f for f in files if (Path(store) / f).is_file()]
    digests = [file_sha256(Path(store) / f) for f in files]
    marker = marker_path(Path(progress), shard)
    tmp = marker.with_name(marker.stem + ".tmp.npz")
    # uncompressed: zlib on the histograms (a few MB a shard) cost a large share of the shard write
    np.savez(tmp, valid_fraction=valid_fraction, class_counts=class_counts, histograms=histograms,
             masked=masked, digest_files=np.array(files, dtype=str), digests=np.array(digests, dtype=str),
             **({"target_moments": target_moments(values)} if values is not None else {}), **extra)
    os.replace(tmp, marker)


# Each worker thread keeps its last scene open between shard tasks: consecutive shards of a split cut the same rows
# of GDAL blocks (a 256-tile shard is about two rows of windows, a 256 px block row four), and GDAL keeps a file's
# decoded blocks only while the file is open. Closing the reader after every shard made the next shard decode
# its blocks again: reading 2,048 train tiles took 1.8x as long (benchmarks/README.md, ingest). One reader a
# thread, so a worker's memory is still one scene's block cache.
_held: dict[int, tuple[tuple, SceneReader]] = {}  # thread id -> (scene and its files' stats, open reader)
_held_lock = threading.Lock()


def open_reader(scene: Scene) -> SceneReader:
    """The calling thread's open reader of `scene`, reused while the scene and its files (size, modification
    time) are unchanged; the thread's reader of another scene is closed first."""
    key = (scene, tuple(_stat(p) for p in scene.paths))
    thread = threading.get_ident()
    with _held_lock:
        held = _held.get(thread)
    if held is not None and held[0] == key:
        return held[1]
    if held is not None:
        held[1].close()
    reader = SceneReader(scene)
    with _held_lock:
        _held[thread] = (key, reader)
    return reader


def close_readers() -> None:
    """Close every reader `open_reader` holds in this process (run on each worker when the shards are written)."""
    with _held_lock:
        held = list(_held.values())
        _held.clear()
    for _, reader in held:
        reader.close()


def _stat(path: str) -> tuple:
    st = os.stat(path)
    return path, st.st_size, st.st_mtime_ns


def _runs(positions: np.ndarray, row_off: np.ndarray, col_off: np.ndarray, t: int):
    """Group tile positions (one scene) into runs of side-by-side tiles in one row: one read per run."""
    order = positions[np.lexsort((col_off[positions], row_off[positions]))]
    run = [order[0]]
    for p in order[1:]:
        last = run[-1]
        if row_off[p] == row_off[last] and col_off[p] == col_off[last] + t:
            run.append(p)
        else:
            yield run, int(row_off[run[0]]), int(col_off[run[0]]), len(run)
            run = [p]
    yield run, int(row_off[run[0]]), int(col_off[run[0]]), len(run)


def gather_markers(progress: Path, plan: TilePlan) -> dict[str, np.ndarray]:
    """The per-tile valid fractions and class counts, the summed band histograms and masked pixel counts
    (scene × (by mask band, by nodata)), and the shard files' sha256s (`digests`: {path in the store: sha256};
    markers of an older eoscale have none), from all markers."""
    valid_fraction = np.empty(len(plan), dtype=np.float32)
    class_counts, histograms, masked = None, None, None
    digests: dict[str, str] = {}
    moments = None
    per_date: dict[str, list[np.ndarray]] = {}  # a time series' (tile, time) arrays: date_valid, observations
    for shard in range(plan.num_shards):
        start, stop = plan.shard_range(shard)
        with np.load(marker_path(progress, shard)) as m:
            if class_counts is None:
                class_counts = np.empty((len(plan), m["class_counts"].shape[1]), dtype=np.int64)
                histograms = np.zeros_like(m["histograms"])
                masked = np.zeros_like(m["masked"])
            valid_fraction[start:stop] = m["valid_fraction"]
            class_counts[start:stop] = m["class_counts"]
            histograms += m["histograms"]
            masked += m["masked"]
            if "target_moments" in m.files:  # a store with targets: their count, sums, min and max
                part = m["target_moments"]
                moments = part.copy() if moments is None else np.concatenate(
                    [moments[:3] + part[:3], [min(moments[3], part[3]), max(moments[4], part[4])]])
            if "digests" in m.files:
                digests.update(zip(m["digest_files"].tolist(), m["digests"].tolist(), strict=True))
            for name in (schema.DATE_VALID, schema.OBSERVATIONS):
                if name in m.files:
                    per_date.setdefault(name, []).append(m[name])
    return {"valid_fraction": valid_fraction, "class_counts": class_counts, "histograms": histograms, "masked": masked,
            "digests": digests, **({"target_moments": moments} if moments is not None else {}),
            **{name: np.concatenate(parts) for name, parts in per_date.items()}}


def finalize(store: Path, progress: Path, gathered: dict[str, np.ndarray], attrs: dict) -> None:
    """Write the gathered per-tile arrays and the last attributes, mark the store complete, consolidate
    its metadata, and remove the progress folder."""
    group = zarr.open_group(store, mode="r+")
    group[schema.VALID_FRACTION][:] = gathered["valid_fraction"]
    group[schema.CLASS_COUNTS][:] = gathered["class_counts"]
    if schema.DATE_VALID in gathered:  # a time series: each date's valid share, measured by its shard task
        group[schema.DATE_VALID][:] = gathered[schema.DATE_VALID]
    elif schema.DATE_VALID in group:  # one date a tile (T = 1): its valid share is the tile's
        group[schema.DATE_VALID][:] = gathered["valid_fraction"].reshape(group[schema.DATE_VALID].shape)
    if schema.OBSERVATIONS in gathered:  # composites: the clear observations of each step
        group[schema.OBSERVATIONS][:] = gathered[schema.OBSERVATIONS]
    group.attrs.update({**attrs, schema.ATTR_COMPLETE: True})
    with warnings.catch_warnings():
        # consolidated metadata is not in the v3 spec yet, but xarray reads it and warns without it
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(store))
    shutil.rmtree(progress)
