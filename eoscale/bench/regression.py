"""`eoscale bench regression`: does a network with spatial context beat a per-pixel random forest on heights?

    eoscale bench regression                       # 6 scenes of 256 px, 110 s per model, 2 repeats
    eoscale bench regression --seconds 60 --repeats 3 --record ''

Writes a synthetic set with canopy heights (`eoscale synth --heights`: the height depends on the class and on
context a pixel's spectrum does not show, see `eoscale.synth.heights`), ingests it with `--targets` (20 m
EPSG:3035 heights, bilinear onto the 10 m tiles), then per repeat, in alternating order, with the repeat's seed:

- the network: `RegressionTask` (the recipe's backbone, FPN decoder, loss, one-cycle of warm-up and cosine decay
  sized so the schedule ends with the budget) trained on the training tiles for `--seconds`;
- the baseline: a random forest regressor on pixel spectra of the same training tiles, grown 10 trees at a time
  until the same `--seconds` are spent (at most `--max-trees`).

Both are scored on every pixel of the val split that has a height and image data: RMSE, MAE, bias (mean of
prediction − truth) and R², in metres. The record holds each repeat and the medians; the training mean is the
floor either must beat.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

RECIPE = {"backbone": "resnet18", "decoder_channels": 64, "loss": "mse", "huber_delta": 1.0, "lr": 3e-3,
          "weight_decay": 0.01, "warmup_fraction": 0.1, "batch_size": 8}
PROBE_STEPS, PROBE_SKIPPED = 20, 5  # steps of the run that times a step; its first ones (start-up) are not timed





def scores(pred: np.ndarray, truth: np.ndarray) -> dict:
    """RMSE, MAE, bias and R² of `pred` against `truth` (1-D, same length)."""
    err = pred.astype(np.float64) - truth
    total = np.sum((truth - truth.mean()) ** 2)
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err))), "bias": float(err.mean()),
            "r2": float(1 - np.sum(err**2) / total) if total > 0 else None, "pixels": int(truth.size)}


def make_store(work: Path, *, scenes: int, size: int, tile: int, seed: int) -> Path:
    """A synthetic set with heights, ingested with --targets into `work/tiles.zarr`."""
    from eoscale.ingest import ingest
    from eoscale.synth.dataset import synthesize

    result = synthesize(work / "synthetic", scenes=scenes, size=size, seed=seed, heights=True)
    store = work / "tiles.zarr"
    # as `eoscale ingest --scenes … --targets … --tile-size T --split 0.7,0.15,0.15 --split-block 2` does
    ingest([str(p) for p in result.scene_paths], store, targets=[str(p) for p in result.height_paths],
           target_name="canopy_height", target_units="m", tile_size=tile, workers=1, split=(0.7, 0.15, 0.15),
           split_block=2, progress=False)
    return store


def split_arrays(store: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split's images (tile, band, y, x; uint16, the first date) and targets (tile, y, x; NaN for none)."""
    from eoscale.data import open_store

    ds = open_store(store)
    start, stop = ds.attrs["splits"][split]
    return ds["images"][start:stop].isel(time=0).values, ds["targets"][start:stop].values


def scored_pixels(images: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Pixels with a target and image data (tile, y, x)."""
    return np.isfinite(targets) & (images.max(axis=1) > 0)


def forest_at_budget(train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray], *, seconds: float,
                     pixels: int, max_trees: int, seed: int) -> dict:
    """A random forest on pixel spectra, grown 10 trees at a time while the budget lasts."""
    from sklearn.ensemble import RandomForestRegressor

    def table(images: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep = scored_pixels(images, targets)
        return images.transpose(0, 2, 3, 1)[keep].astype(np.float32), targets[keep]

    x, y = table(*train)
    pick = np.random.default_rng(seed).choice(len(y), size=min(pixels, len(y)), replace=False)
    forest = RandomForestRegressor(n_estimators=0, max_depth=20, min_samples_leaf=2, n_jobs=-1, random_state=seed,
                                   warm_start=True)
    started = time.perf_counter()
    while forest.n_estimators < max_trees and time.perf_counter() - started < seconds:
        forest.n_estimators += 10
        forest.fit(x[pick], y[pick])
    fit_seconds = time.perf_counter() - started
    x_val, y_val = table(*val)
    return {**scores(forest.predict(x_val), y_val), "fit_seconds": fit_seconds, "trees": forest.n_estimators,
            "train_pixels": int(len(pick))}


def network_at_budget(store: Path, work: Path, val: tuple[np.ndarray, np.ndarray], *, seconds: float, seed: int,
                      recipe: dict) -> dict:
    """`RegressionTask` trained on the training tiles for about `seconds` (steps sized from a timed start)."""
    import lightning as L
    import torch

    from eoscale.data.datamodule import TileDataModule
    from eoscale.train.quiet import silence_trainer_info
    from eoscale.train.tasks.regression import RegressionTask

    silence_trainer_info()  # the bench prints its own lines for each fit

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.start = self.end = None
            self.steps = 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            if trainer.global_step == PROBE_SKIPPED:  # (batch_idx restarts with every epoch)
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            if trainer.global_step > PROBE_SKIPPED:
                self.end, self.steps = time.perf_counter(), trainer.global_step - PROBE_SKIPPED

    def trainer(steps: int, root: str, max_seconds: float | None = None, callbacks=()) -> L.Trainer:
        return L.Trainer(callbacks=list(callbacks), accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, default_root_dir=str(work / root),
                         max_time=None if max_seconds is None else {"seconds": max_seconds})

    def task(steps: int) -> RegressionTask:
        return RegressionTask(recipe["backbone"], decoder_channels=recipe["decoder_channels"], loss=recipe["loss"],
                              huber_delta=recipe["huber_delta"], lr=recipe["lr"], weight_decay=recipe["weight_decay"],
                              warmup_steps=max(1, int(recipe["warmup_fraction"] * steps)), init_seed=seed)

    def data() -> TileDataModule:
        return TileDataModule(store, target="values", batch_size=recipe["batch_size"], num_workers=0, seed=seed)

    started = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    clock = Clock()
    trainer(PROBE_STEPS, "probe", callbacks=[clock]).fit(task(PROBE_STEPS), datamodule=data())
    per_step = (clock.end - clock.start) / max(clock.steps, 1)
    steps = max(20, int(0.95 * (seconds - (time.perf_counter() - started)) / per_step))
    L.seed_everything(seed, verbose=False)
    model, dm = task(steps), data()
    trainer(steps, "fit", max_seconds=seconds).fit(model, datamodule=dm)
    fit_seconds = time.perf_counter() - started
    images, targets = val
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(images), 32):
            batch = dm.normalise({"image": torch.from_numpy(images[i : i + 32].astype(np.uint16))})
            preds.append((model(batch["image"])[:, 0] * model.target_std + model.target_mean).numpy())
    pred = np.concatenate(preds)
    keep = scored_pixels(images, targets)
    return {**scores(pred[keep], targets[keep]), "fit_seconds": fit_seconds, "steps": steps,
            "steps_done": int(model.global_step), "seconds_per_step_probe": per_step}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenes", type=int, default=6, help="synthetic scenes (default: %(default)s)")
    parser.add_argument("--size", type=int, default=256, help="scene edge in 10 m pixels (default: %(default)s)")
    parser.add_argument("--tile-size", type=int, default=64, help="tile edge of the store (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=110.0,
                        help="training budget of each model in each repeat (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="repeats, alternating which model goes first, seed = "
                        "repeat (default: %(default)s)")
    parser.add_argument("--pixels", type=int, default=100_000, help="training pixels of the forest (default: %(default)s)")
    parser.add_argument("--max-trees", type=int, default=300, help="the forest stops growing here (default: %(default)s)")
    for key in ("backbone", "loss", "lr", "batch_size"):
        kind = type(RECIPE[key])
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, default=RECIPE[key],
                            help=f"the network recipe's {key} (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    import torch

    from eoscale.bench.record import record
    from eoscale.errors import InputError

    if args.seconds <= 0 or args.repeats < 1 or args.scenes < 2:
        raise InputError(f"need --seconds > 0, --repeats >= 1 and --scenes >= 2 (a val split); got {args.seconds:g}, "
                         f"{args.repeats} and {args.scenes}")
    recipe = {**RECIPE, "backbone": args.backbone, "loss": args.loss, "lr": args.lr, "batch_size": args.batch_size}
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-regression-") as tmp:
        work = Path(tmp)
        print(f"synth --heights ({args.scenes} scenes of {args.size} px) and ingest --targets …")
        store = make_store(work, scenes=args.scenes, size=args.size, tile=args.tile_size, seed=0)
        train, val = split_arrays(store, "train"), split_arrays(store, "val")
        keep = scored_pixels(*train)
        train_mean = float(train[1][keep].mean())
        val_keep = scored_pixels(*val)
        mean = {"model": "the training mean", **scores(np.full(int(val_keep.sum()), train_mean), val[1][val_keep])}
        for repeat in range(args.repeats):
            order = ("network", "forest") if repeat % 2 == 0 else ("forest", "network")
            result: dict = {"seed": repeat, "order": list(order)}
            for name in order:
                if name == "forest":
                    result["forest"] = forest_at_budget(train, val, seconds=args.seconds, pixels=args.pixels,
                                                        max_trees=args.max_trees, seed=repeat)
                else:
                    result["network"] = network_at_budget(store, work / f"fit{repeat}", val, seconds=args.seconds,
                                                          seed=repeat, recipe=recipe)
                print(f"  repeat {repeat} {name}: RMSE {result[name]['rmse']:.3f} m, R² {result[name]['r2']:.3f} "
                      f"({result[name]['fit_seconds']:.0f} s)")
            runs.append(result)
    medians = {model: {k: statistics.median(r[model][k] for r in runs) for k in ("rmse", "mae", "bias", "r2")}
               for model in ("network", "forest")}
    figures = {
        "data": {"scenes": args.scenes, "scene_px": args.size, "tile": args.tile_size,
                 "target": "eoscale synth --heights (class + stand edge distance, forest cover, object width, parcel "
                           "NDVI; 20 m EPSG:3035), bilinear onto 10 m", "val_pixels": int(val_keep.sum())},
        "budget_seconds": args.seconds, "torch_threads": torch.get_num_threads(),
        "network_recipe": recipe, "forest": {"max_depth": 20, "min_samples_leaf": 2, "pixels": args.pixels,
                                             "max_trees": args.max_trees},
        "runs": runs, "mean": mean, "median": medians,
        "rmse_ratio_network_to_forest": medians["network"]["rmse"] / medians["forest"]["rmse"],
        "network_beats_forest": medians["network"]["rmse"] < medians["forest"]["rmse"],
    }
    print(f"median RMSE: network {medians['network']['rmse']:.3f} m, forest {medians['forest']['rmse']:.3f} m "
          f"(ratio {figures['rmse_ratio_network_to_forest']:.2f}), training mean {mean['rmse']:.3f} m")
    if args.record:
        seeds = {"scenes and split": 0, "fits (one a repeat)": list(range(args.repeats))}
        print(f"recorded in {record('regression', figures, directory=args.record, seeds=seeds)}")
    return 0
