"""`eoscale bench learning STORE`: does the network beat a per-pixel random forest on this store?

On any labelled tile store (any bands, class table and split), the two models an analyst compares, each through
`eoscale fit`: the forest (`configs/forest.yaml`, `eoscale.train.tasks.forest`) and the network (the default
recipe, `configs/resnet18_seg.yaml`, or `--config`, with `--fit-args` for a variant) for a fixed CPU budget
(`--minutes`). Both checkpoints (the network's best by val mIoU, the one `predict` takes from a run's folder) are
scored by the same code on every valid pixel of the store's val split: mIoU, and per class the IoU, the producer's
accuracy and the share of the pixels. Any warning of the fit about a class never mapped is kept in the record, and
each class of at least 0.1 % of the val pixels that the scored network never maps right is checked to have one.

    eoscale bench learning runs/tiles.zarr --minutes 5 --label default --record benchmarks
    eoscale bench learning runs/tiles.zarr --seeds 0,1,2          # three fits of each model (their seeds)
    eoscale bench learning --synthetic runs/imb --seeds 0,1,2     # three synthetic imbalanced sets (issue 38)
    eoscale bench learning --scene scene.tif --labels labels.tif --classes classes.csv   # a real scene, halved
                                                                  # (eoscale.bench.learning_scene, issue 49)

With several seeds the record holds one result a seed and the network's gain over the forest on each.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

# the fits and their scoring, in their own module since the real-scene mode uses them too; named here as before
from eoscale.bench.learning_fits import (  # noqa: F401
    _checkpoint,
    _fit_argv,
    _run_fit,
    _series,
    fit_forest,
    fit_network,
    missed_classes,
    network_seed_args,
    score_checkpoint,
    step_seconds,
)
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", nargs="?", help="a labelled tile store (e.g. runs/quickstart/tiles.zarr): "
                        "any bands, class table and split")
    parser.add_argument("--synthetic", metavar="FOLDER", default=None,
                        help="instead of STORE: one small, imbalanced synthetic set a seed (eoscale.synth.imbalanced: "
                        "4 bands, 8 classes, two of them ~90 %% of the pixels, rare ones under 1 %%, labels off at "
                        "boundaries), written and ingested into FOLDER/seed<N>/; the fits keep their configs' seeds")
    parser.add_argument("--seeds", default=None, metavar="N,N,...",
                        help="seeds, comma-separated: with --synthetic, the sets'; with STORE, the fits' (seed_everything "
                        "and the forest's seed), each seed a fit of both models on the store (default: one run, the "
                        "configs' seeds; with --synthetic, 0)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --synthetic: bench the sets already written in FOLDER (checked against the asked "
                        "--scenes/--size/--tile-size) instead of refusing the folder")
    parser.add_argument("--scenes", type=int, default=2, help="with --synthetic: scenes a set (default: 2)")
    parser.add_argument("--size", type=int, default=384, help="with --synthetic: a scene's side in px (default: 384)")
    parser.add_argument("--tile-size", type=int, default=64, help="with --synthetic or --scene: the ingest's tiles (default: 64)")
    parser.add_argument("--minutes", type=float, default=10.0, help="CPU training budget of the network (default: 10)")
    parser.add_argument("--config", default="configs/resnet18_seg.yaml", action=Paths, metavar="CONFIG",
                        help="the network's fit config (default: configs/resnet18_seg.yaml, the default recipe)")
    parser.add_argument("--fit-args", default="", metavar="ARGS",
                        help="more 'eoscale fit' arguments for the network, one string (e.g. "
                        "\"--model.init_args.class_weights inverse\"), to measure a variant")
    parser.add_argument("--forest-config", default="configs/forest.yaml", action=Paths, metavar="CONFIG",
                        help="the forest's fit config (default: configs/forest.yaml)")
    parser.add_argument("--forest-args", default="", metavar="ARGS", help="more 'eoscale fit' arguments for the forest")
    parser.add_argument("--label", default=None, help="a name for this record (e.g. the variant measured)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers (default: 1)")
    parser.add_argument("--calibration-steps", type=int, default=40,
                        help="steps of the fit that times a step (the first 5 are warm-up), to size the budgeted fit "
                        "(default: 40)")
    parser.add_argument("--validate-every", type=int, default=100,
                        help="validate every N steps; the fit runs a whole number of them (default: 100)")
    from eoscale.bench import learning_scene

    learning_scene.configure(parser)


def _check(args: argparse.Namespace) -> list[int] | None:
    """The seeds asked for (None: one run as the configs say), after checking the options: one line if wrong."""
    from eoscale.bench.train import WARMUP_STEPS
    from eoscale.errors import InputError

    if args.calibration_steps <= WARMUP_STEPS or args.validate_every < 1 or args.minutes <= 0:
        raise InputError(f"need --minutes > 0, --calibration-steps > {WARMUP_STEPS} (its first {WARMUP_STEPS} are not "
                         f"timed) and --validate-every >= 1; got {args.minutes:g}, {args.calibration_steps} and "
                         f"{args.validate_every}")
    if sum(x is not None for x in (args.store, args.synthetic, args.scene)) != 1:
        raise InputError("give a tile store (STORE) or --synthetic FOLDER or --scene RASTER, one of them")
    if args.reuse and args.synthetic is None:
        raise InputError("--reuse keeps the sets of --synthetic FOLDER: give --synthetic, or drop --reuse")
    if args.seeds is None:
        return [0] if args.synthetic else None
    try:
        seeds = [int(word) for word in args.seeds.split(",") if word.strip()]
    except ValueError:
        raise InputError(f"--seeds {args.seeds!r} is not comma-separated whole numbers (e.g. 0,1,2)") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise InputError(f"--seeds {args.seeds!r}: give distinct seeds >= 0, e.g. 0,1,2")
    return seeds


def learning_seeds(args: argparse.Namespace, seeds: list[int] | None) -> dict | None:
    """The record's seeds: of the synthetic sets (their fits take the configs' seeds), or of the fits on STORE."""
    if args.synthetic is not None:
        return {"synthetic sets": seeds}
    return None if seeds is None else {"fits (seed_everything and the forest)": seeds}


def bench_store(store: str, args: argparse.Namespace, *, fit_seed: int | None = None) -> dict:
    """Both models fitted on `store` and scored; `fit_seed` seeds both fits (None: their configs' seeds)."""
    import shlex

    seeded = [] if fit_seed is None else ["--seed_everything", str(fit_seed)]
    forest_extra = shlex.split(args.forest_args) + ([] if fit_seed is None else ["--model.init_args.seed", str(fit_seed)])
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-learning-") as tmp:
        print(f"random forest: eoscale fit --config {args.forest_config} {shlex.join(forest_extra)} …")
        forest = fit_forest(store, Path(tmp), config=args.forest_config, extra=seeded + forest_extra)
        print(f"  val mIoU {forest['val_miou']:.3f}, accuracy {forest['val_accuracy']:.3f}")
        extra = ([] if fit_seed is None else network_seed_args(fit_seed)) + shlex.split(args.fit_args)
        print(f"network: eoscale fit --config {args.config} {shlex.join(extra)} for {args.minutes:g} min …")
        network = fit_network(store, Path(tmp), config=args.config, extra=extra, minutes=args.minutes,
                              batch=args.batch_size, workers=args.workers, calibration_steps=args.calibration_steps,
                              validate_every=args.validate_every)
    print(f"  val mIoU {network['val_miou']:.3f} ({network['checkpoint']}), accuracy {network['val_accuracy']:.3f}")
    if network["early_stopping"]:
        print(f"  {network['early_stopping']}")
    print(f"  {'class':<24} {'share':>7} {'forest IoU':>10} {'network IoU':>11} {'network PA':>10}")
    for name, row in network["val_classes"].items():
        def text(v):
            return "   -" if v is None else f"{v:.3f}"
        print(f"  {name:<24} {row['pixel_share']:>7.2%} {text(forest['val_classes'][name]['iou']):>10} "
              f"{text(row['iou']):>11} {text(row['producer_accuracy']):>10}")
    for line in network["fit_warnings"]:
        print(f"  fit warned: {line}")
    for name in network["missed_classes_unwarned"]:
        print(f"  NOT WARNED: {name!r} has producer's accuracy 0 and no warning of the fit names it")
    gain = network["val_miou"] - forest["val_miou"]
    print(f"network - forest: {gain:+.3f} val mIoU")
    return {"store": os.path.abspath(store), "forest": forest, "network": network, "miou_gain_over_forest": gain}


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record

    seeds = _check(args)
    if args.scene is not None:
        from eoscale.bench import learning_scene

        return learning_scene.run(args, seeds)
    if args.synthetic is None:
        from eoscale.data import read_store_attrs

        read_store_attrs(args.store)
    if seeds is None:  # one run on the store, the configs' seeds
        figures = {"label": args.label, **bench_store(args.store, args)}
    else:
        results = []
        for seed in seeds:
            if args.synthetic is not None:
                from eoscale.bench.learning_sets import SetSpec, imbalanced_store

                spec = SetSpec(seed, scenes=args.scenes, size=args.size, tile_size=args.tile_size)
                store, shares = imbalanced_store(args.synthetic, spec, reuse=args.reuse)
                print(f"seed {seed}: synthetic imbalanced set {store} "
                      f"({', '.join(f'{k} {v:.1%}' for k, v in shares.items())})")
                results.append({"seed": seed, **bench_store(str(store), args), "class_shares": shares})
            else:
                print(f"seed {seed}: fits seeded {seed} on {args.store}")
                results.append({"seed": seed, **bench_store(args.store, args, fit_seed=seed)})
        gains = [r["miou_gain_over_forest"] for r in results]
        print("seed  forest  network  gain")
        for r in results:
            print(f"{r['seed']:>4}  {r['forest']['val_miou']:.3f}   {r['network']['val_miou']:.3f}   "
                  f"{r['miou_gain_over_forest']:+.3f}")
        figures = {"label": args.label,
                   "seeds_of": "synthetic sets" if args.synthetic is not None else "fits", "seeds": seeds,
                   **({"synthetic": {"folder": os.path.abspath(args.synthetic), "scenes": args.scenes,
                                     "size": args.size, "tile_size": args.tile_size}} if args.synthetic else {}),
                   "runs": results, "miou_gain_over_forest_per_seed": gains, "miou_gain_over_forest_min": min(gains)}
    if args.record:
        print(f"recorded in {record('learning', figures, directory=args.record, seeds=learning_seeds(args, seeds))}")
    return 0
