"""`ingest()`: scenes and label rasters in, a complete tile store out, resumable at any point.

Work happens in `<output>.partial/` (the store being written and a progress folder). A rerun with the same
arguments after a crash or SIGKILL picks up where it stopped: scanned scenes and shards with a marker are
skipped. Only when every shard is written is the store marked complete and moved to `<output>` (an existing
store there is replaced only with `overwrite=True`, and only at that last moment, so it is never lost to a
failed run).

For lineage, the store records every input file's sha256 (`schema.ATTR_INPUTS`; taken by Dask tasks beside the
scans, or reused from --verify) and, last, its STAC Collection (`schema.COLLECTION_FILE`, inside the store) with
the store's fingerprint (`eoscale.catalog.digest.store_fingerprint`; the shards' digests come from their tasks).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from eoscale import __version__
from eoscale.catalog.digest import file_sha256, store_fingerprint
from eoscale.catalog.stac import footprint, store_collection, to_json, write_json
from eoscale.classes import IGNORE_INDEX, WORLDCOVER, ClassTable
from eoscale.cluster import dask_client
from eoscale.errors import InputError, OutputExistsError
from eoscale.ingest.fused import add_other_sensors, plan_sensors, several_sensors, with_paths
from eoscale.ingest.fused_series import place_bands, plan_fused_places, step_sensors, warp_other_sensors
from eoscale.ingest.labels import describe_label_rasters, labels_for_scene
from eoscale.ingest.lock import check_replaceable, is_tile_store, one_writer
from eoscale.ingest.plan import make_plan
from eoscale.ingest.scan import only_nodata, scan_parts, scan_validity, warp_labels
from eoscale.ingest.series import (
    group_places,
    parse_composite,
    read_dates_csv,
    series_attrs,
    series_calendar,
    series_windows,
    step_dates,
    time_steps,
)
from eoscale.ingest.series_writer import write_series_shard
from eoscale.ingest.skeleton import CODECS, create_skeleton
from eoscale.ingest.static import DEFAULT_LAYERS, add_static_layers, static_parameters
from eoscale.ingest.stats import borrowed_statistics, statistics_from_histograms, unusable_band
from eoscale.ingest.targets import describe_target_rasters, target_statistics, targets_for_scene, warp_targets
from eoscale.ingest.writer import close_readers, finalize, gather_markers, marker_path, write_shard
from eoscale.inputs.spec import SPEC_KEY, InputSpec
from eoscale.raster.float_optical import EXAMPLE, check_input_scale, has_unstated, with_input_scale
from eoscale.raster.fused import sensors_record
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import Scene, open_scenes
from eoscale.raster.stac import label_files
from eoscale.sensors import get_sensor
from eoscale.store import schema

# scenes of at most this many pixels in all (8 of 512², one date each) are ingested by one worker in this process when
# --workers is not given: starting a local cluster's worker processes costs more than they save there (measured: 4
# places × 2 dates of 256², 7.2 s wall and 6.3 CPU s with 2 worker processes, 3.6 s and 3.2 with one in-process)
SMALL_INPUT_PIXELS = 8 * 512 * 512


@dataclass
class IngestSummary:
    store: str
    tiles: int
    shards: int
    dropped_nodata: int
    tiles_per_split: dict[str, int]
    unmapped_label_codes: dict[int, int]
    raw_bytes: int
    stored_bytes: int
    seconds: float
    resumed_shards: int = 0
    scenes: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each phase
    fingerprint: str = ""  # eoscale.catalog.digest.store_fingerprint, as the store's collection.json records it
    sensor: str = ""  # eoscale.sensors: what the store's bands are
    skipped: list[str] = field(default_factory=list)  # files in band directories that hold no band
    split_block: int = 0  # the split's block edge in tiles: --split-block, or a smaller one for a small scene

    @property
    def compression_ratio(self) -> float:
        return self.raw_bytes / max(self.stored_bytes, 1)

    @property
    def tiles_per_second(self) -> float:
        return self.tiles / max(self.seconds, 1e-9)

    @property
    def megabytes_per_second(self) -> float:
        return self.raw_bytes / 1e6 / max(self.seconds, 1e-9)


@one_writer
def ingest(
    scenes: list[str],
    output: str | os.PathLike,
    *,
    labels: list[str] | None = None,
    targets: list[str] | None = None,
    target_name: str | None = None,
    target_units: str | None = None,
    classes: str | ClassTable | None = None,
    bands: list[str] | None = None,
    band_names: list[str] | None = None,
    band_map: dict[str, str] | None = None,
    scl_classes: tuple[int, ...] | None = None,
    stac: list[str] | None = None,
    tile_size: int = 64,
    stride: int | None = None,
    shard_tiles: int = 256,
    min_valid: float = 0.5,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    split_block: int = 4,
    seed: int = 0,
    codec: str = "blosc-zstd",
    level: int | None = None,
    workers: int | None = None,
    scheduler: str | object | None = None,
    overwrite: bool = False,
    verify: bool = False,
    progress: bool = True,
    time_series: bool = False,
    dates_csv: str | None = None,
    group_by: str = "footprint",
    max_dates: int | None = None,
    composite: str | None = None,
    static: str | list[str] | None = None,
    static_layers: tuple[str, ...] = DEFAULT_LAYERS,
    dem_datum: str | None = None,
    reference_sensor: str | None = None,
    statistics_from: str | None = None,
    input_scale: dict | None = None,
) -> IngestSummary:
    """Cut `scenes` (paths or globs) and the scenes of the STAC Items `stac` with `labels` (rasters or label Items)
    into a tile store at `output`. See the module docstring. With `time_series` (or `dates_csv`, `max_dates`,
    `composite`), dated scenes of the same places become tiles with a time step a date or composite interval
    (`eoscale.ingest.series`); with the DEM `static`, its `static_layers` become extra bands (`eoscale.ingest.static`).
    Scenes of several sensors become one store of the `reference_sensor`'s grids (`eoscale.ingest.fused`).
    With `statistics_from` (a checkpoint or a tile store of the same bands), the store is normalised with its mean and
    std, not its own: a store of new labels to fine-tune that checkpoint on. Scenes of float pixels are mapped onto
    the store's scale by `input_scale` (`{"scale", "offset"}`: store = value × scale + offset;
    `eoscale.raster.float_optical`), which the store records; without it they are refused."""
    started = time.perf_counter()
    stride = tile_size if stride is None else stride
    _check_numbers(tile_size, stride, shard_tiles, min_valid, split, split_block)
    input_scale = check_input_scale((input_scale or {}).get("scale"), (input_scale or {}).get("offset"))
    if codec not in CODECS:
        raise InputError(f"unknown codec {codec!r}: choose one of {', '.join(CODECS)}")
    output = Path(output)
    if output.exists() and not overwrite:
        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    check_replaceable(output)  # before any work: --overwrite replaces only an eoscale store
    class_table = classes if isinstance(classes, ClassTable) else ClassTable.load(classes) if classes else WORLDCOVER
    series = time_series or bool(dates_csv) or max_dates is not None or composite is not None
    interval = parse_composite(composite)
    if max_dates is not None and interval is not None:
        raise InputError("give --max-dates (dates as they are) or --composite (regular intervals), not both")
    listed = [row[0] for row in read_dates_csv(dates_csv)] if dates_csv else []
    scene_list = open_scenes(list(scenes) + [p for p in listed if not p.lower().endswith(".json")], bands=bands,
                             band_names=band_names, band_map=band_map, scl_classes=scl_classes,
                             stac=(list(stac or []) + [p for p in listed if p.lower().endswith(".json")]) or None,
                             several_sensors=True)
    scene_list = _input_scale(scene_list, input_scale)
    fusion = None  # scenes of several sensors: the reference scenes, their pairs, what the fingerprint records
    places = None  # a time series: the places (each a reference grid and its dated scenes)
    fused_series = None  # a time series of several sensors: what the fingerprint records (eoscale.ingest.fused_series)
    if several_sensors(scene_list) and series:
        places, fused_series = plan_fused_places(scene_list, reference_sensor, group_by=group_by, dates_csv=dates_csv)
    elif several_sensors(scene_list):
        refs, pairs, fused_parameters = plan_sensors(scene_list, reference_sensor)
        fusion = (pairs, fused_parameters)
        scene_list = with_paths(refs, pairs)
    elif reference_sensor is not None and reference_sensor != scene_list[0].sensor:
        raise InputError(f"--reference-sensor {reference_sensor!r}: the scenes are all {scene_list[0].sensor}: "
                         f"leave it out, or give that sensor's scenes too")
    # a time series: the places (each a reference grid and its dated scenes); otherwise each scene is its own place
    if series and places is None:
        places = group_places(scene_list, group_by=group_by, dates_csv=dates_csv)
    if places is not None:
        scene_list = [s for place in places for s in place.scenes]
    grids = [place.grid for place in places] if places is not None else scene_list
    label_rasters = describe_label_rasters(label_files(labels)) if labels else []
    scene_labels = [labels_for_scene(s, label_rasters) if label_rasters else [] for s in grids]
    # value rasters (--targets): per-pixel regression targets, resampled by a rule for values (eoscale.ingest.targets)
    target_rasters = describe_target_rasters(list(targets)) if targets else []
    scene_targets = [targets_for_scene(s, target_rasters) for s in grids] if target_rasters else []
    for scene in scene_list:
        if tile_size > min(scene.width, scene.height):
            raise InputError(
                f"tile size {tile_size} is larger than scene {scene.id!r} ({scene.width}×{scene.height} px): "
                f"use a smaller --tile-size"
            )
    parameters = {
        "bands": scene_list[0].band_names, "sensor": scene_list[0].sensor, "band_map": dict(band_map or {}),
        "scl_classes": list(scl_classes) if scl_classes is not None else None,
        "tile_size": tile_size, "stride": stride, "shard_tiles": shard_tiles,
        "min_valid": min_valid, "split": list(split), "split_block": split_block, "seed": seed, "codec": codec,
        "level": level, "classes": class_table.to_records(),
    }
    if target_rasters:  # only then: a store without targets has the fingerprint it had before
        parameters["targets"] = {"kind": "values", "name": target_name, "units": target_units}
    if places is not None:  # only then, as targets: a single-date store keeps its fingerprint
        parameters["time_series"] = {"group_by": group_by, "max_dates": max_dates, "composite": interval,
                                     "dates_csv": os.path.abspath(dates_csv) if dates_csv else None,
                                     "places": [[place.id, [s.id for s in place.scenes]] for place in places]}
    if fusion is not None:  # likewise: a store of one sensor keeps its fingerprint
        parameters["sensors"] = fusion[1]
    if fused_series is not None:  # likewise
        parameters["sensors"] = fused_series
    if input_scale is not None:  # likewise
        parameters["input_scale"] = dict(input_scale)
    if statistics_from is not None:  # likewise
        if static:
            raise InputError("--statistics-from with --static: the DEM's layers have no statistics in the checkpoint or "
                             "store; ingest without one of them")
        parameters["statistics_from"] = {"source": os.path.abspath(statistics_from),
                                         **borrowed_statistics(statistics_from, place_bands(places) if fused_series
                                                               else _all_bands(scene_list, fusion))}
    if static:  # likewise: the DEM checked (datum, cover) before anything is written
        parameters["static"] = static_parameters(static, grids, layers=tuple(static_layers), accept_datum=dem_datum)
    label_paths = [r.path for r in label_rasters]
    static_paths = [static] if isinstance(static, str | os.PathLike) else list(static or [])
    target_paths = [r.path for r in target_rasters] + [str(p) for p in static_paths]  # the DEMs: input files too
    # --verify reads every input now; otherwise their sha256s (for the store's lineage) are taken by Dask tasks
    # beside the scans and shards
    digests = {p: file_sha256(p) for p in _input_paths(scene_list, label_paths + target_paths)} if verify else {}
    fingerprint = _fingerprint(parameters, scene_list, label_paths + target_paths, verify=verify, digests=digests)
    work = output.with_name(output.name + ".partial")
    progress_dir, store = work / "progress", work / "store.zarr"
    _prepare_work_dir(work, progress_dir, fingerprint, overwrite=overwrite)
    if fusion is not None:
        scene_list = add_other_sensors(scene_list, fusion[0], progress_dir)
        grids = scene_list
    if fused_series is not None:  # the other sensors' scenes warped onto their places' grids
        places = warp_other_sensors(places, progress_dir)
    if static and places is not None:  # a time series: the layers on each place's grid, read at every step
        with_layers = add_static_layers([place.grid for place in places], static, progress_dir,
                                        layers=tuple(static_layers), accept_datum=dem_datum)
        places = [replace(place, grid=grid) for place, grid in zip(places, with_layers, strict=True)]
    elif static:
        scene_list = add_static_layers(scene_list, static, progress_dir, layers=tuple(static_layers),
                                       accept_datum=dem_datum)
        grids = scene_list  # a single-date store: each scene is its own grid
    if places is not None:
        scene_list = [s for place in places for s in place.scenes]
        grids = [place.grid for place in places]

    phases = {"inspect": time.perf_counter() - started}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = now - mark
        mark = now

    if workers is None and scheduler is None and sum(s.width * s.height for s in scene_list) <= SMALL_INPUT_PIXELS:
        workers = 1  # a small input: one worker in this process (eoscale.cluster.dask_client), no cluster to start
    with dask_client(workers=workers, scheduler=scheduler,
                     preload=("eoscale.ingest.scan", "eoscale.ingest.writer")) as client:
        lap("cluster")
        threads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
        # the label tasks first (every shard of a scene waits for its labels), then the scans, a large scene's in
        # runs of window rows over all workers (fewer scenes than workers left all but one idle for the whole scan)
        label_tasks = [
            client.submit(warp_labels, scene, i, scene_labels[i], class_table, progress=str(progress_dir),
                          key=f"eoscale-labels-{i}", pure=False, priority=10)
            for i, scene in enumerate(grids)
        ]
        target_tasks = [
            client.submit(warp_targets, scene, i, scene_targets[i], progress=str(progress_dir),
                          key=f"eoscale-targets-{i}", pure=False, priority=10)
            for i, scene in enumerate(grids)
        ] if target_rasters else []
        scan_tasks = [
            [client.submit(scan_validity, scene, i, tile_size=tile_size, stride=stride, progress=str(progress_dir),
                           rows=rows, key=f"eoscale-scan-{i}-{rows[0]}", pure=False, priority=10)
             for rows in scan_parts(scene.height, tile_size, stride, -(-2 * threads // len(scene_list)))]
            for i, scene in enumerate(scene_list)
        ]
        hash_tasks = {p: client.submit(file_sha256, p, key=f"eoscale-sha256-{i}", pure=False)
                      for i, p in enumerate(_input_paths(scene_list, label_paths + target_paths)) if p not in digests}
        window_valid = []
        for i, parts in enumerate(client.gather(scan_tasks)):  # the label tasks go on meanwhile
            if places is None and not any(any_valid for _, any_valid in parts):
                raise only_nodata(scene_list[i])  # a date of a time series may be under cloud all over: a masked step
            window_valid.append(np.concatenate([fractions for fractions, _ in parts], axis=0))
        if places is not None:
            places, window_valid = series_windows(places, window_valid, max_dates=max_dates, composite=interval)
        lap("scan")
        plan = make_plan(window_valid, tile_size=tile_size, stride=stride, shard_tiles=shard_tiles,
                         min_valid=min_valid, fractions=split, split_block=split_block, seed=seed,
                         grounds=[(scene.transform, scene.crs) for scene in grids])
        if len(plan) == 0:
            raise InputError(
                f"no window of {tile_size}×{tile_size} px has a valid fraction of at least {min_valid}: "
                f"lower --min-valid or --tile-size"
            )
        attrs = _store_attrs(grids, class_table, plan, parameters, stride, fingerprint)
        steps = time_steps(places) if places is not None else 1
        spec = InputSpec.from_store_attrs({**attrs, schema.ATTR_TIME_STEPS: steps})
        if interval is not None:  # the composite calendar's first day: predict lays a new place's intervals on it
            spec = spec.with_calendar_start(series_calendar(places, interval).isoformat())
        attrs[SPEC_KEY] = spec.to_dict(statistics=False)
        if places is not None:
            attrs[schema.ATTR_SCENES] = [{**a, **_series_record(p, several=fused_series is not None)}
                                         for a, p in zip(attrs[schema.ATTR_SCENES], places, strict=True)]
        if not (progress_dir / "skeleton.done").exists():
            shutil.rmtree(store, ignore_errors=True)
            create_skeleton(store, plan, grids, wavelengths=attrs[schema.ATTR_WAVELENGTHS],
                            num_classes=len(class_table), codec=codec, level=level, attrs=attrs,
                            targets=bool(target_rasters),
                            dates=step_dates(places, plan.scene, steps) if places is not None else None,
                            observations=interval is not None)
            (progress_dir / "skeleton.done").touch()
        lap("plan")
        todo = [k for k in range(plan.num_shards) if not marker_path(progress_dir, k).exists()]
        resumed = plan.num_shards - len(todo)
        # each worker writes one run of consecutive shards (loosely: an idle worker may take another's): neighbouring
        # shards read the same rows of GDAL blocks, which a worker's open reader then decodes once
        # (eoscale.ingest.writer.open_reader)
        addresses = sorted(client.scheduler_info()["workers"])  # those that ran the scans: at least one
        futures = []
        try:
            for j, k in enumerate(todo):
                start, stop = plan.shard_range(k)
                shard_args = (places, tile_size, len(class_table), steps, interval is not None) if places is not None \
                    else (scene_list, tile_size, len(class_table))
                futures.append(client.submit(
                    write_series_shard if places is not None else write_shard, str(store), str(progress_dir), k,
                    start, plan.scene[start:stop], plan.row_off[start:stop], plan.col_off[start:stop], *shard_args,
                    *[label_tasks[s] for s in np.unique(plan.scene[start:stop])],
                    *[target_tasks[s] for s in np.unique(plan.scene[start:stop]) if target_tasks],
                    **({"targets": True} if target_tasks else {}), key=f"eoscale-shard-{k}", pure=False,
                    workers=[addresses[j * len(addresses) // len(todo)]] if addresses else None,
                    allow_other_workers=bool(addresses),
                ))
            _wait_with_progress(client, futures, total=len(plan), done=len(plan) - sum(
                plan.shard_range(k)[1] - plan.shard_range(k)[0] for k in todo), show=progress)
        except BaseException:
            # the scenes the workers' threads keep open between shard tasks (writer.open_reader) are closed also
            # when the ingest stops here: a long-lived cluster (--scheduler) would hold them until its next ingest
            with contextlib.suppress(Exception):  # what stopped the ingest is the error to report, not this
                client.run(close_readers)
            raise
        client.run(close_readers)
        unmapped: dict[int, int] = {}
        for counts in client.gather(label_tasks):
            for code, count in counts.items():
                unmapped[code] = unmapped.get(code, 0) + count
        digests.update(zip(hash_tasks, client.gather(list(hash_tasks.values())), strict=True))
        lap("shards")

    gathered = gather_markers(progress_dir, plan)
    statistics = {**statistics_from_histograms(gathered["histograms"]),
                  **{k: v for k, v in parameters.get("statistics_from", {}).items() if k != "source"}}
    problem = unusable_band(statistics, list(attrs[schema.ATTR_BANDS]))
    if problem:
        shutil.rmtree(work, ignore_errors=True)  # ours; a rerun with other --bands would find it in the way
        raise InputError(problem)
    finalize(store, progress_dir, gathered, {
        schema.ATTR_STATISTICS: statistics,
        schema.ATTR_MASKED: masked_pixels(grids, gathered["masked"], plan, steps=steps),
        schema.ATTR_UNMAPPED: {str(k): v for k, v in sorted(unmapped.items())},
        schema.ATTR_INPUTS: input_records(scene_list, label_paths, digests, target_paths=target_paths[:len(target_rasters)],
                                          static_paths=[str(p) for p in static_paths]),
        **(_target_attrs(gathered["target_moments"], target_name, target_units) if target_rasters else {}),
    })
    store_fingerprint = write_collection(store, grids, plan, known=gathered["digests"])
    _move_into_place(store, output, work)
    lap("finalize")
    counts = np.bincount(plan.split, minlength=len(schema.SPLITS))
    if unmapped:
        total = sum(unmapped.values())
        warnings.warn(
            f"{total} label pixels have codes not in the class table and were set to ignore ({IGNORE_INDEX}): "
            + ", ".join(f"code {c}: {n}" for c, n in sorted(unmapped.items())),
            stacklevel=2,
        )
    bands_n = len(scene_list[0].bands)
    return IngestSummary(
        store=str(output),
        tiles=len(plan),
        shards=plan.num_shards,
        dropped_nodata=plan.dropped_nodata,
        tiles_per_split={name: int(counts[i]) for i, name in enumerate(schema.SPLITS)},
        unmapped_label_codes=unmapped,
        raw_bytes=len(plan) * tile_size * tile_size * (2 * bands_n * steps + 1),
        stored_bytes=_disk_usage(output / schema.IMAGES) + _disk_usage(output / schema.LABELS),
        seconds=time.perf_counter() - started,
        resumed_shards=resumed,
        scenes=[s.id for s in scene_list],
        phases=phases,
        fingerprint=store_fingerprint,
        sensor=scene_list[0].sensor,
        skipped=[p for s in scene_list for p in s.skipped],
        split_block=plan.split_block,
    )


def _series_record(place, *, several: bool) -> dict:
    """What a place's record in the store adds (`series_attrs`); of several sensors, each step's sensors too."""
    record = series_attrs(place)
    if several:
        for step, sensors in zip(record["steps"], step_sensors(place), strict=True):
            step["sensors"] = sensors
    return record


def _input_scale(scenes: list[Scene], input_scale: dict | None) -> list[Scene]:
    """The scenes with their float bands on the store's scale (`eoscale.raster.float_optical`); a stated conversion
    that no scene needs is refused, so that the store never records one it did not apply."""
    if input_scale is not None and not any(has_unstated(s) for s in scenes):
        raise InputError(f"--scale {input_scale['scale']:g} --offset {input_scale['offset']:g} map float pixels, and "
                         f"no scene holds any (their bands are integers, read as they are): leave them out")
    advice = f"state how they map onto the store's uint16 scale with --scale and --offset (e.g. {EXAMPLE})"
    return [with_input_scale(s, input_scale, advice=advice) for s in scenes]


def _check_numbers(tile_size, stride, shard_tiles, min_valid, split, split_block) -> None:
    if tile_size < 8:
        raise InputError(f"--tile-size must be at least 8 pixels, got {tile_size}")
    if not 1 <= stride:
        raise InputError(f"--stride must be at least 1 pixel, got {stride}")
    if shard_tiles < 1:
        raise InputError(f"--shard-tiles must be at least 1, got {shard_tiles}")
    if not 0.0 <= min_valid <= 1.0:
        raise InputError(f"--min-valid must be between 0 and 1, got {min_valid}")
    if len(split) != 3 or any(f < 0 for f in split) or abs(sum(split) - 1.0) > 1e-6:
        raise InputError(f"--split must be three fractions (train, val, test) that add up to 1, got {list(split)}")
    if split_block < 1:
        raise InputError(f"--split-block must be at least 1 tile, got {split_block}")


def _input_paths(scenes: list[Scene], label_paths: list[str]) -> list[str]:
    """Every input file once, scenes' files first."""
    return list(dict.fromkeys([p for s in scenes for p in s.paths] + list(label_paths)))


def _fingerprint(parameters: dict, scenes: list[Scene], label_paths: list[str], *, verify: bool = False,
                 digests: dict[str, str] | None = None) -> str:
    """What a resumed ingest must share with the one it resumes: the parameters and every input file's path,
    size and modification time, or with `verify` its content's sha256 instead of the time (for file systems
    whose mtimes are not kept, e.g. after a copy; it reads every input once more, unless `digests` gives the
    sha256s already taken)."""
    if verify and digests is None:
        digests = {p: file_sha256(p) for p in _input_paths(scenes, label_paths)}
    files = []
    for path in [p for s in scenes for p in s.paths] + label_paths:
        st = os.stat(path)
        if verify:
            files.append([os.path.abspath(path), st.st_size, digests[path]])
        else:
            files.append([os.path.abspath(path), st.st_size, st.st_mtime_ns])
    # the schema version too: an unfinished ingest of another eoscale's layout is not resumed
    blob = json.dumps({"parameters": parameters, "files": files, "scenes": [s.id for s in scenes],
                       **({"schema": schema.SCHEMA_VERSION} if schema.SCHEMA_VERSION > 1 else {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _prepare_work_dir(work: Path, progress: Path, fingerprint: str, *, overwrite: bool) -> None:
    stamp = progress / "fingerprint"
    if work.exists():
        foreign = set(os.listdir(work)) - {"progress", "store.zarr"}
        if foreign or (work.joinpath("store.zarr").exists() and not is_tile_store(work / "store.zarr")):
            raise OutputExistsError(f"{str(work)!r} holds files eoscale ingest did not make ({', '.join(sorted(foreign))[:80] or 'store.zarr'}): "
                                    f"move it away and rerun")
        if stamp.exists() and stamp.read_text() == fingerprint:
            return  # resume
        if not overwrite and stamp.exists():
            raise OutputExistsError(
                f"{str(work)!r} holds an unfinished ingest started with other inputs or options: rerun that command "
                f"to finish it, or pass --overwrite to discard it"
            )
        shutil.rmtree(work)
    progress.mkdir(parents=True)
    stamp.write_text(fingerprint)


def _store_attrs(scenes: list[Scene], classes: ClassTable, plan, parameters: dict, stride: int, fingerprint: str) -> dict:
    names = scenes[0].band_names
    sensor = get_sensor(scenes[0].sensor)
    groups = sensors_record(scenes[0])  # several sensors, or one and a DEM's layers: each a group of bands
    wavelengths = sensor.wavelengths(names, scenes[0].platform) if len(groups) == 1 else [
        w for g in groups for w in get_sensor(g["name"]).wavelengths(
            g["bands"], scenes[0].platform if g["name"] == sensor.name else _platform(scenes[0], g["name"]))]
    return {
        schema.ATTR_SCHEMA: schema.SCHEMA_VERSION,
        schema.ATTR_COMPLETE: False,
        schema.ATTR_SENSOR: sensor.name,
        schema.ATTR_BANDS: names,
        **({schema.ATTR_SENSORS: groups} if len(groups) > 1 else {}),  # a store of one sensor: as before
        schema.ATTR_WAVELENGTHS: wavelengths,
        schema.ATTR_NODATA: scenes[0].nodata,
        schema.ATTR_IGNORE_INDEX: IGNORE_INDEX,
        schema.ATTR_CLASSES: classes.to_records(),
        schema.ATTR_SPLITS: plan.split_ranges(),
        schema.ATTR_TILE_SIZE: plan.tile_size,
        schema.ATTR_STRIDE: stride,
        schema.ATTR_SHARD_TILES: plan.shard_tiles,
        schema.ATTR_SCENES: [s.to_attrs() for s in scenes],
        schema.ATTR_INGEST: {**{k: v for k, v in parameters.items() if k != "classes"}, "eoscale_version": __version__,
                             "fingerprint": fingerprint,
                             # a small scene's split, dealt in smaller blocks (eoscale.ingest.plan); else as before
                             **({"split_block_used": plan.split_block}
                                if plan.split_block != parameters["split_block"] else {})},
    }


def _all_bands(scenes: list[Scene], fusion) -> list[str]:
    """The store's bands before the other sensors' are added: the first scene's, then its paired scenes' (several
    sensors, `eoscale.ingest.fused`)."""
    bands = list(scenes[0].band_names)
    if fusion is not None:
        bands += [b for pick in fusion[0][0].values() for b in pick[0].band_names]
    return bands


def _platform(scene: Scene, sensor: str) -> str | None:
    """The platform of the scene of `sensor` fused with `scene` (`Scene.fused`), if it says."""
    return next((f.get("platform") for f in scene.fused if f["sensor"] == sensor), None)


def _target_attrs(moments, name: str | None, units: str | None) -> dict:
    """The attributes of a store with per-pixel values (`schema.ATTR_TARGET_*`)."""
    return {schema.ATTR_TARGET_KIND: "values", schema.ATTR_TARGET_NAME: name or "value",
            schema.ATTR_TARGET_UNITS: units, schema.ATTR_TARGET_STATISTICS: target_statistics(moments)}


def input_records(scenes: list[Scene], label_paths: list[str], digests: dict[str, str], *,
                  target_paths: list[str] = (), static_paths: list[str] = ()) -> list[dict]:
    """The store's input files for its lineage (`schema.ATTR_INPUTS`): each scene's files, then the label
    rasters, then the value rasters (`--targets`), then the DEM (`--static`), with absolute path, size and sha256."""
    records = [{"scene": s.id, "role": "scene", "path": p} for s in scenes for p in s.paths]
    records += [{"scene": None, "role": "labels", "path": p} for p in label_paths]
    records += [{"scene": None, "role": "targets", "path": p} for p in target_paths]
    records += [{"scene": None, "role": "static", "path": p} for p in static_paths]
    seen, out = set(), []
    for r in records:
        if r["path"] not in seen:
            seen.add(r["path"])
            out.append({**r, "path": os.path.abspath(r["path"]), "size": os.stat(r["path"]).st_size,
                        "sha256": digests[r["path"]]})
    return out


def write_collection(store: Path, scenes: list[Scene], plan, *, known: dict[str, str]) -> str:
    """Write the finished store's STAC Collection (`schema.COLLECTION_FILE`; extent from its tiles' ground) into
    it, after its fingerprint (every other file of the store, the shards' digests `known` from their tasks);
    returns the fingerprint."""
    import zarr

    attrs = zarr.open_group(store, mode="r").attrs.asdict()
    fingerprint = store_fingerprint(store, known=known)
    footprints = []
    t = plan.tile_size
    for i, scene in enumerate(scenes):
        mine = plan.scene == i
        if not mine.any():
            continue
        row, col = int(plan.row_off[mine].min()), int(plan.col_off[mine].min())
        height, width = int(plan.row_off[mine].max()) + t - row, int(plan.col_off[mine].max()) + t - col
        footprints.append(footprint(scene.crs, scene.transform, width, height, row=row, col=col)[1])
    collection = store_collection(attrs, footprints=footprints, fingerprint=fingerprint, tiles=len(plan))
    write_json(store / schema.COLLECTION_FILE, to_json(collection))
    return fingerprint


def masked_pixels(scenes: list[Scene], masked: np.ndarray, plan, *, steps: int = 1) -> list[dict]:
    """Per scene (a place of a time series: over its `steps` dates): how it says where it holds no data, its tiles'
    pixels, and how many of them were masked by a mask or alpha band and how many by nodata in every band (`eoscale
    info` shows them)."""
    tiles = np.bincount(plan.scene, minlength=len(scenes))
    out = []
    for i, scene in enumerate(scenes):
        with SceneReader(scene) as reader:
            validity = reader.describe_validity()
        out.append({"scene": scene.id, "validity": validity, "pixels": int(tiles[i]) * plan.tile_size ** 2 * steps,
                    "by_mask": int(masked[i, 0]), "by_nodata": int(masked[i, 1])})
    return out


def _move_into_place(store: Path, output: Path, work: Path) -> None:
    old = output.with_name(output.name + ".replaced")
    if output.exists():
        os.replace(output, old)
    os.replace(store, output)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)


def _disk_usage(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _wait_with_progress(client, futures: list, *, total: int, done: int, show: bool) -> None:
    """Wait for the shard tasks with a progress bar in tiles and tiles/s; the first failure is raised."""
    from distributed import as_completed
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("tiles"),
               TextColumn("{task.fields[rate]:>7.0f} tiles/s"), TimeElapsedColumn(), TimeRemainingColumn())
    started, written = time.perf_counter(), 0
    with Progress(*columns, disable=not show, transient=False) as bar:
        task = bar.add_task("ingest", total=total, completed=done, rate=0.0)
        for future in as_completed(futures):
            if future.status == "error":
                for f in futures:
                    if f is not future:  # cancelled, the failed one would raise "cancelled", not its error
                        f.cancel()
                future.result()  # raises the task's exception here
            written += future.result()
            bar.update(task, advance=future.result(), rate=written / max(time.perf_counter() - started, 1e-9))


def summary_dict(summary: IngestSummary) -> dict:
    return {**asdict(summary), "compression_ratio": summary.compression_ratio,
            "tiles_per_second": summary.tiles_per_second, "megabytes_per_second": summary.megabytes_per_second}
