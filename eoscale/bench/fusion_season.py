"""`eoscale bench fusion --dates N`: does a season of Sentinel-1 and Sentinel-2 beat a season of either alone, and
under how much cloud?

    eoscale bench fusion --dates 6                           # 6 places x 6 dates of 256 px, 3 seeds, 150 steps a fit
    eoscale bench fusion --dates 6 --scenes 3 --size 128 --steps 3 --seeds 2 --record ''   # a smoke run

One synthetic season of both sensors (`eoscale synth --dates N --sensors s2,s1`: each place's optical dates and its
radar passes between them, `eoscale.synth.season_sensors`) is written cloud-free, then seen under each cloud cover:
every optical date of every place gets clouds over exactly that share of its pixels (nodata in every optical band:
synth's fractal cloud field thresholded at the cover, drawn afresh for each date, as `eoscale.bench.fusion` clouds a
single date); the radar passes are left as they are (radar sees through clouds). Each cover is ingested once as a
season store of both sensors (`ingest --time-series --composite`: one calendar of the optical dates' spacing for both
sensors, each composited by its own rule), and the same temporal network (the U-TAE of `configs/temporal_utae.yaml`,
`eoscale.bench.temporal.RECIPE`, which leaves out a date wherever it holds nothing at a pixel: `pixel_mask`) is
fitted on it three ways with the same recipe, batch size and number of steps:

- **S2 season**: the optical bands of every step only (`TileDataModule(bands=…)`: a step holds a date for it only
  where the optical bands hold data, as predict finds it);
- **S1 season**: VV and VH of every step only (the steps without a radar pass are no dates for it);
- **S1 + S2 season**: both, side by side (a sensor's bands 0 where it has no data), each sensor's presence beside them
  (`presence_channels`: one channel a sensor, 1 where it has data; `--no-presence-channels` leaves them out), with the
  loader's sensor dropout (`--sensor-dropout`), as the single-date bench fits it (`RECIPE["fusion"] = "stems"` gives
  each sensor its own stem instead, `eoscale.models.fusion`).

Each arm is fitted with every seed of `--seeds` (the network's initial weights, `init_seed`, and the loader's order
and augmentation, `TileDataModule(seed=…)`; the ground, its clouds and the split keep `--seed`), and every fit is
scored on the same pixels: every labelled pixel of the store's val split (`eoscale.models.metrics`), so the optical
season is scored under its clouds too. Recorded per cover and arm: each seed's val mIoU and accuracy, their mean and
spread (sample standard deviation, min and max); per cover, whether the fused season's mean val mIoU is above the
best single-sensor season's (the goal, issue 47).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from eoscale.bench.fusion_arms import OPTICAL, RADAR, cloud_mask, parse_arms
from eoscale.bench.temporal import RECIPE as TEMPORAL_RECIPE
from eoscale.bench.temporal import split_arrays
from eoscale.classes import IGNORE_INDEX
from eoscale.models.metrics import confusion_matrix, confusion_scores

# every arm's U-TAE leaves out the dates that hold nothing at a pixel (`pixel_mask`, `eoscale.models.temporal.UTAE`);
# the fused season's bands enter side by side (fusion None): per-sensor stems (`fusion="stems"`, as the single-date
# bench's network) scored 0.261 against 0.300 at 90 % cloud in a screen (one seed, 6 places of 128 px, 300 steps);
# `presence_channels` (the fused arm's only: one input channel a sensor, where it has data) lets its per-date backbone
# tell an optical band group absent under a cloud from one at its mean spectrum (`--no-presence-channels`: without)
RECIPE = {**TEMPORAL_RECIPE, "sensor_dropout": 0.2, "fusion": None, "pixel_mask": True, "presence_channels": True}
ARMS = ("s2", "s1", "s1+s2")


def season_ground(work: Path, *, places: int, dates: int, size: int, seed: int) -> Path:
    """`eoscale synth --dates --sensors s2,s1` without clouds: the season every cover is drawn on."""
    from eoscale.synth.dataset import synthesize

    return synthesize(work / "ground", scenes=places, size=size, seed=seed, dates=dates, sensors=("s2", "s1"),
                      nodata_fraction=0.0).out_dir


def clouded_season(source: Path, out: Path, cover: float, *, seed: int) -> Path:
    """A copy of the season `source` whose optical dates are each under `cover` of cloud (nodata 0 in every band,
    as a multi-band scene marks its clouds), the radar passes, labels and class table linked as they are."""
    import rasterio

    for name in ("sar", "labels", "classes.csv"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(source / name, out / name)
    for i, scene in enumerate(sorted((source / "scenes").glob("*/*.tif"))):
        with rasterio.open(scene) as src:
            data, profile, tags, descriptions = src.read(), src.profile, src.tags(), src.descriptions
        if cover > 0:
            data[:, cloud_mask(data.shape[1:], cover, np.random.default_rng([seed, i, round(cover * 1000)]))] = 0
        target = out / "scenes" / scene.parent.name / scene.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with rasterio.open(target, "w", **profile) as dst:
            dst.write(data)
            dst.descriptions = descriptions
            dst.update_tags(**tags, bench_cloud_cover=str(cover))
    return out


def composite_days(dates: int) -> int:
    """The interval of the store's calendar: the spacing of synth's optical dates, one date an interval."""
    from eoscale.synth.phenology import season_days

    days = season_days(dates)
    return int(days[1] - days[0])


def season_store(ground: Path, work: Path, cover: float, *, dates: int, tile: int, seed: int) -> Path:
    """The season under `cover` of cloud, ingested as one store of both sensors on one calendar of composites."""
    from eoscale.ingest import ingest

    name = f"clouds{round(cover * 100):02d}"
    folder = clouded_season(ground, work / name, cover, seed=seed)
    scenes = sorted(str(p) for p in (folder / "scenes").glob("*/*.tif"))
    radar = sorted(str(p) for p in (folder / "sar").iterdir() if p.is_dir())
    store = work / f"{name}.zarr"
    ingest(scenes + radar, store, labels=[str(folder / "labels" / "*.tif")], classes=str(folder / "classes.csv"),
           tile_size=tile, split=(0.75, 0.25, 0.0), split_block=2, seed=seed, workers=1, progress=False,
           time_series=True, composite=f"{composite_days(dates)}d")
    return store


def arm_bands(store: Path, arm: str) -> list[str]:
    """The store's bands an arm reads: the optical sensor's, the radar's, or every band."""
    from eoscale.data.datamodule import TileDataModule

    groups = {g.name: g for g in TileDataModule(store).sensor_groups}
    names = {"s2": [OPTICAL], "s1": [RADAR], "s1+s2": list(groups)}[arm]
    return [b for name in names for b in groups[name].bands]


def fit_season(store: Path, work: Path, arm: str, val_start: int, labels_shape: tuple, *, steps: int, recipe: dict,
               workers: int, seed: int) -> dict:
    """The recipe's U-TAE fitted for `steps` on the arm's bands of `store` with `seed` (its weights and the loader's
    order); its predictions on the val split and its fit seconds."""
    import lightning as L
    import torch

    from eoscale.data.datamodule import TileDataModule
    from eoscale.train.quiet import silence_trainer_info
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    silence_trainer_info()
    bands = arm_bands(store, arm)
    dropout = recipe["sensor_dropout"] if arm == "s1+s2" else 0.0
    fusion = {"fusion": recipe["fusion"]} if arm == "s1+s2" and recipe.get("fusion") else {}
    presence = {"presence_channels": True} if arm == "s1+s2" and recipe.get("presence_channels") else {}

    def data(**options) -> TileDataModule:
        return TileDataModule(store, batch_size=recipe["batch_size"], num_workers=workers, seed=seed, bands=bands,
                              **options)

    L.seed_everything(seed, verbose=False)
    task = TemporalSegmentationTask(
        "utae", backbone=recipe["backbone"],
        backbone_kwargs={**{k: recipe[k] for k in ("n_head", "d_k", "d_model")}, "out_indices": list(recipe["out_indices"]),
                         "pixel_mask": bool(recipe.get("pixel_mask", True)), **presence},
        decoder_channels=recipe["decoder_channels"], lr=recipe["lr"], weight_decay=recipe["weight_decay"],
        warmup_steps=max(1, int(recipe["warmup_fraction"] * steps)), class_weights=False, init_seed=seed, **fusion)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, default_root_dir=str(work), callbacks=[])
    started = time.perf_counter()
    trainer.fit(task, datamodule=data(sensor_dropout=dropout))
    fit_seconds = time.perf_counter() - started
    dm = data(augment=False, predict_split="val")
    dm.setup("predict")
    pred = np.zeros(labels_shape, np.uint8)
    task.eval()
    with torch.inference_mode(), dm.predict_dataloader() as loader:
        for batch in loader:
            batch = dm.normalise(batch)
            pred[batch["tile"].numpy() - val_start] = task.logits(batch).argmax(1).numpy().astype(np.uint8)
    return {"pred": pred, "fit_seconds": fit_seconds, "steps": int(task.global_step)}


def spread(values: list[float]) -> dict:
    """Mean, sample standard deviation (0 for one value), min and max of the seeds' figures."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def verdict(arms: dict) -> dict:
    """Whether the fused season's mean val mIoU is above the best single-sensor season's at one cover."""
    singles = {a: arms[a]["miou"]["mean"] for a in ("s2", "s1") if a in arms}
    if "s1+s2" not in arms or not singles:
        return {}
    best = max(singles, key=singles.get)
    gain = arms["s1+s2"]["miou"]["mean"] - singles[best]
    return {"best_single": best, "gain_over_best_single": gain, "fused_beats_best_single": bool(gain > 0)}


def check(args: argparse.Namespace) -> tuple[list[float], list[str], list[int]]:
    """The covers, arms and fit seeds of a season run; a bad value is one line."""
    from eoscale.errors import InputError

    covers, arms = parse_arms(args)
    if args.dates < 2:
        raise InputError(f"--dates {args.dates}: a season needs at least 2 dates")
    if args.seeds < 1:
        raise InputError(f"--seeds {args.seeds}: give at least 1 (3 or more to see the spread)")
    return covers, arms, [args.seed + k for k in range(args.seeds)]


def run(args: argparse.Namespace) -> int:
    import torch

    from eoscale.bench.record import record
    from eoscale.classes import ClassTable
    from eoscale.store import schema
    from eoscale.store.open import read_store_attrs

    covers, arms, seeds = check(args)
    recipe = {**RECIPE, "batch_size": args.batch_size, "sensor_dropout": args.sensor_dropout,
              "presence_channels": bool(getattr(args, "presence_channels", RECIPE["presence_channels"]))}
    started = time.perf_counter()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-fusion-season-") as tmp:
        work = Path(tmp)
        print(f"synth --dates {args.dates} --sensors s2,s1 ({args.scenes} places of {args.size} px) …")
        ground = season_ground(work, places=args.scenes, dates=args.dates, size=args.size, seed=args.seed)
        for cover in covers:
            print(f"clouds over {cover:.0%} of every optical date: ingest the season of both sensors …")
            store = season_store(ground, work, cover, dates=args.dates, tile=args.tile_size, seed=args.seed)
            attrs = read_store_attrs(store)
            names = ClassTable.from_records(attrs[schema.ATTR_CLASSES]).names
            val = split_arrays(store, "val")
            row: dict = {"cover": cover, "steps": int(val["images"].shape[1]),
                         "val_pixels": int((val["labels"] != IGNORE_INDEX).sum()),
                         "optical_clear_share": _clear_share(store, val),
                         "train_tiles": int(np.diff(attrs[schema.ATTR_SPLITS]["train"])[0]),
                         "val_tiles": int(len(val["labels"])), "arms": {}}
            for arm in arms:
                runs = {}
                for seed in seeds:
                    fitted = fit_season(store, work / f"fit-{cover}-{arm}-{seed}", arm, val["start"],
                                        val["labels"].shape, steps=args.steps, recipe=recipe, workers=args.workers,
                                        seed=seed)
                    matrix = confusion_matrix(val["labels"], fitted["pred"], len(names),
                                              np.ones(val["labels"].shape, bool))
                    scores = confusion_scores(matrix, names)
                    runs[str(seed)] = {"miou": scores["miou"], "accuracy": scores["accuracy"],
                                       "fit_seconds": round(fitted["fit_seconds"], 1), "steps": fitted["steps"]}
                    print(f"  {arm:>6} seed {seed}: val mIoU {scores['miou']:.3f}, accuracy {scores['accuracy']:.3f} "
                          f"({fitted['fit_seconds']:.0f} s)")
                row["arms"][arm] = {"seeds": runs, "miou": spread([r["miou"] for r in runs.values()]),
                                    "accuracy": spread([r["accuracy"] for r in runs.values()])}
            row.update(verdict(row["arms"]))
            results[f"{cover:g}"] = row
            _say(row)
        threads = torch.get_num_threads()
    judged = [r["fused_beats_best_single"] for r in results.values() if "fused_beats_best_single" in r]
    figures = {
        "label": args.label,
        "data": {"places": args.scenes, "dates": args.dates, "size_px": args.size, "tile": args.tile_size,
                 "composite": f"{composite_days(args.dates)}d", "seed": args.seed, "clouds": covers,
                 "sensors": ["sentinel-2 (10 bands)", "sentinel-1 (VV, VH)"]},
        "budget": {"steps": args.steps, "batch_size": recipe["batch_size"], "torch_threads": threads, "seeds": seeds},
        "recipe": recipe,
        "scored_on": "every labelled pixel of the val split, the same for every arm and seed (the optical season "
                     "under its clouds too)",
        "results": results,
        "goal": "S1 + S2 season's mean val mIoU over the seeds above the best single-sensor season's at each cover",
        "goal_met": all(judged) if judged else None,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if args.record:
        where = record("fusion_season", figures, directory=args.record,
                       seeds={"season, clouds and split": args.seed, "fits (weights, loader order)": seeds})
        print(f"recorded in {where}")
    return 0


def _clear_share(store: Path, val: dict) -> float:
    """The share of the val split's labelled pixel-steps the optical sensor sees (its bands hold data)."""
    from eoscale.store import schema
    from eoscale.store.open import read_store_attrs

    attrs = read_store_attrs(store)
    bands = list(attrs[schema.ATTR_BANDS])
    optical = [bands.index(b) for b in arm_bands(store, "s2")]
    seen = (val["images"][:, :, optical] != int(attrs[schema.ATTR_NODATA])).any(axis=2)  # (tile, time, y, x)
    labelled = (val["labels"] != IGNORE_INDEX)[:, None].repeat(seen.shape[1], axis=1)
    return float(seen[labelled].mean()) if labelled.any() else 0.0


def _say(row: dict) -> None:
    cells = ", ".join(f"{arm} {a['miou']['mean']:.3f} ± {a['miou']['std']:.3f}" for arm, a in row["arms"].items())
    line = f"cloud {row['cover']:.0%}: mean val mIoU over seeds {cells}"
    if "gain_over_best_single" in row:
        line += (f"; S1 + S2 over the best single sensor ({row['best_single']}) {row['gain_over_best_single']:+.3f}"
                 f" ({'beats' if row['fused_beats_best_single'] else 'does not beat'} it)")
    print(line)
