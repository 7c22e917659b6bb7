"""`eoscale bench temporal`: does a season beat its best single date?

    eoscale bench temporal                                  # 8 places x 6 dates of 256 px, 250 steps a network
    eoscale bench temporal --steps 1000 --label steps1000
    eoscale bench temporal --places 3 --size 128 --steps 4 --record ''     # a smoke run

A synthetic season (`eoscale synth --dates`: clouds on every date, a few dates missing; its classes follow
calendars of shared surface states, `eoscale.synth.phenology`) is ingested with `--time-series --composite`
(regular composites: every place on one calendar, so step t is the same part of the year at every place; plain
`--time-series` pads each place's own dates, and step t would be different dates at different places). Then, all
scored on every labelled pixel of the store's val split:

- the temporal model: `TemporalSegmentationTask` (U-TAE: a per-date ResNet-18, L-TAE attention over the dates,
  FPN decoder; `configs/temporal_utae.yaml`'s sizes) on the stack of every date;
- the same network on one date (`TileDataModule(date_step=k)`: 4-D batches of step k, the same parameters but
  L-TAE over a single date), fitted on **each** date in turn (`--single-dates all`; `forest` fits it on the date
  the single-date forest ranks best only); the best single date is the one whose val mIoU on the seasonal
  classes is highest — chosen on the val split itself, which favours the baseline;
- a per-pixel random forest on the stacked time series (every date's bands side by side, no data as NaN;
  sits' classic baseline), and the same forest on each single date (the best one reported).

Equal CPU budget for the networks: the same recipe, batch size and number of steps (`--steps`) for the stack and
for each single date (a single-date step costs about 1/T of a stack step: the seconds a step of each are
recorded); the forests' fit seconds are recorded beside them. Scores: val mIoU over every class in the val labels
and over the classes that need the season (`eoscale.synth.phenology.SEASONAL_CLASSES`: winter cereal, maize,
grassland, deciduous and evergreen forest, seasonal wetland, each in the same surface state as another class on
some dates), the IoU of each class, and the same figures on the pixels that the best single date sees (so that
the season's gain is not only the clouds it sees through). The goal (issue 33): the temporal model beats the
best single date by at least 0.10 val mIoU on the seasonal classes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from eoscale.classes import IGNORE_INDEX
from eoscale.models.metrics import confusion_matrix, confusion_miou, confusion_scores

RECIPE = {"backbone": "resnet18", "n_head": 4, "d_k": 4, "d_model": 64, "decoder_channels": 32, "lr": 1e-3,
          "weight_decay": 0.01, "warmup_fraction": 0.1, "batch_size": 8, "class_weights": "none",
          "out_indices": [1, 2, 3]}  # ResNet-18's strides 4, 8, 16: L-TAE at stride 16 (configs/temporal_utae.yaml)
GOAL = 0.10  # seasonal-class val mIoU, temporal model over the best single date


def make_season(work: Path, *, places: int, dates: int, size: int, tile: int, composite: str, seed: int) -> Path:
    """`eoscale synth --dates` and `eoscale ingest --time-series --composite` into `work/season.zarr`."""
    from eoscale.ingest import ingest
    from eoscale.synth.dataset import synthesize

    season = synthesize(work / "season", scenes=places, size=size, seed=seed, dates=dates).out_dir
    store = work / "season.zarr"
    ingest([str(season / "scenes" / "*" / "*.tif")], store, labels=[str(season / "labels" / "*.tif")],
           classes=str(season / "classes.csv"), tile_size=tile, split=(0.75, 0.25, 0.0), split_block=2, seed=seed,
           workers=1, progress=False, time_series=True, composite=composite)
    return store


def split_arrays(store: Path, split: str) -> dict[str, np.ndarray]:
    """The split's images (tile, time, band, y, x) uint16, labels (tile, y, x), where each date holds data
    (tile, time, y, x) and the first tile's index."""
    from eoscale.store import schema
    from eoscale.store.open import open_store, read_store_attrs

    attrs = read_store_attrs(store)
    start, stop = attrs[schema.ATTR_SPLITS][split]
    ds = open_store(store).isel({schema.TILE: slice(start, stop)})
    images = ds[schema.IMAGES].values
    date_valid = ds[schema.DATE_VALID].values
    nodata = int(attrs[schema.ATTR_NODATA])
    clear = (images != nodata).any(axis=2) & (date_valid > 0)[:, :, None, None]
    return {"images": images, "labels": ds[schema.LABELS].values, "clear": clear, "start": int(start)}


def scores(matrix: np.ndarray, names: list[str], seasonal: list[int]) -> dict:
    """mIoU over the classes in the labels, over the seasonal classes among them, accuracy and each class's IoU."""
    season = np.zeros(len(names), dtype=bool)
    season[seasonal] = True
    return {**confusion_scores(matrix, names), "miou_seasonal": confusion_miou(matrix, classes=season)}


def pixel_table(arrays: dict, steps: list[int]) -> np.ndarray:
    """(pixels, len(steps) × bands) float32 of every pixel (tile, y, x order): the bands of each step side by
    side, NaN where that step has no data (scikit-learn's forests take NaN as missing)."""
    images = arrays["images"][:, steps].astype(np.float32)  # (N, S, C, H, W)
    images[~arrays["clear"][:, steps][:, :, None].repeat(images.shape[2], axis=2)] = np.nan
    n, s, c, h, w = images.shape
    return images.transpose(0, 3, 4, 1, 2).reshape(n * h * w, s * c)


def forest(train: dict, val: dict, steps: list[int], *, pixels_per_class: int, trees: int, seed: int) -> dict:
    """A random forest on the pixels' values of `steps` (at most `pixels_per_class` training pixels a class)."""
    from sklearn.ensemble import RandomForestClassifier

    x, y = pixel_table(train, steps), train["labels"].reshape(-1)
    rng = np.random.default_rng(seed)
    pick = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:pixels_per_class]
                           for c in np.unique(y) if c != IGNORE_INDEX])
    started = time.perf_counter()
    model = RandomForestClassifier(n_estimators=trees, max_depth=20, min_samples_leaf=2, n_jobs=-1,
                                   random_state=seed).fit(x[pick], y[pick])
    fit_seconds = time.perf_counter() - started
    pred = model.predict(pixel_table(val, steps)).reshape(val["labels"].shape).astype(np.uint8)
    return {"pred": pred, "fit_seconds": fit_seconds, "train_pixels": int(len(pick))}


def network(store: Path, work: Path, val: dict, *, date_step: int | None, steps: int, recipe: dict, workers: int,
            seed: int) -> dict:
    """The U-TAE of `recipe` trained for `steps` on the stack (`date_step` None) or on one step, then its
    predictions on the val split."""
    import lightning as L
    import torch

    from eoscale.data.datamodule import TileDataModule
    from eoscale.train.quiet import silence_trainer_info
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    silence_trainer_info()  # the bench prints its own lines for each fit

    class Clock(L.Callback):  # seconds a step after the first few (start-up, first batches)
        skip = 3

        def __init__(self) -> None:
            self.start = self.end = None
            self.steps = 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            if trainer.global_step == self.skip and self.start is None:
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            if trainer.global_step > self.skip:
                self.end, self.steps = time.perf_counter(), trainer.global_step - self.skip

    def data(**options) -> TileDataModule:
        return TileDataModule(store, batch_size=recipe["batch_size"], num_workers=workers, seed=seed,
                              date_step=date_step, **options)

    L.seed_everything(seed, verbose=False)
    weights = recipe["class_weights"]
    task = TemporalSegmentationTask(
        "utae", backbone=recipe["backbone"],
        backbone_kwargs={**{k: recipe[k] for k in ("n_head", "d_k", "d_model")},
                         **({"out_indices": list(recipe["out_indices"])} if recipe.get("out_indices") else {})},
        decoder_channels=recipe["decoder_channels"],
        lr=recipe["lr"], weight_decay=recipe["weight_decay"], warmup_steps=max(1, int(recipe["warmup_fraction"] * steps)),
        class_weights=False if weights == "none" else weights, init_seed=seed)
    clock = Clock()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, default_root_dir=str(work), callbacks=[clock])
    started = time.perf_counter()
    trainer.fit(task, datamodule=data())
    fit_seconds = time.perf_counter() - started
    dm = data(augment=False, predict_split="val")
    dm.setup("predict")
    pred = np.zeros(val["labels"].shape, np.uint8)
    task.eval()
    with torch.inference_mode(), dm.predict_dataloader() as loader:
        for batch in loader:
            batch = dm.normalise(batch)
            logits = task.logits(batch)
            pred[batch["tile"].numpy() - val["start"]] = logits.argmax(1).numpy().astype(np.uint8)
    return {"pred": pred, "fit_seconds": fit_seconds, "steps": int(task.global_step),
            "seconds_per_step": (clock.end - clock.start) / clock.steps if clock.steps else None,
            "parameters": int(sum(p.numel() for p in task.model.parameters()))}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--places", type=int, default=8, help="synthetic places (default: %(default)s)")
    parser.add_argument("--dates", type=int, default=6, help="dates a place (default: %(default)s)")
    parser.add_argument("--size", type=int, default=256, help="place edge in 10 m pixels (default: %(default)s)")
    parser.add_argument("--tile-size", type=int, default=64, help="tile edge of the store (default: %(default)s)")
    parser.add_argument("--composite", default="56d",
                        help="ingest's --composite: one calendar for every place (default: %(default)s, one synthetic "
                        "date an interval of a 6-date season)")
    parser.add_argument("--steps", type=int, default=250, help="training steps of every network (default: %(default)s)")
    parser.add_argument("--single-dates", choices=("all", "forest"), default="all",
                        help="the dates the single-date network is fitted on: each one, or only the date the "
                        "single-date forest ranks best (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the season, split and fits (default: %(default)s)")
    parser.add_argument("--trees", type=int, default=100, help="trees of each forest (default: %(default)s)")
    parser.add_argument("--pixels-per-class", type=int, default=20_000,
                        help="training pixels of each forest, at most this many a class (default: %(default)s)")
    parser.add_argument("--label", default=None, help="a name for this record (e.g. the variant measured)")
    for key in ("lr", "batch_size", "n_head", "d_model", "decoder_channels", "class_weights"):
        kind = str if key == "class_weights" else type(RECIPE[key])
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, default=RECIPE[key],
                            help=f"the networks' {key} (default: %(default)s)")
    parser.add_argument("--out-indices", type=lambda text: [int(i) for i in text.split(",")],
                        default=RECIPE["out_indices"], metavar="I,J,…",
                        help="the backbone levels the networks use; L-TAE attends at the coarsest (default: 1,2,3, "
                        "strides 4 to 16; 1,2,3,4 adds stride 32)")


def run(args: argparse.Namespace) -> int:
    import torch

    from eoscale.bench.record import record
    from eoscale.classes import ClassTable
    from eoscale.errors import InputError
    from eoscale.store import schema
    from eoscale.store.open import read_store_attrs
    from eoscale.synth.phenology import SEASONAL_CLASSES

    if args.steps < 1 or args.places < 2 or args.dates < 2:
        raise InputError(f"need --steps >= 1, --places >= 2 (a val split) and --dates >= 2 (a season); got "
                         f"{args.steps}, {args.places} and {args.dates}")
    if args.class_weights not in ("none", "inverse", "sqrt"):
        raise InputError(f"--class-weights {args.class_weights}: choose one of none, inverse, sqrt")
    recipe = {**RECIPE, **{k: getattr(args, k) for k in ("lr", "batch_size", "n_head", "d_model",
                                                         "decoder_channels", "class_weights", "out_indices")}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-temporal-") as tmp:
        work = Path(tmp)
        print(f"synth --dates {args.dates} ({args.places} places of {args.size} px), ingest --time-series "
              f"--composite {args.composite} …")
        store = make_season(work, places=args.places, dates=args.dates, size=args.size, tile=args.tile_size,
                            composite=args.composite, seed=args.seed)
        attrs = read_store_attrs(store)
        table = ClassTable.from_records(attrs[schema.ATTR_CLASSES])
        names = table.names
        seasonal = [i for i, code in enumerate(table.codes) if code in SEASONAL_CLASSES]
        train, val = split_arrays(store, "train"), split_arrays(store, "val")
        steps_t = train["images"].shape[1]
        dates = [str(d)[:10] for d in np.asarray(read_dates(store))]
        n = len(names)

        def score(pred: np.ndarray, keep: np.ndarray | None = None) -> dict:
            keep = np.ones(val["labels"].shape, bool) if keep is None else keep
            return scores(confusion_matrix(val["labels"], pred, n, keep), names, seasonal)

        preds: dict[str, np.ndarray] = {}
        results: dict[str, dict] = {"forest_single": {}, "network_single": {}}
        forest_args = {"pixels_per_class": args.pixels_per_class, "trees": args.trees, "seed": args.seed}
        print(f"forest on the stacked series ({steps_t} steps × {train['images'].shape[2]} bands) …")
        fitted = forest(train, val, list(range(steps_t)), **forest_args)
        preds["forest_stack"] = fitted.pop("pred")
        results["forest_stack"] = {**fitted, **score(preds["forest_stack"])}
        _say("forest, stack", results["forest_stack"])
        for k in range(steps_t):
            fitted = forest(train, val, [k], **forest_args)
            preds[f"forest_date{k}"] = fitted.pop("pred")
            results["forest_single"][k] = {"date": dates[k], **fitted, **score(preds[f"forest_date{k}"])}
            _say(f"forest, date {k} ({dates[k]})", results["forest_single"][k])
        forest_best = max(results["forest_single"], key=lambda k: results["forest_single"][k]["miou_seasonal"])
        print(f"network (U-TAE) on the stack, {args.steps} steps of {recipe['batch_size']} …")
        fitted = network(store, work / "stack", val, date_step=None, steps=args.steps, recipe=recipe,
                         workers=args.workers, seed=args.seed)
        preds["network_stack"] = fitted.pop("pred")
        results["network_stack"] = {**fitted, **score(preds["network_stack"])}
        _say("network, stack", results["network_stack"])
        for k in (range(steps_t) if args.single_dates == "all" else [forest_best]):
            fitted = network(store, work / f"date{k}", val, date_step=k, steps=args.steps, recipe=recipe,
                             workers=args.workers, seed=args.seed)
            preds[f"network_date{k}"] = fitted.pop("pred")
            results["network_single"][k] = {"date": dates[k], **fitted, **score(preds[f"network_date{k}"])}
            _say(f"network, date {k} ({dates[k]})", results["network_single"][k])
        network_best = max(results["network_single"], key=lambda k: results["network_single"][k]["miou_seasonal"])
        # the same comparison on the pixels the best single date sees
        seen = {"network": network_best, "forest": forest_best}
        on_clear = {}
        for model, k in seen.items():
            keep = val["clear"][:, k]
            on_clear[model] = {"date_step": k, "pixels_share": float(keep[val["labels"] != IGNORE_INDEX].mean()),
                               "stack": score(preds[f"{model}_stack"], keep),
                               "single": score(preds[f"{model}_date{k}"], keep)}
        torch_threads = torch.get_num_threads()
    gain = (results["network_stack"]["miou_seasonal"] - results["network_single"][network_best]["miou_seasonal"])
    forest_gain = (results["forest_stack"]["miou_seasonal"] - results["forest_single"][forest_best]["miou_seasonal"])
    figures = {
        "label": args.label,
        "data": {"places": args.places, "dates": args.dates, "place_px": args.size, "tile": args.tile_size,
                 "composite": args.composite, "steps": dates, "seed": args.seed,
                 "train_tiles": int(len(train["labels"])), "val_tiles": int(len(val["labels"])),
                 "seasonal_classes": [names[i] for i in seasonal]},
        "budget": {"network_steps": args.steps, "batch_size": recipe["batch_size"], "torch_threads": torch_threads,
                   "single_dates": args.single_dates},
        "network_recipe": recipe,
        "forest": {"trees": args.trees, "max_depth": 20, "min_samples_leaf": 2,
                   "pixels_per_class": args.pixels_per_class, "missing": "NaN"},
        "results": results,
        "best_single_date": {"network": network_best, "forest": forest_best,
                             "chosen_by": "val mIoU on the seasonal classes (on the val split itself)"},
        "on_pixels_the_best_date_sees": on_clear,
        "seasonal_miou_gain_network": gain,
        "seasonal_miou_gain_forest": forest_gain,
        "goal": GOAL, "goal_met": bool(gain >= GOAL),
        "wall_seconds": time.perf_counter() - started,
    }
    print(f"seasonal-class val mIoU: network stack {results['network_stack']['miou_seasonal']:.3f} vs best single "
          f"date {results['network_single'][network_best]['miou_seasonal']:.3f} (date {network_best}): {gain:+.3f} "
          f"(goal +{GOAL:.2f}: {'met' if gain >= GOAL else 'not met'}); forest stack "
          f"{results['forest_stack']['miou_seasonal']:.3f} vs best single date "
          f"{results['forest_single'][forest_best]['miou_seasonal']:.3f}: {forest_gain:+.3f}")
    for model, row in on_clear.items():
        print(f"  on the pixels date {row['date_step']} sees ({row['pixels_share']:.0%}): {model} stack "
              f"{row['stack']['miou_seasonal']:.3f} vs single {row['single']['miou_seasonal']:.3f}")
    if args.record:
        print(f"recorded in {record('temporal', figures, directory=args.record, seeds={'season, split and fits': args.seed})}")
    return 0


def read_dates(store: Path) -> np.ndarray:
    """The store's calendar: each step's date (a composite store's steps are the same at every tile)."""
    from eoscale.store import schema
    from eoscale.store.open import open_store

    dates = open_store(store)[schema.DATES].values  # (tile, time) datetime64, NaT where a tile lacks a step
    return np.array([next((d for d in dates[:, t] if not np.isnat(d)), np.datetime64("NaT")) for t in
                     range(dates.shape[1])])


def _say(what: str, row: dict) -> None:
    extra = f", {row['seconds_per_step']:.2f} s a step" if row.get("seconds_per_step") else ""
    print(f"  {what}: val mIoU {row['miou']:.3f}, seasonal {row['miou_seasonal']:.3f}, accuracy {row['accuracy']:.3f} "
          f"({row['fit_seconds']:.0f} s{extra})")
