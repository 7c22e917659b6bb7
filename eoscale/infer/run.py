"""The `eoscale predict` recipe, in call order: check everything, deal the work, predict parts, finalise scenes.

    results = predict(PredictConfig(checkpoint="best.ckpt", inputs=["scene.tif"], output="maps"))

`predict` runs in every process of a run (see `eoscale.infer.distributed` for how they start). With at
least as many scenes as processes, each process takes whole scenes (scene `i` goes to process
`i % processes`); otherwise every scene's blocks are split across all processes and process 0 finalises
it. A process writes the blocks it is given into part files; the scene's finalising process turns the
parts into the scene's maps. What the parts hold and what the maps are (a class model's: the class COG,
class areas and quick-look) is up to the output writer of the checkpoint's target kind
(`eoscale.infer.outputs`); this module only runs the recipe. The parts of a scene are the same rows
whatever the number of processes, so the map is byte-identical for any number of them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from eoscale import __version__
from eoscale.catalog.digest import file_record
from eoscale.contract import check_std
from eoscale.errors import BandMismatchError, InputError
from eoscale.infer.config import PredictConfig, check_config
from eoscale.infer.distributed import (
    Heartbeat,
    Peers,
    left_over_runs,
    new_run_id,
    ranks_from_environment,
    rendezvous,
    report_failure,
    spawn,
    wait_for,
)
from eoscale.infer.embed_config import EmbedConfig
from eoscale.infer.model import PredictionModel, load_model
from eoscale.infer.outputs import (
    Georef,
    MapContext,
    OutputWriter,
    Piece,
    part_path,
    partial,
    publish,
    read_part,
    writer_for,
)
from eoscale.infer.predict import check_scenes, handoff, predict_blocks, reading_threads
from eoscale.infer.stacked import trained_calendar
from eoscale.infer.windows import AxisGrid, Span, WindowGrid, check_window
from eoscale.raster.float_optical import with_input_scale
from eoscale.raster.fused import predict_other_sensors
from eoscale.raster.fused_season import season_steps
from eoscale.raster.pixel_area import pixel_area_m2, row_areas_m2
from eoscale.raster.reader import gdal_cache
from eoscale.raster.sources import Scene, open_scene, scene_paths
from eoscale.raster.stac import open_items
from eoscale.raster.stack import open_reader, stack_scenes
from eoscale.raster.static import predict_static_layers, static_bands, static_sources
from eoscale.sensors import parse_band_map
from eoscale.sensors.copdem import COPDEM
from eoscale.track.profiler import Profile, Schedule

WORK_DIR = ".eoscale-predict"
PROFILE_DIR = "profile"  # `--profile`: <output>/profile/rank<N>.pt.trace.json.gz, summary.md, summary.png
PROFILE_SCHEDULE = Schedule(wait=1, warmup=1, active=5)


@dataclass
class SceneResult:
    """What predicting one scene gave, for the summary and MLflow."""

    id: str
    height: int
    width: int
    windows: int
    seconds: float
    km2: float
    processes: int
    areas: dict = field(repr=False)  # the output writer's summary (a class model's: its area table)
    outputs: dict[str, str] = field(repr=False)


@dataclass
class RunResult:
    """A whole run: its scenes, the model's backbone, how many processes ran it and for how long."""

    scenes: list[SceneResult]
    backbone: str
    processes: int
    seconds: float
    target: str = "classes"  # the checkpoint's target kind: which output writer wrote the maps


@dataclass
class Plan:
    model: PredictionModel
    scenes: list[Scene]
    window: int
    overlap: float
    column_tile: int
    readers: int
    writer: OutputWriter
    model_lineage: dict | None = field(default=None, repr=False)  # `lineage()`'s, once per process

    def lineage(self, config: PredictConfig) -> dict:
        """Where this run's model comes from: the checkpoint (path, sha256) and adapter, the training run and tile
        store the checkpoint records, and the eoscale version. The checkpoint is read (hashed) once per process
        that finalises scenes, not once per scene."""
        if self.model_lineage is None:
            self.model_lineage = model_lineage(self.model, config)
        return self.model_lineage

    def grid(self, scene: Scene) -> WindowGrid:
        return WindowGrid.make(scene.height, scene.width, window=self.window, overlap=self.overlap)

    def tiles(self, scene: Scene) -> list[range]:
        """The scene's column tiles (ranges of column blocks), swept one after the other."""
        return self.grid(scene).column_tiles(self.column_tile)


def predict(config: PredictConfig) -> RunResult | None:
    """Predict every scene of `config`; the results on the process that coordinates the run, None on others."""
    started = time.perf_counter()
    ranks = ranks_from_environment()
    output = Path(config.output)
    if ranks is not None:
        # the processes of one run agree on their arguments before any work (eoscale.infer.distributed)
        work = output / WORK_DIR / ranks.run_id
        try:
            check_config(config)
            arguments = _arguments(config)
        except BaseException as err:
            report_failure(work, ranks.rank, err)  # the others stop at the rendezvous, not after its timeout
            raise
        rendezvous(work, ranks.rank, ranks.world, arguments)
    else:
        check_config(config)
    if ranks is None or ranks.rank == 0:
        _tidy_left_overs(output / WORK_DIR, keep=ranks.run_id if ranks else "")
    if ranks is not None:
        plan = run_rank(ranks.rank, ranks.world, ranks.run_id, config, local_rank=ranks.local_rank)
        if ranks.rank != 0:
            return None
        run_id, processes = ranks.run_id, ranks.world
        peers = Peers(Path(config.output) / WORK_DIR / run_id, list(range(1, ranks.world)))
    else:
        peers = None  # spawned processes are watched by `spawn`, which waits for them all
        run_id, processes = new_run_id(), config.devices
        if processes > 1:
            plan = prepare(config, device="cpu")  # every user error in one line, before any process starts
            spawn(_spawned, config, processes=processes, run_id=run_id, work=output / WORK_DIR / run_id)
        else:
            plan = run_rank(0, 1, run_id, config)
    scenes = collect(config, run_id, [s.id for s in plan.scenes], peers=peers)
    return RunResult(scenes, plan.model.backbone, processes, time.perf_counter() - started, plan.model.contract.target)


PER_PROCESS = ("devices", "readers", "progress")  # options that may differ between the processes of one run


def _arguments(config: PredictConfig) -> dict:
    """What the processes of one run must agree on (`rendezvous`): every option that decides the work, by its
    flag, and the scene files `--input` names (a glob may match other files on a node that started later)."""
    from dataclasses import fields

    from eoscale.infer.config import flag

    arguments = {f.metadata["flag"]: getattr(config, f.name) for f in fields(config) if f.name not in PER_PROCESS}
    arguments["scene files"] = scene_paths(config.inputs) if config.inputs else []
    if config.checkpoint and os.path.isfile(config.checkpoint):
        # by name and size: a registered model's file is in each node's cache folder, whose path may differ
        arguments[flag("checkpoint")] = f"{Path(config.checkpoint).name} ({os.path.getsize(config.checkpoint)} bytes)"
    return arguments


def _tidy_left_overs(root: Path, *, keep: str) -> None:
    """Remove the work folders a killed run left under `<output>/.eoscale-predict` (its part files), and say so."""
    for folder in left_over_runs(root, keep=keep):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"eoscale predict: removed {folder}, left by an interrupted run", file=sys.stderr)


def prepare(config: PredictConfig, *, device: torch.device | str, outputs: bool = True, say: bool = True) -> Plan:
    """Load the model, open and check every scene (and, if `outputs`, every scene's outputs); raises the
    first user error found. With `say`, the lines on which scenes made each place go to stderr once all is checked."""
    if config.server:
        from eoscale.infer.remote import connect_model, served_model_name

        model = connect_model(config.server, served_model_name(config.model, config.adapter))
    elif isinstance(config, EmbedConfig):  # `eoscale embed`: the checkpoint's features, not its output
        from eoscale.infer.embed import load_embedding_model

        model, layer = load_embedding_model(config.checkpoint, layer=config.layer, adapter=config.adapter,
                                            device=device, cell=config.field_stride)
    else:
        model = load_model(config.checkpoint, adapter=config.adapter, device=device)
    # a checkpoint of a store from before ingest refused a band of std 0: refused before any work, naming the band
    check_std(model.contract.bands, model.contract.std, what=f"checkpoint {str(config.checkpoint or config.model)!r}")
    band_map = parse_band_map(config.band_map)
    notes: list[str] = []  # which scenes made each place: said once every check has passed (a refusal is one line)
    statics = static_bands(model.contract.bands)  # a DEM's layers the checkpoint was trained with (--static)
    groups = model.contract.sensor_groups()
    several = len([g for g in groups if g.name != COPDEM]) > 1  # a checkpoint of several sensors
    # a SAFE product's bands; scenes of several sensors: each product's usual set, the contract's chosen below
    wanted = None if band_map or several else [b for b in model.contract.bands if b not in statics]
    opened = [s for p in scene_paths(config.inputs) for s in _opened(
        lambda bands, p=p: [open_scene(p, band_names=config.band_names, bands=bands)], wanted, model.contract)]
    opened += _opened(lambda bands: open_items(config.stac, bands=bands), wanted, model.contract) if config.stac else []
    # float scenes onto the store's scale by the conversion the checkpoint's store applied (eoscale.raster.float_optical)
    advice = (f"checkpoint {str(config.checkpoint or config.model)!r} was trained on a store of integer scenes: convert "
              f"the scene onto that store's scale first, or train on a store ingested from float scenes with --scale")
    opened = [with_input_scale(s, model.contract.input_scale, advice=advice) for s in opened]
    steps = model.contract.time_steps
    calendar = trained_calendar(model.contract) if steps > 1 else None  # a model fitted on composites of its dates
    composite, start = calendar or (None, None)
    if start is None and composite not in (None, "monthly"):  # a spec from before ingest recorded the first day
        notes.append(f"warning: checkpoint {str(config.checkpoint or config.model)!r} does not record the first day of "
                     f"its {composite}-day composite calendar (its store was ingested before it was recorded): each "
                     f"place's intervals start at its own first date and may not be training's; ingest the store "
                     f"again and fit to record it")
    if steps > 1 and (several or composite is not None):  # each place's steps of all its sensors (raster.fused_season)
        opened = season_steps(opened, groups, steps, missing=config.missing_sensor, composite=composite, start=start,
                              say=notes.append)
    elif several:  # the other sensors' bands warped onto each reference scene's grid, as ingest does (raster.fused)
        opened = predict_other_sensors(opened, groups, missing=config.missing_sensor, say=notes.append)
    elif len({s.sensor for s in opened}) > 1 and model.contract.sensor in {s.sensor for s in opened}:
        extra = sorted({s.sensor for s in opened} - {model.contract.sensor})
        raise BandMismatchError(f"the checkpoint was trained on {model.contract.sensor} alone and was given "
                                f"{', '.join(extra)} scenes too: leave them out, or use a checkpoint trained on both")
    if statics or config.static:
        opened = predict_static_layers(opened, config.static, statics, accept_datum=config.dem_datum)
        band_map = {**band_map, **{n: n for n in statics}} if band_map else band_map
    scenes = [model.scene_bands(scene, band_map) for scene in opened]
    if steps > 1:  # the dated scenes of each place as one stack: a change map needs both dates, a season any
        scenes = stack_scenes(scenes, steps, require="all" if model.contract.target == "change" else "any")
    check_scenes(model.contract, scenes, what=f"checkpoint {str(config.checkpoint or config.model)!r}")
    ids = [s.id for s in scenes]
    if len(set(ids)) != len(ids):
        raise InputError(f"two scenes share a name, so their outputs would collide: {sorted(ids)}")
    if isinstance(config, EmbedConfig):
        from eoscale.infer.outputs.embedding import EmbeddingWriter

        writer: OutputWriter = EmbeddingWriter(model.contract, layer=layer, float_field=config.float_field)
    else:
        writer = writer_for(model.contract)(model.contract, confidence=config.confidence, **class_layers(config, model))
    if outputs:
        check_outputs(config, ids, writer)
    window = config.window or model.contract.tile_size
    check_window(window, config.overlap)
    if writer.cell() > 1:  # the field's cells must tile the windows: refused before any scene is read
        AxisGrid.make(window, window, config.overlap).coarsened(writer.cell())
    readers = config.readers or reading_threads(model.device)
    for note in notes if say else []:
        print(f"eoscale predict: {note}", file=sys.stderr)
    return Plan(model, scenes, window, config.overlap, config.column_tile, readers, writer)


def _opened(open_with, wanted: list[str] | None, contract) -> list[Scene]:
    """`open_with(wanted)`; where a product lacks the bands because it is another sensor's (a radar scene for an
    optical checkpoint), the one line says so."""
    try:
        return open_with(wanted)
    except InputError:
        if wanted is None:
            raise
        try:
            scenes = open_with(None)
        except InputError:
            scenes = []
        foreign = sorted({s.sensor for s in scenes} - {contract.sensor})
        if foreign:
            raise BandMismatchError(f"the checkpoint was trained on {contract.sensor} alone and was given {foreign[0]} "
                                    f"scenes: leave them out, or use a checkpoint trained with {foreign[0]}") from None
        raise


def class_layers(config: PredictConfig, model) -> dict:
    """The class writer's layers of how sure the map is (`--uncertainty`, `--probabilities`) and its post-classification
    (`--smooth`, `--mmu`), only when asked for: a writer of another target kind takes none, and a values checkpoint is
    refused in one line."""
    layers = {k: v for k, v in (("uncertainty", config.uncertainty), ("probabilities", config.probabilities),
                                ("smooth", config.smooth), ("mmu", config.mmu)) if v not in ("none", False, None, 0)}
    if layers and model.contract.target != "classes":
        asked = "--" + next(iter(layers))
        raise InputError(f"{asked} describes class probabilities and checkpoint {str(model.checkpoint)!r} maps "
                         f"{model.contract.target!r}: drop {asked}")
    return layers


def check_outputs(config: PredictConfig, scene_ids: list[str], writer: OutputWriter) -> None:
    for scene_id in scene_ids:
        writer.scene_files(Path(config.output), scene_id).check(overwrite=config.overwrite)


def _spawned(rank: int, world: int, run_id: str, config: PredictConfig) -> None:
    # the spawned processes share this machine's cores: split them instead of each taking all
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    run_rank(rank, world, run_id, config, local_rank=rank, say=False)  # the parent's prepare has said its notes


def run_rank(rank: int, world: int, run_id: str, config: PredictConfig, *, local_rank: int = 0,
             say: bool = True) -> Plan:
    """This process's share of the run: its parts of scenes, and the scenes it finalises."""
    work = Path(config.output) / WORK_DIR / run_id
    try:
        with ExitStack() as stack:
            # a heartbeat, so that a process waiting for this one finds out if it dies (eoscale.infer.distributed)
            heartbeat = stack.enter_context(Heartbeat(work, rank)) if world > 1 else None
            plan = prepare(config, device=pick_device(config.device, local_rank), outputs=False,
                           say=say and rank == 0)
            tasks = deal(plan.scenes, rank, world)
            # only the process that finalises a scene checks its outputs: another may finish its own scene (and
            # write its outputs) before this one gets here
            check_outputs(config, [s.id for s, _, _, owner in tasks if owner == rank], plan.writer)
            Path(config.output).mkdir(parents=True, exist_ok=True)
            if heartbeat is None:
                # a run of one process beats too, once its inputs are known good: it tells a later run into the
                # same folder that this work folder is in use
                heartbeat = stack.enter_context(Heartbeat(work, rank))
            windows = [_part_windows(plan, s, part, parts) for s, part, parts, _ in tasks]
            km2 = sum(w / plan.grid(s).count * _scene_km2(s) for w, (s, *_) in zip(windows, tasks, strict=True))
            with _progress(config.progress and rank == 0, sum(windows), km2) as bar:
                # --profile: batches 2-6 of this process (wait 1, warm-up 1), a trace per process
                profile = stack.enter_context(Profile(Path(config.output) / PROFILE_DIR, f"rank{rank}",
                                                      PROFILE_SCHEDULE)) if config.profile else None
                advance = _steps(bar, heartbeat, profile)
                for scene, part, parts, owner in tasks:
                    # GDAL's block cache sized for the scene's rows of file blocks that a strip of windows crosses:
                    # its default (5 % of the machine's memory) kept up to that much of a large scene's decoded
                    # blocks, so memory grew with the scene (benchmarks/predict.json, command_memory)
                    with open_reader(scene) as reader:
                        cache = reader.cache_bytes()
                    with gdal_cache(cache):
                        predict_part(plan, config, scene, work / scene.id, part, parts, advance)
                        if rank == owner:
                            peers = Peers(work, [p for p in range(parts) if p != rank]) if parts > 1 else None
                            finalise(plan, config, scene, work, parts, peers=peers, advance=advance)
    except BaseException as err:
        if world > 1:
            report_failure(work, rank, err)  # so that no other process waits for this one in vain
        else:
            shutil.rmtree(work, ignore_errors=True)
        raise
    return plan


def _steps(bar, heartbeat: Heartbeat | None, profile: Profile | None = None):
    """One callback for the progress bar (if shown), the heartbeat (if any) and the profiler (`--profile`: a
    step per batch of windows): `advance(windows)`."""
    def advance(windows: int) -> None:
        if heartbeat is not None:
            heartbeat.advance()
        if bar is not None and windows:
            bar(windows)
        if profile is not None and windows:
            profile.step()
    return advance


def deal(scenes: list[Scene], rank: int, world: int) -> list[tuple[Scene, int, int, int]]:
    """(scene, part, parts, finalising rank) for each piece of work of process `rank`."""
    if len(scenes) >= world:
        return [(s, 0, 1, rank) for i, s in enumerate(scenes) if i % world == rank]
    return [(s, rank, world, 0) for s in scenes]


def pick_device(choice: str, local_rank: int) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def _part_windows(plan: Plan, scene: Scene, part: int, parts: int) -> int:
    """Windows that process `part` of `parts` computes for `scene` (its halo rows and columns included)."""
    grid = plan.grid(scene)
    blocks = grid.split_blocks(parts)[part]
    if len(blocks) == 0:
        return 0
    columns = sum(Span.of(grid.cols, tile).windows for tile in plan.tiles(scene))
    return (blocks.stop - grid.first_window_row(blocks.start)) * columns


def predict_part(plan: Plan, config: PredictConfig, scene: Scene, folder: Path, part: int, parts: int,
                 advance) -> None:
    """Predict row blocks `part` of `parts` of `scene`, column tile by column tile, into its part files."""
    grid = plan.grid(scene)
    blocks = grid.split_blocks(parts)[part]
    tiles = plan.tiles(scene)
    for t, cols in enumerate(tiles):
        writer = plan.writer.part(part_path(folder, part, parts, t, len(tiles)), scene)
        started = time.time()
        writes = handoff(writer.write, depth=2, name="eoscale-part-writer")  # writing overlaps the forward
        try:
            for block in predict_blocks(plan.model.network, scene, grid, contract=plan.model.contract,
                                        channels=plan.writer.channels(), activate=plan.writer.activate,
                                        blocks=blocks, cols=cols, batch_size=config.batch_size, ramp=config.ramp, on_batch=advance, readers=plan.readers,
                                        cell=plan.writer.cell()):
                writes.put(block)
            writes.close()
        except BaseException:
            writes.stop()
            writer.abort()
            raise
        writer.close(started=started, finished=time.time())


def finalise(plan: Plan, config: PredictConfig, scene: Scene, work: Path, parts: int, *, peers: Peers | None = None,
             advance=None) -> None:
    """Once every part of `scene` is written (by `peers`, the processes writing the others): its outputs, then
    a note of the result for the summary."""
    folder = work / scene.id
    tiles = len(plan.tiles(scene))
    paths = [part_path(folder, p, parts, t, tiles) for p in range(parts) for t in range(tiles)]
    wait_for(lambda: all(read_part(path) is not None for path in paths), work,
             what=f"the parts of scene {scene.id!r}", peers=peers)
    if advance is not None:
        advance(0)  # a step of work (for the heartbeat), no windows
    described = [read_part(path) for path in paths]
    outputs = plan.writer.scene_files(Path(config.output), scene.id)
    pieces = [Piece(path, **d["piece"]) for path, d in zip(paths, described, strict=True)]
    try:
        areas = write_outputs(plan, config, scene, outputs, pieces, described)
    except BaseException:
        for path in outputs.files():
            partial(path).unlink(missing_ok=True)
        raise
    if advance is not None:
        advance(0)
    shutil.rmtree(folder, ignore_errors=True)
    result = SceneResult(
        id=scene.id, height=scene.height, width=scene.width, windows=plan.grid(scene).count,
        seconds=time.time() - min(d["started"] for d in described), km2=_scene_km2(scene), processes=parts,
        areas=areas, outputs={k: str(v) for k, v in asdict(outputs).items() if v is not None},
    )
    # write-then-rename: a peer that waits for the file never reads it half-written
    staged = work / f".{scene.id}.result.json.partial"
    staged.write_text(json.dumps(asdict(result)))
    os.replace(staged, work / f"{scene.id}.result.json")


def write_outputs(plan: Plan, config: PredictConfig, scene: Scene, outputs, pieces: list[Piece],
                  described: list[dict]) -> dict:
    """A scene's maps from its part files, by the output writer (`eoscale.infer.outputs`), then renamed into place;
    returns the writer's summary (a class model's: its area table)."""
    georef = Georef(scene.crs, scene.transform, scene.width, scene.height)
    checkpoint = str(Path(config.checkpoint).resolve())
    # the whole chain (checkpoint, training run, store, scenes) travels in the map itself and in its STAC Item
    lineage = {**plan.lineage(config), "scenes": [file_record(p) for p in scene.paths]}
    dems = static_sources(scene)  # the DEM behind the static layers is an input of the map as its scenes are
    if dems:
        lineage["static"] = [file_record(p) for p in dems]
    tags = {
        "EOSCALE_CHECKPOINT": checkpoint,
        "EOSCALE_ADAPTER": config.adapter or "",
        "EOSCALE_WINDOW": str(plan.window),
        "EOSCALE_OVERLAP": str(config.overlap),
        "EOSCALE_BANDS": ",".join(plan.model.contract.bands),
        "EOSCALE_VERSION": __version__,
        "EOSCALE_CHECKPOINT_SHA256": lineage["checkpoint"]["sha256"],
        "EOSCALE_LINEAGE": json.dumps(lineage, separators=(",", ":")),
    }
    context = MapContext(georef, lineage, tags, checkpoint, title=f"{scene.id} — {Path(config.checkpoint).name}")
    summary = plan.writer.finish(scene, pieces, described, outputs, context)
    publish(outputs.files())  # the done-marker (a class model's class map) last
    return summary


def model_lineage(model: PredictionModel, config: PredictConfig) -> dict:
    """The lineage of a map that does not depend on its scene (see `Plan.lineage`); a link the checkpoint does not
    record (one written before eoscale recorded it) is None."""
    from eoscale.models.checkpoint import adapter_meta
    from eoscale.models.lora import ADAPTERS_DIR

    trained = model.lineage or {}
    adapter = None
    if model.server is not None:  # a served model: the server recorded its checkpoint and adapter
        record = model.server.get("checkpoint") or {"path": config.checkpoint, "size": None, "sha256": None}
        adapter = {"name": model.adapter} if model.adapter else None
        return {"eoscale_version": __version__, "checkpoint": record, "adapter": adapter,
                "training_run": trained.get("run"), "store": trained.get("store"),
                "trained_with": trained.get("eoscale_version"), "server": config.server,
                "served_model": model.network.model}
    if config.adapter:
        _, root = adapter_meta(Path(config.checkpoint), config.adapter)
        adapter = {"name": config.adapter, **file_record(Path(root) / ADAPTERS_DIR / config.adapter)}
    return {"eoscale_version": __version__, "checkpoint": file_record(config.checkpoint), "adapter": adapter,
            "training_run": trained.get("run"), "store": trained.get("store"),
            "trained_with": trained.get("eoscale_version")}


def _scene_km2(scene: Scene) -> float:
    """The ground a scene covers (in a geographic CRS, measured on its ellipsoid)."""
    pixel = pixel_area_m2(scene.crs, scene.transform)
    if pixel is None:
        pixel = float(row_areas_m2(scene.crs, scene.transform, np.array([scene.height // 2]))[0])
    return scene.height * scene.width * pixel / 1e6


def collect(config: PredictConfig, run_id: str, ids: list[str], *, peers: Peers | None = None) -> list[SceneResult]:
    """The results of scenes `ids`, once each is finalised (by whichever process of `peers`); then tidy up."""
    work = Path(config.output) / WORK_DIR / run_id
    wait_for(lambda: all((work / f"{i}.result.json").exists() for i in ids), work, what="every scene's result",
             peers=peers)
    results = [SceneResult(**json.loads((work / f"{i}.result.json").read_text())) for i in ids]
    shutil.rmtree(work, ignore_errors=True)
    try:
        (Path(config.output) / WORK_DIR).rmdir()
    except OSError:
        pass  # another run's work folder is still there
    return results


def _progress(enabled: bool, windows: int, km2: float):
    if not enabled or windows == 0:
        return nullcontext(None)
    from eoscale.infer.summary import window_progress

    return window_progress(windows, km2)
