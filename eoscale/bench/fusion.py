"""`eoscale bench fusion`: does Sentinel-1 radar beside Sentinel-2 pay where clouds hide the optical scene?

    eoscale bench fusion                                     # 8 scenes of 384 px, clouds 0/50/90 %, 500 steps a fit
    eoscale bench fusion --clouds 0.5,0.9 --steps 1000 --label steps1000
    eoscale bench fusion --scenes 3 --size 128 --steps 4 --record ''     # a smoke run
    eoscale bench fusion --dates 6                           # seasons of S1 + S2, S2, S1: eoscale.bench.fusion_season

One synthetic ground (`eoscale synth --sensors s2,s1`: the optical scenes and, of the same land cover, Sentinel-1
VV/VH backscatter with speckle, water dark, built-up bright, forest volume scattering) is seen by the optical sensor
under three cloud covers: for each cover, every optical scene gets clouds over exactly that share of its pixels
(nodata in every optical band; the clouds are synth's fractal cloud field, thresholded at the cover), the radar is
left as it is (it sees through clouds). Each cover is ingested once as a store of both sensors (`eoscale ingest` of
the optical scenes and the radar folders: one band group a sensor, `eoscale.sensors.groups`), and three networks are
fitted on it with the same recipe, batch size and number of steps (equal budget):

- **S2 alone**: the optical bands only (`TileDataModule(bands=…)`); it trains on the pixels it sees;
- **S1 alone**: the radar bands only;
- **S1 + S2**: both, per-sensor stems into one encoder (`eoscale.models.fusion`), trained with sensor dropout.

All three are scored on the same pixels: every labelled pixel of the store's val split where either sensor has data,
so the optical model is also scored under its clouds (where its input reads 0: what a user of optical data alone gets
there). Per arm: val mIoU, accuracy and each class's IoU, overall and on the cloudy and clear pixels apart; the
fused model is also scored on the val tiles with the optical sensor removed altogether (its channels read 0, as
`predict --missing-sensor dropout` reads a place without optical scenes). The goal (issue 36): S1 + S2 beats S2 alone
at 50 % and 90 % cloud.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from eoscale.bench.fusion_arms import ARMS, OPTICAL, RADAR, cloud_mask, parse_arms
from eoscale.classes import IGNORE_INDEX
from eoscale.models.metrics import confusion_matrix, confusion_scores

# the quick start's recipe (configs/quickstart/fit.yaml: ResNet-18 + FPN, 64-channel decoder), the fusion stems on top
RECIPE = {"backbone": "resnet18", "decoder_channels": 64, "lr": 2e-3, "weight_decay": 0.01, "warmup_fraction": 0.1,
          "batch_size": 16, "sensor_dropout": 0.2}


def clouded_set(source: Path, out: Path, cover: float, *, seed: int) -> Path:
    """A copy of synth's set `source` whose optical scenes are under `cover` of cloud (nodata 0 in every band), the
    radar, labels and class table linked as they are."""
    import rasterio

    (out / "scenes").mkdir(parents=True)
    for name in ("sar", "labels", "classes.csv"):
        os.symlink(source / name, out / name)
    for i, scene in enumerate(sorted((source / "scenes").glob("*.tif"))):
        with rasterio.open(scene) as src:
            data, profile, tags = src.read(), src.profile, src.tags()
            descriptions = src.descriptions
        mask = cloud_mask(data.shape[1:], cover, np.random.default_rng([seed, i, int(round(cover * 1000))]))
        data[:, mask] = 0
        with rasterio.open(out / "scenes" / scene.name, "w", **profile) as dst:
            dst.write(data)
            dst.descriptions = descriptions
            dst.update_tags(**tags, bench_cloud_cover=str(cover))
    return out


def make_store(ground: Path, work: Path, cover: float, *, tile: int, seed: int) -> Path:
    """The ground under `cover` of cloud, ingested as one store of both sensors."""
    from eoscale.ingest import ingest

    folder = clouded_set(ground, work / f"clouds{round(cover * 100):02d}", cover, seed=seed)
    store = work / f"clouds{round(cover * 100):02d}.zarr"
    scenes = sorted(str(p) for p in (folder / "scenes").glob("*.tif"))
    radar = sorted(str(p) for p in (folder / "sar").iterdir() if p.is_dir())
    ingest(scenes + radar, store, labels=[str(folder / "labels" / "*.tif")], classes=str(folder / "classes.csv"),
           tile_size=tile, split=(0.75, 0.25, 0.0), split_block=2, seed=seed, workers=1, progress=False)
    return store


def val_batches(store: Path, *, batch_size: int, workers: int) -> list[dict]:
    """The val split's normalised batches of every band (each sensor's channels 0 where it has no data), labels
    wherever either sensor has data; and which pixels the optical sensor sees."""
    import torch

    from eoscale.data.datamodule import TileDataModule

    dm = TileDataModule(store, batch_size=batch_size, num_workers=workers, augment=False, predict_split="val")
    dm.setup("predict")
    groups = {g.name: g for g in dm.sensor_groups}
    out = []
    with torch.inference_mode(), dm.predict_dataloader() as loader:
        for batch in loader:
            batch = dm.normalise(batch)
            optical = batch["image"][:, groups[OPTICAL].channels]
            out.append({"image": batch["image"], "label": batch["label"],
                        "clear": (optical != 0).any(dim=1)})
    return out


def fit_arm(store: Path, work: Path, arm: str, *, steps: int, recipe: dict, workers: int, seed: int):
    """The recipe's network fitted for `steps` on the arm's bands of `store`; returns (task, its band indices in the
    store, fit seconds)."""
    import lightning as L

    from eoscale.data.datamodule import TileDataModule
    from eoscale.train.quiet import silence_trainer_info
    from eoscale.train.tasks.segmentation import SegmentationTask

    silence_trainer_info()
    full = TileDataModule(store, batch_size=recipe["batch_size"])
    groups = {g.name: g for g in full.sensor_groups}
    names = {"s2": [OPTICAL], "s1": [RADAR], "s1+s2": [g.name for g in full.sensor_groups]}[arm]
    bands = [b for name in names for b in groups[name].bands]
    dropout = recipe["sensor_dropout"] if len(names) > 1 else 0.0
    dm = TileDataModule(store, batch_size=recipe["batch_size"], num_workers=workers, seed=seed, bands=bands,
                        sensor_dropout=dropout)
    L.seed_everything(seed, verbose=False)
    task = SegmentationTask(recipe["backbone"], decoder_channels=recipe["decoder_channels"], lr=recipe["lr"],
                            weight_decay=recipe["weight_decay"], fusion="stems",
                            warmup_steps=max(1, int(recipe["warmup_fraction"] * steps)), init_seed=seed)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, default_root_dir=str(work), callbacks=[])
    started = time.perf_counter()
    trainer.fit(task, datamodule=dm)
    index = [list(full.band_names).index(b) for b in bands]
    return task, index, time.perf_counter() - started


def evaluate(task, index: list[int], batches: list[dict], n: int, *, drop: list[int] | None = None) -> dict:
    """Confusion matrices of the task on `batches` (its bands `index`; `drop`: channels of those read as 0),
    overall, on the pixels the optical sensor sees and on those under cloud."""
    import torch

    task.eval()
    total = {k: np.zeros((n, n), np.int64) for k in ("all", "clear", "cloudy")}
    with torch.inference_mode():
        for batch in batches:
            x = batch["image"][:, index].clone()
            if drop:
                x[:, drop] = 0
            pred = task(x).argmax(1).numpy()
            truth, clear = batch["label"].numpy(), batch["clear"].numpy()
            total["all"] += confusion_matrix(truth, pred, n, np.ones_like(clear))
            total["clear"] += confusion_matrix(truth, pred, n, clear)
            total["cloudy"] += confusion_matrix(truth, pred, n, ~clear)
    return total


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenes", type=int, default=None,
                        help="synthetic scenes, with --dates places (default: 8; with --dates 6)")
    parser.add_argument("--size", type=int, default=None,
                        help="scene edge in pixels of 10 m (default: 384; with --dates 256)")
    parser.add_argument("--tile-size", type=int, default=64, help="tile edge in pixels (default: 64)")
    parser.add_argument("--clouds", default="0,0.5,0.9",
                        help="cloud covers of the optical scenes, comma-separated fractions (default: 0,0.5,0.9)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"which inputs to fit (default: {','.join(ARMS)})")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps of every network (default: 500; with --dates 150)")
    parser.add_argument("--dates", type=int, default=None,
                        help="compare seasons of N optical dates (and the radar passes between them) instead of one "
                        "date: the U-TAE on S1 + S2, S2 and S1 seasons (eoscale.bench.fusion_season)")
    parser.add_argument("--seeds", type=int, default=3,
                        help="with --dates: fits of each arm, seeds --seed, --seed+1, … (default: 3)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"(default: {RECIPE['batch_size']}; with --dates 8)")
    parser.add_argument("--sensor-dropout", type=float, default=RECIPE["sensor_dropout"],
                        help=f"of the fused network (default: {RECIPE['sensor_dropout']})")
    parser.add_argument("--presence-channels", action=argparse.BooleanOptionalAction, default=True,
                        help="with --dates: the fused U-TAE takes one input channel a sensor, 1 where it has data "
                        "(default: on; --no-presence-channels: the bands alone, as recorded before issue 47's fix)")
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes (default: 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="a name for this run in the record")


def run(args: argparse.Namespace) -> int:
    season = args.dates is not None
    for key, single, seasons in (("scenes", 8, 6), ("size", 384, 256), ("steps", 500, 150),
                                 ("batch_size", RECIPE["batch_size"], 8)):
        if getattr(args, key) is None:
            setattr(args, key, seasons if season else single)
    if season:
        from eoscale.bench.fusion_season import run as run_season

        return run_season(args)
    import torch

    from eoscale.bench.record import record
    from eoscale.classes import ClassTable
    from eoscale.store import schema
    from eoscale.store.open import read_store_attrs
    from eoscale.synth.dataset import synthesize

    covers, arms = parse_arms(args)
    recipe = {**RECIPE, "batch_size": args.batch_size, "sensor_dropout": args.sensor_dropout}
    started = time.perf_counter()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-fusion-") as tmp:
        work = Path(tmp)
        print(f"synth --sensors s2,s1 ({args.scenes} scenes of {args.size} px) …")
        ground = synthesize(work / "ground", scenes=args.scenes, size=args.size, seed=args.seed,
                            sensors=("s2", "s1"), nodata_fraction=0.0).out_dir
        for cover in covers:
            print(f"clouds over {cover:.0%} of the optical scenes: ingest both sensors …")
            store = make_store(ground, work, cover, tile=args.tile_size, seed=args.seed)
            attrs = read_store_attrs(store)
            names = ClassTable.from_records(attrs[schema.ATTR_CLASSES]).names
            n = len(names)
            batches = val_batches(store, batch_size=recipe["batch_size"], workers=args.workers)
            optical_bands = _group_bands(store, OPTICAL)
            labelled = sum(int((b["label"] != IGNORE_INDEX).sum()) for b in batches)
            seen = sum(int(((b["label"] != IGNORE_INDEX) & b["clear"]).sum()) for b in batches)
            row: dict = {"cover": cover, "val_pixels": labelled, "optical_clear_share": seen / max(labelled, 1),
                         "train_tiles": int(np.diff(attrs[schema.ATTR_SPLITS]["train"])[0]),
                         "val_tiles": int(np.diff(attrs[schema.ATTR_SPLITS]["val"])[0]), "arms": {}}
            for arm in arms:
                task, index, seconds = fit_arm(store, work / f"fit-{cover}-{arm}", arm, steps=args.steps,
                                               recipe=recipe, workers=args.workers, seed=args.seed)
                matrices = evaluate(task, index, batches, n)
                result = {"fit_seconds": round(seconds, 1), "steps": int(task.global_step),
                          **{part: confusion_scores(m, names) for part, m in matrices.items()}}
                if arm == "s1+s2":  # the same network on the val tiles without any optical data
                    optical = [k for k, i in enumerate(index) if attrs[schema.ATTR_BANDS][i] in optical_bands]
                    result["without_optical"] = confusion_scores(evaluate(task, index, batches, n, drop=optical)["all"], names)
                row["arms"][arm] = result
                print(f"  {arm:>6}: val mIoU {result['all']['miou']:.3f} (clear {_fmt(result['clear'])}, cloudy "
                      f"{_fmt(result['cloudy'])}), accuracy {result['all']['accuracy']:.3f} ({seconds:.0f} s)"
                      + (f"; without optical data {result['without_optical']['miou']:.3f}"
                         if "without_optical" in result else ""))
            if {"s2", "s1+s2"} <= set(row["arms"]):
                row["gain_over_s2"] = row["arms"]["s1+s2"]["all"]["miou"] - row["arms"]["s2"]["all"]["miou"]
            results[f"{cover:g}"] = row
            shutil.rmtree(store, ignore_errors=True)
        threads = torch.get_num_threads()
    goal = {c: r["gain_over_s2"] > 0 for c, r in results.items() if float(c) >= 0.5 and "gain_over_s2" in r}
    figures = {
        "label": args.label,
        "data": {"scenes": args.scenes, "size_px": args.size, "tile": args.tile_size, "seed": args.seed,
                 "clouds": covers, "sensors": ["sentinel-2 (10 bands)", "sentinel-1 (VV, VH)"]},
        "budget": {"steps": args.steps, "batch_size": recipe["batch_size"], "torch_threads": threads},
        "recipe": recipe,
        "scored_on": "every labelled val pixel where either sensor has data; the optical model under its clouds too",
        "results": results,
        "goal": "S1 + S2 val mIoU above S2 alone at 50 % and 90 % cloud",
        "goal_met": all(goal.values()) if goal else None,  # None: no cover of 50 % or more in this run
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    for cover, row in results.items():
        if "gain_over_s2" in row:
            print(f"cloud {float(cover):.0%}: S1 + S2 over S2 alone {row['gain_over_s2']:+.3f} val mIoU")
    if args.record:
        print(f"recorded in {record('fusion', figures, directory=args.record, seeds={'scenes, clouds, split and fits': args.seed})}")
    return 0


def _group_bands(store: Path, name: str) -> set[str]:
    from eoscale.data.datamodule import TileDataModule

    return {b for g in TileDataModule(store).sensor_groups if g.name == name for b in g.bands}


def _fmt(part: dict) -> str:
    return "-" if part["miou"] is None else f"{part['miou']:.3f}"
