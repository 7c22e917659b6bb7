"""`eoscale bench learning --scene SCENE --labels LABELS --classes CSV`: which model for this real scene?

A real labelled scene is cut in two halves (`--hold-out south`: the north half trains, the south half is mapped and
scored; or `north`, `east`, `west`). The train half is ingested with its labels as a user would (`eoscale ingest`,
tiles of `--tile-size`, split train/val 0.8/0.2, so the val blocks of the train half choose what needs choosing); then, each through the
user's commands, the forest (`eoscale fit --config configs/forest.yaml`) and the network (`--config`, a CPU budget
of `--minutes`, as `eoscale bench learning STORE` fits it) are fitted, and each maps the held-out half
(`eoscale predict --probabilities`) and the val tiles of the train half (read from the store as training validated
them; `eoscale.bench.learning_maps`). Scored on every valid pixel of the held-out half:

- `forest` and `network`: the two checkpoints' maps;
- `stack`: the mixture `w · forest + (1 − w) · network` of their class probabilities, `w` (0, 0.1, …, 1) chosen by
  val mIoU on the val blocks of the train half over the classes with at least `CHOICE_MIN_PIXELS` pixels there
  (a class of 3 val pixels judges nothing), never on the held-out half (whose mIoU at each weight is recorded, to
  judge the choice, and read by nothing);
- `pixel_forest` and `means_forest`: scikit-learn random forests (200 trees) on the pixels of the train half, on the
  band values and on the band values with their 5 and 15 px means (the baselines of issue 49);
- `stack_means`: the stack of the network and a means forest fitted without the val tiles' pixels, its weight chosen
  on them likewise.

With `--pretrain MINUTES`, one more network: `--config`'s encoder first pretrained (`eoscale pretrain`, MAE by
default) on both halves' pixels without labels for MINUTES, then fitted from it for the rest of `--minutes`
(`network_pretrained`), against `network` from scratch for all of them; its gain is a line of its own.

A seed's fits and maps that finished in `--work` are kept (`seed<N>/forest-<KEY>/`, `network-<KEY>/`, the KEY
naming what the fit depends on) and not made again, and so is a finished seed's result (`seed<N>/result-<KEY>.json`):
a run cut short keeps its finished seeds, and another network recipe run in the same `--work` shares the ingest, the
forests and the scikit-learn baselines, and fits only its network.

    eoscale bench learning --scene zion.vrt --band-names B02,B03,B04,B08 --labels labels_nlcd2011.tif \\
        --classes classes.csv --hold-out south --minutes 3 --seeds 0,1 --label default

mIoU is over the classes present in the held-out half's labels (`eoscale.models.metrics.confusion_miou`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
from pathlib import Path

import numpy as np

from eoscale.bench.learning_maps import _pixel_features, pixel_forest, probabilities, tile_probabilities  # noqa: F401

HOLD_OUTS = ("south", "north", "east", "west")
WEIGHTS = tuple(round(w, 1) for w in np.linspace(0, 1, 11))  # the forest's share in the stack
MEANS_PX = (5, 15)  # the windows of the means forest's neighbourhood features
# the val pixels a class needs to take part in choosing the stack's weight (`choose_weight`)
CHOICE_MIN_PIXELS = 50
# what a seed's result keeps of each network fit's figures (`eoscale.bench.learning_fits.fit_network`)
FIT_FIGURES = ("wall_seconds", "max_steps_calibrated", "max_steps", "budget_resizes", "last_logged_step",
               "early_stopping", "val_miou")


def configure(parser: argparse.ArgumentParser) -> None:
    """The options of the real-scene mode, added to `eoscale bench learning`'s parser."""
    from eoscale.paths import Paths

    parser.add_argument("--scene", action=Paths, metavar="RASTER", default=None,
                        help="instead of STORE: one real scene (a multi-band GeoTIFF or VRT, e.g. 'gdalbuildvrt "
                        "-separate scene.vrt b2.tif b3.tif …'), cut in a train half and a held-out half")
    parser.add_argument("--labels", action=Paths, metavar="RASTER", default=None,
                        help="with --scene: its label raster (class codes, any CRS)")
    parser.add_argument("--classes", action=Paths, metavar="CSV", default=None,
                        help="with --scene: the class table (code,name[,color])")
    parser.add_argument("--band-names", default=None, metavar="B02,B03,…",
                        help="with --scene: names of its bands if the file carries no band descriptions")
    parser.add_argument("--hold-out", choices=HOLD_OUTS, default="south",
                        help="with --scene: the half mapped and scored; the other one trains (default: south)")
    parser.add_argument("--pretrain", type=float, default=0.0, metavar="MINUTES",
                        help="with --scene: a second network, its encoder first pretrained on the whole scene's "
                        "unlabelled pixels (both halves; --pretrain-config) for MINUTES of the --minutes budget, then "
                        "fitted from it for the rest, against the network from scratch for all of it (its --config "
                        "must take a ViT's weights, e.g. configs/vit_scene_seg.yaml; default: 0, no second network)")
    parser.add_argument("--pretrain-config", action=Paths, metavar="CONFIG", default="configs/mae_pretrain.yaml",
                        help="with --pretrain: the pretraining config (default: configs/mae_pretrain.yaml)")
    parser.add_argument("--pretrain-args", default="", metavar="ARGS",
                        help="with --pretrain: more 'eoscale pretrain' arguments, one string (e.g. the backbone "
                        "of the network's config: \"--model.init_args.backbone vit_tiny_patch16_224\")")
    parser.add_argument("--work", action=Paths, metavar="FOLDER", default=None,
                        help="with --scene: keep the halves, store, fits and maps in FOLDER (default: a temporary "
                        "folder, removed at the end)")


def _check_scene_args(args: argparse.Namespace) -> None:
    from eoscale.errors import InputError

    if args.labels is None or args.classes is None:
        raise InputError("--scene needs --labels RASTER and --classes CSV (the label raster and its class table)")
    if not 0 <= args.pretrain < args.minutes:
        raise InputError(f"--pretrain {args.pretrain:g}: give pretraining minutes from 0 to under --minutes "
                         f"{args.minutes:g} (they count in the network's budget)")
    for option, path in (("--scene", args.scene), ("--labels", args.labels), ("--classes", args.classes)):
        if not Path(path).is_file():
            raise InputError(f"{option} {path!r}: no such file")


def halves(scene: str, labels: str, hold_out: str, folder: Path, *,
           band_names: list[str] | None) -> dict[str, np.ndarray]:
    """`train.tif` and `test.tif` in `folder` (the scene's two halves, its dtype and nodata, bands named); returned:
    the label codes on each half's grid (`train`, `test`: nearest neighbour, NaN where the labels say nothing) and
    `train_valid`, `test_valid`: the pixels with data in every band and a label."""
    import rasterio
    from rasterio.warp import Resampling, reproject
    from rasterio.windows import Window

    from eoscale.errors import InputError

    with rasterio.open(scene) as src:
        names = band_names or [d for d in src.descriptions if d]
        if len(names) != src.count:
            raise InputError(f"--scene {scene!r} has {src.count} bands and {len(names)} band names: give "
                             "--band-names with one name a band (e.g. B02,B03,B04,B08)")
        height, width = src.height, src.width
        rows = height // 2 if hold_out in ("south", "north") else height
        cols = width // 2 if hold_out in ("east", "west") else width
        first = Window(0, 0, cols, rows)
        second = Window(width - cols if cols < width else 0, height - rows if rows < height else 0,
                        width - cols if cols < width else width, height - rows if rows < height else height)
        windows = {"train": first, "test": second} if hold_out in ("south", "east") else {"train": second,
                                                                                          "test": first}
        out = {}
        for part, window in windows.items():
            data = src.read(window=window)
            valid = ~np.any([data[i] == src.nodata for i in range(src.count)], axis=0) if src.nodata is not None \
                else np.ones(data.shape[1:], bool)
            transform = src.window_transform(window)
            profile = {**src.profile, "driver": "GTiff", "height": data.shape[1], "width": data.shape[2],
                       "transform": transform, "compress": "deflate", "tiled": False}
            profile.pop("blockxsize", None), profile.pop("blockysize", None)
            with rasterio.open(folder / f"{part}.tif", "w", **profile) as dst:
                dst.write(data)
                for i, name in enumerate(names, start=1):
                    dst.set_band_description(i, name)
            with rasterio.open(labels) as lab:
                codes = np.zeros(data.shape[1:], dtype=np.float64)
                reproject(rasterio.band(lab, 1), codes, dst_transform=transform, dst_crs=src.crs,
                          dst_nodata=np.nan, resampling=Resampling.nearest)
                if lab.nodata is not None:
                    codes[codes == lab.nodata] = np.nan
            out[part] = codes
            out[f"{part}_valid"] = valid & np.isfinite(codes)
    return out


def class_indices(codes: np.ndarray, valid: np.ndarray, table) -> np.ndarray:
    """Class indices of the label codes (`IGNORE_INDEX` where not valid or not in the table)."""
    from eoscale.classes import IGNORE_INDEX

    index = np.full(codes.shape, IGNORE_INDEX, dtype=np.int64)
    for i, code in enumerate(table.codes):
        index[valid & (codes == code)] = i
    return index


def score(truth: np.ndarray, predicted: np.ndarray, names: list[str]) -> dict:
    """Overall accuracy, mIoU (over the classes in `truth`) and per-class IoU on the pixels `truth` labels."""
    from eoscale.classes import IGNORE_INDEX
    from eoscale.models.metrics import confusion_iou, confusion_matrix, confusion_miou

    keep = truth != IGNORE_INDEX
    confusion = confusion_matrix(truth[keep], predicted[keep], len(names))
    iou = confusion_iou(confusion)
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)), "miou": confusion_miou(confusion),
            "iou": {n: None if np.isnan(v) else float(v) for n, v in zip(names, iou, strict=True)},
            "pixels": int(confusion.sum())}


def val_mask(store: str, shape: tuple[int, int]) -> np.ndarray:
    """The pixels of the train half in the store's val tiles: where the stack's weight is chosen."""
    import xarray as xr

    from eoscale.store.schema import COL_OFF, ROW_OFF, SPLIT, SPLITS

    tiles = xr.open_zarr(store, consolidated=False)
    size = tiles.sizes["y"]
    mask = np.zeros(shape, bool)
    for split, row, col in zip(tiles[SPLIT].values, tiles[ROW_OFF].values, tiles[COL_OFF].values, strict=True):
        if SPLITS[int(split)] == "val":
            mask[row:row + size, col:col + size] = True
    return mask


def bench_scene(args: argparse.Namespace, work: Path, *, seed: int) -> dict:
    """Every model of the module's docstring fitted on the train half of `args.scene` (seeded `seed`) and scored on
    its held-out half. The halves and the store are made once in `work` for every seed and recipe; each seed's fits
    and maps are kept in `work/seed<N>`, in a folder named by what they depend on (`_key`), so that a run of
    another network recipe in the same `--work` fits only its network again. Each model maps the held-out half
    (scored) and the train half's val tiles (the stack's weight), nothing else."""
    from eoscale.bench.learning_fits import _checkpoint, fit_forest, fit_network, network_seed_args
    from eoscale.classes import IGNORE_INDEX, ClassTable
    from eoscale.ingest import ingest

    table = ClassTable.load(args.classes)
    names = [c.name for c in table.classes]
    store = work / f"train-{args.tile_size}px.zarr"
    band_names = args.band_names.split(",") if args.band_names else None
    cut = halves(args.scene, args.labels, args.hold_out, work, band_names=band_names)
    if not (store / "zarr.json").exists():
        ingest([str(work / "train.tif")], store, labels=[str(args.labels)], classes=args.classes,
               split=(0.8, 0.2, 0.0), tile_size=args.tile_size, workers=1, progress=False)
    truth = {part: class_indices(cut[part], cut[f"{part}_valid"], table) for part in ("train", "test")}
    shape = truth["train"].shape
    val = np.where(val_mask(str(store), shape), truth["train"], IGNORE_INDEX)
    runs = work / f"seed{seed}"

    def maps(root: Path) -> dict:  # a checkpoint's probabilities on the held-out half and on the val tiles
        return _maps_once(root / "maps.npz", lambda: {
            "test": probabilities(_checkpoint(root), work / "test.tif", root / "maps-test"),
            "train": tile_probabilities(_checkpoint(root), str(store), shape, batch_size=args.batch_size)})

    folder = runs / f"forest-{_key(args.forest_config, args.forest_args)}"
    forest = _once(folder / "forest.json", lambda: fit_forest(
        str(store), folder, config=args.forest_config,
        extra=["--seed_everything", str(seed), "--model.init_args.seed", str(seed)] + shlex.split(args.forest_args)))
    mapped = {"forest": maps(folder / "forest")}
    network_args = (args.config, args.fit_args, args.minutes, args.batch_size, args.workers, args.calibration_steps,
                    args.validate_every)
    folder = runs / f"network-{_key(*network_args)}"
    network = _once(folder / "network.json", lambda: fit_network(
        str(store), folder, config=args.config, extra=network_seed_args(seed) + shlex.split(args.fit_args),
        minutes=args.minutes, batch=args.batch_size, workers=args.workers, calibration_steps=args.calibration_steps,
        validate_every=args.validate_every))
    mapped["network"] = maps(folder / "fit")
    if args.pretrain:  # the same budget: pretraining's minutes and the fit's from its encoder
        folder = runs / f"pretrained-{_key(*network_args, args.pretrain, args.pretrain_config, args.pretrain_args)}"
        pretrained = pretrain(args, work, folder, seed=seed)
        initial = ["--model.init_args.weights", pretrained["backbone"]]
        network_pretrained = _once(folder / "network.json", lambda: fit_network(
            str(store), folder, config=args.config,
            extra=network_seed_args(seed) + initial + shlex.split(args.fit_args), minutes=args.minutes - args.pretrain,
            batch=args.batch_size, workers=args.workers, calibration_steps=args.calibration_steps,
            validate_every=args.validate_every))
        mapped["network_pretrained"] = maps(folder / "fit")
    chosen_by = [n for n, k in zip(names, choice_classes(val, len(names)), strict=True) if k]
    weight, by_weight = choose_weight(mapped, val, names)
    result = {"seed": seed,
              "forest": {**score(truth["test"], mapped["forest"]["test"].argmax(0), names),
                         "fit_seconds": forest["wall_seconds"]},
              "network": {**score(truth["test"], mapped["network"]["test"].argmax(0), names),
                          **{k: network.get(k) for k in FIT_FIGURES}},
              "stack": _stack(mapped, truth["test"], val, names, weight, by_weight, chosen_by)}
    scored, mapped["forest"] = baselines(work, runs, truth, val, names, seed=seed)
    result |= scored
    weight, by_weight = choose_weight(mapped, val, names)
    result["stack_means"] = _stack(mapped, truth["test"], val, names, weight, by_weight, chosen_by)
    if args.pretrain:
        result["network_pretrained"] = {
            **score(truth["test"], mapped["network_pretrained"]["test"].argmax(0), names),
            **{k: network_pretrained.get(k) for k in FIT_FIGURES},
            "pretraining": pretrained}
        result["pretraining_gain"] = result["network_pretrained"]["miou"] - result["network"]["miou"]
    forests = max(result[m]["miou"] for m in ("forest", "pixel_forest", "means_forest"))
    result["gain_over_best_forest"] = {m: result[m]["miou"] - forests for m in models(args)[3:]}
    return result


def _stack(mapped: dict, truth: np.ndarray, val: np.ndarray, names: list[str], weight: float, by_weight: dict,
           chosen_by: list[str]) -> dict:
    """A stack's scores on the held-out half at the weight the val tiles chose, with what chose it (the val mIoU
    over `chosen_by`'s classes, each weight), the weight a plain val mIoU over every class would have chosen (the
    chooser before `CHOICE_MIN_PIXELS`), and, recorded to judge both choices but never read by them, the held-out
    mIoU each weight would have had (`test_miou_by_weight_unused`)."""
    plain, plain_by_weight = choose_weight(mapped, val, names, min_pixels=0)
    return {**score(truth, _mix(mapped, "test", weight), names), "forest_weight": weight,
            "choice_classes": chosen_by, "choice_miou_by_weight": by_weight,
            "plain_val_miou_weight": plain, "plain_val_miou_by_weight": plain_by_weight,
            "test_miou_by_weight_unused": {w: score(truth, _mix(mapped, "test", w), names)["miou"] for w in WEIGHTS}}


def baselines(work: Path, runs: Path, truth: dict, val: np.ndarray, names: list[str], *,
              seed: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The scikit-learn forests of the seed, which no recipe changes (kept in `runs`, fitted once): the per-pixel
    and the means forest on every labelled pixel of the train half, scored on the held-out half; and the means
    forest fitted without the val tiles' pixels, its probabilities on the held-out half and on the val tiles kept
    (`means-forest-unseen.npz`) for the stack beside the network."""
    import rasterio

    from eoscale.classes import IGNORE_INDEX

    done, maps = runs / "baselines.json", runs / "means-forest-unseen.npz"
    if done.is_file() and maps.is_file():
        return json.loads(done.read_text()), _maps_once(maps, dict)
    with rasterio.open(work / "train.tif") as src:
        train_image, nodata = src.read(), src.nodata
    with rasterio.open(work / "test.tif") as src:
        test_image = src.read()
    result = {}
    for model, means in (("pixel_forest", ()), ("means_forest", MEANS_PX)):  # every labelled pixel
        (test,), seconds = pixel_forest(train_image, truth["train"], [test_image], nodata=nodata, means=means,
                                        classes=len(names), seed=seed)
        result[model] = {**score(truth["test"], test.argmax(0), names), "fit_seconds": seconds}
    unseen = np.where(val == IGNORE_INDEX, truth["train"], IGNORE_INDEX)
    (train, test), _ = pixel_forest(train_image, unseen, [train_image, test_image], nodata=nodata, means=MEANS_PX,
                                    classes=len(names), seed=seed, where=[val != IGNORE_INDEX, None])
    unseen = _maps_once(maps, lambda: {"train": train, "test": test})
    done.write_text(json.dumps(result))
    return result, unseen


def _recipe(args: argparse.Namespace) -> tuple:
    """Everything a seed's result depends on besides the seed (the scene, its cut and every fit's options)."""
    return (args.scene, args.labels, args.classes, args.band_names, args.hold_out, args.tile_size, args.config,
            args.fit_args, args.minutes, args.batch_size, args.workers, args.calibration_steps, args.validate_every,
            args.forest_config, args.forest_args, args.pretrain, args.pretrain_config, args.pretrain_args,
            f"choice: classes of >= {CHOICE_MIN_PIXELS} val px")  # a result chosen the old way is not reused


def _key(*recipe) -> str:
    """A short name of what a fit depends on: the folder of a seed's fit of that recipe."""
    return hashlib.sha256(json.dumps(recipe, default=str).encode()).hexdigest()[:10]


def _maps_once(done: Path, make) -> dict[str, np.ndarray]:
    """`make()`'s probability maps by part, kept in `done` (.npz): a finished seed's maps are not made again."""
    if not done.is_file():
        maps = make()
        done.parent.mkdir(parents=True, exist_ok=True)
        np.savez(done, **maps)
    with np.load(done) as kept:
        return {part: kept[part] for part in kept.files}


def pretrain(args: argparse.Namespace, work: Path, runs: Path, *, seed: int) -> dict:
    """`args.pretrain` minutes of `eoscale pretrain` (seeded `seed`) on the images of both halves, ingested without
    labels once into `work` (the scene's unlabelled pixels are free data; the held-out half's labels are never
    read); its figures and encoder (`backbone`), kept in `runs` like the seed's fits."""
    from eoscale.bench.learning_fits import pretrain_encoder
    from eoscale.ingest import ingest

    store = work / f"unlabelled-{args.tile_size}px.zarr"
    if not (store / "zarr.json").exists():
        ingest([str(work / "train.tif"), str(work / "test.tif")], store, split=(0.9, 0.1, 0.0),
               tile_size=args.tile_size, workers=1, progress=False)
    return _once(runs / "pretraining.json", lambda: pretrain_encoder(
        str(store), runs, config=args.pretrain_config, extra=["--seed_everything", str(seed)]
        + shlex.split(args.pretrain_args), minutes=args.pretrain, batch=args.batch_size, workers=args.workers,
        calibration_steps=args.calibration_steps, validate_every=args.validate_every))


def _once(done: Path, fit) -> dict:
    """`fit()`'s figures, kept in `done`: a seed's fit that finished in the work folder is not fitted again."""
    if done.is_file():
        return json.loads(done.read_text())
    figures = fit()
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(figures, default=str))
    return figures


def choose_weight(mapped: dict, val: np.ndarray, names: list[str], *,
                  min_pixels: int = CHOICE_MIN_PIXELS) -> tuple[float, dict[float, float]]:
    """The forest's weight in the stack: the one of `WEIGHTS` whose mixture maps the val tiles of the train half
    (`val`: their class indices, `IGNORE_INDEX` elsewhere) best by mean IoU over the classes with at least
    `min_pixels` pixels there (`choice_classes`), ties to the more even mixture; and that mean IoU of each weight.
    The val tiles are all of the train half that neither the network nor eoscale's forest trained on, and they may
    hold a rare class on a handful of pixels (Zion's water: docs/how-to/real-scenes.md), whose IoU there is noise
    yet weighs in a plain mIoU as much as a class of thousands: such a class judges nothing here. Only the train
    half's maps are read: the held-out half chooses nothing."""
    keep = choice_classes(val, len(names), min_pixels=min_pixels)
    by_weight = {w: _miou_over(val, _mix(mapped, "train", w), len(names), keep) for w in WEIGHTS}
    return max(by_weight, key=lambda w: (by_weight[w], -abs(w - 0.5))), by_weight


def choice_classes(val: np.ndarray, classes: int, *, min_pixels: int = CHOICE_MIN_PIXELS) -> np.ndarray:
    """Which classes (a boolean mask) have at least `min_pixels` labelled pixels in `val`: those the stack's
    weight is chosen by (every class present if none has so many)."""
    from eoscale.classes import IGNORE_INDEX

    support = np.bincount(val[val != IGNORE_INDEX].ravel(), minlength=classes)[:classes]
    return support >= min_pixels if (support >= min_pixels).any() else support > 0


def _miou_over(truth: np.ndarray, predicted: np.ndarray, classes: int, keep: np.ndarray) -> float:
    """mIoU of `predicted` on the pixels `truth` labels, over the classes of `keep` only."""
    from eoscale.classes import IGNORE_INDEX
    from eoscale.models.metrics import confusion_matrix, confusion_miou

    labelled = truth != IGNORE_INDEX
    value = confusion_miou(confusion_matrix(truth[labelled], predicted[labelled], classes), classes=keep)
    return float("nan") if value is None else value


def _mix(mapped: dict, part: str, weight: float) -> np.ndarray:
    return (weight * mapped["forest"][part] + (1 - weight) * mapped["network"][part]).argmax(0)


MODELS = ("pixel_forest", "means_forest", "forest", "network", "stack", "stack_means")


def models(args: argparse.Namespace) -> tuple[str, ...]:
    """The models scored: `MODELS`, and with `--pretrain` the network from the scene-pretrained encoder."""
    return MODELS + (("network_pretrained",) if args.pretrain else ())


def run(args: argparse.Namespace, seeds: list[int] | None) -> int:
    """Every seed's fits on the scene, a table of the held-out half's mIoU (mean and spread over the seeds), and
    the record (`benchmarks/learning_scene.json`)."""
    import os
    import tempfile

    from eoscale.bench.record import record

    _check_scene_args(args)
    seeds = seeds or [0]
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-scene-") as scratch:
        work = Path(args.work) if args.work else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        results = []
        for seed in seeds:
            print(f"seed {seed}: {args.scene}, held-out half {args.hold_out} …")
            # a seed that finished in --work is not run again: a run cut short keeps its finished seeds
            results.append(_once(work / f"seed{seed}" / f"result-{_key(*_recipe(args))}.json",
                                 lambda seed=seed: bench_scene(args, work, seed=seed)))
            print("  " + ", ".join(f"{m} {results[-1][m]['miou']:.3f}" for m in models(args)))
    summary = {m: {"miou_mean": float(np.mean([r[m]["miou"] for r in results])),
                   "miou_std": float(np.std([r[m]["miou"] for r in results])),
                   "accuracy_mean": float(np.mean([r[m]["accuracy"] for r in results]))} for m in models(args)}
    best_forest = max(("pixel_forest", "means_forest", "forest"), key=lambda m: summary[m]["miou_mean"])
    print(f"{'model':<18} {'test mIoU':>16} {'accuracy':>9}   (held-out {args.hold_out} half, {len(seeds)} seed(s))")
    for m in models(args):
        s = summary[m]
        print(f"{m:<18} {s['miou_mean']:>9.3f} ± {s['miou_std']:.3f} {s['accuracy_mean']:>9.3f}")
    for m in models(args)[3:]:
        print(f"{m} - best forest ({best_forest}): {summary[m]['miou_mean'] - summary[best_forest]['miou_mean']:+.3f}")
    gain = None
    if args.pretrain:  # its own line: the same network and budget with and without the scene-pretrained encoder
        each = [r["pretraining_gain"] for r in results]
        gain = {"miou_mean": float(np.mean(each)), "miou_std": float(np.std(each)), "each": each}
        print(f"pretraining gain ({args.pretrain:g} of {args.minutes:g} min pretraining vs {args.minutes:g} min from "
              f"scratch): {gain['miou_mean']:+.3f} ± {gain['miou_std']:.3f} test mIoU")
    figures = {"label": args.label, "scene": os.path.abspath(args.scene), "labels": os.path.abspath(args.labels),
               "hold_out": args.hold_out, "minutes": args.minutes, "config": args.config, "fit_args": args.fit_args,
               "pretrain_minutes": args.pretrain, "pretrain_config": args.pretrain_config if args.pretrain else None,
               "pretrain_args": args.pretrain_args if args.pretrain else None,
               "seeds": seeds, "runs": results, "summary": summary, "best_forest": best_forest,
               "pretraining_gain": gain}
    if args.record:
        print(f"recorded in {record('learning_scene', figures, directory=args.record, seeds={'fits': seeds})}")
    return 0
