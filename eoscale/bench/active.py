"""`eoscale bench active`: does labelling the map's most uncertain pixels teach a model more per label than
labelling random ones?

The loop is eoscale's own active-learning path, run on a synthetic scene set (a pool scene to label, a held-out
scene to assess; labels from the synthetic reference rasters, EPSG:3035 at 20 m, as a person's would come):

    fit a per-pixel random forest on the labelled points' features (the bands and NDVI, and their means and
    standard deviations over 3, 7 and 15 pixels: `eoscale.bench.active_loop.texture_features`)
    → map the pool scene (a map COG with its class table) and its uncertainty (entropy or margin of the forest's
      class probabilities, one float band)
    → `eoscale sample --by mixed --uncertainty …` (uncertainty: the batch to label, and a stratified sample of
      the pool map beside it) or `eoscale sample --n …` (random: a proportional stratified sample, the baseline)
    → `eoscale label … --reference labels/<pool>_landcover.tif` → add the labelled points → refit.

Every round the held-out scene is mapped and assessed against its whole reference raster (a census, with
`eoscale assess`'s estimator): overall accuracy and mIoU per labels added, for each strategy from the same initial
random labels, for several seeds, the strategies' order turning within a seed. The headline is paired per seed:
each strategy's area under the learning curve (its mean OA and mIoU over the rounds after the shared first one)
minus random's, as medians over seeds and the share of seeds won. The mixed design's stratified part is also
assessed each round (`eoscale assess` reads only it) beside the pool map's census, to show that it stays an
unbiased estimate while the labelling points are anything but random.

    eoscale bench active --size 300 --initial 40 --batch 40 --rounds 8 --seeds 5
    eoscale bench active --strategies random,margin,margin:quotas=proportional,entropy:random=0.25 --interior 1

A strategy is `random`, `margin` or `entropy`, then `:key=value` options (random=share of each batch drawn at
random, per_class, interior, spacing, quotas=proportional|equal), defaulting to the options of the same names.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from eoscale.bench.active_loop import (
    Loop,
    assess,
    cli,
    halves,
    labelled_points,
    load_scene,
    parse_strategy,
    write_map,
)
from eoscale.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=300, help="synthetic scene size in 10 m pixels (default: 300)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic scenes (default: 0)")
    parser.add_argument("--initial", type=int, default=40, help="random labels to start from (default: 40)")
    parser.add_argument("--batch", type=int, default=40, help="labels added each round (default: 40)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of fit → sample → label (default: 8)")
    parser.add_argument("--seeds", type=int, default=5, help="repeats with other initial labels (default: 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed of the initial labels (default: 0)")
    parser.add_argument("--strategies", default="random,entropy",
                        help="comma-separated NAME[:key=value…] (see the module docstring); random is the baseline "
                             "(default: %(default)s)")
    parser.add_argument("--spacing", type=int, default=16, help="eoscale sample --spacing (default: 16)")
    parser.add_argument("--per-class", type=int, default=0, help="eoscale sample --per-class (default: 0)")
    parser.add_argument("--interior", type=int, default=1, help="eoscale sample --interior (default: 1)")
    parser.add_argument("--quotas", choices=("proportional", "equal"), help="eoscale sample --quotas (default: none)")
    parser.add_argument("--random-fraction", type=float, default=0.0,
                        help="share of each uncertainty batch drawn at random instead (default: 0)")
    parser.add_argument("--windows", default="3,7,15",
                        help="the forest also sees each band's mean and standard deviation over these windows "
                             "(pixels, comma-separated; 'none': the pixel alone; default: %(default)s)")
    parser.add_argument("--gap", type=int, default=16,
                        help="columns between the pool's labelled west half and its assessed east half (default: 16)")
    parser.add_argument("--reference-labels", type=int, default=4000,
                        help="also fit on this many random labels, the curves' ceiling (0: not; default: 4000)")
    parser.add_argument("--trees", type=int, default=100, help="trees of the loop's forest (default: 100)")
    parser.add_argument("--assessment-n", type=int, default=200,
                        help="the mixed sample's stratified points (assessment only, never trained on; default: 200)")


METRICS = ("oa", "miou", "held_out_oa", "held_out_miou")


def area(curve: list[dict], metric: str) -> float:
    """The area under a learning curve per label: the metric's mean over the rounds after the shared first one."""
    return float(np.mean([r[metric] for r in curve[1:]])) if len(curve) > 1 else curve[0][metric]


def summarise(runs: list[dict], labels: list[str]) -> dict:
    """Medians over seeds, per round; and each strategy against random, paired per seed (same initial labels):
    the area and the final value of each metric minus random's, per seed, their medians and the seeds won."""
    out: dict = {}
    for label in labels:
        curves = [r["rounds"] for r in runs if r["strategy"] == label]
        rounds = min(len(c) for c in curves)
        out[label] = {"labels": [int(np.median([c[i]["labels"] for c in curves])) for i in range(rounds)]}
        for metric in METRICS:
            out[label][f"{metric}_median"] = [float(np.median([c[i][metric] for c in curves])) for i in range(rounds)]
    if "random" not in out:
        return out
    baseline = {r["seed"]: r["rounds"] for r in runs if r["strategy"] == "random"}
    for label in labels:
        if label == "random":
            continue
        paired: dict = {"seeds": []}
        for r in runs:
            if r["strategy"] != label or r["seed"] not in baseline:
                continue
            b = baseline[r["seed"]]
            paired["seeds"].append(r["seed"])
            for metric in METRICS:
                paired.setdefault(f"{metric}_area", []).append(area(r["rounds"], metric) - area(b, metric))
                paired.setdefault(f"{metric}_final", []).append(r["rounds"][-1][metric] - b[-1][metric])
        vs = {"per_seed": paired}
        for key in (f"{m}_{k}" for m in METRICS for k in ("area", "final")):
            vs[f"{key}_gain_median"] = float(np.median(paired[key]))
            vs[f"{key}_seeds_won"] = f"{sum(v > 0 for v in paired[key])}/{len(paired[key])}"
        out[label]["vs_random"] = vs
    return out


def mixed_design_check(runs: list[dict]) -> dict | None:
    """The mixed samples' stratified estimates of the pool map's OA against its census: their mean error and how
    often the 95 % interval held the census (an unbiased design: about 0 and about 95 %)."""
    rounds = [r for run in runs for r in run["rounds"] if "pool_oa_estimate" in r]
    if not rounds:
        return None
    errors = np.array([r["pool_oa_estimate"] - r["pool_oa_census"] for r in rounds])
    intervals = [(e, r["pool_oa_ci95"]) for e, r in zip(errors, rounds, strict=True) if r["pool_oa_ci95"] is not None]
    covered = sum(abs(e) <= half for e, half in intervals)  # no interval where a stratum had a single point
    return {"samples": len(rounds), "mean_error": float(errors.mean()), "sd_error": float(errors.std()),
            "ci95_covered": f"{covered}/{len(intervals)}"}


def reference_forest(pool, assessed, held_out, table, work: Path, args) -> dict | None:
    """How far labels can take the loop's forest: fitted on `--reference-labels` random labels of the pool's west
    half, assessed as every round is (the ceiling the learning curves rise towards)."""
    if not args.reference_labels:
        return None
    folder = work / "reference"
    folder.mkdir()
    write_map(pool, np.where(pool.valid, table.codes[0], 0), folder / "west.tif", table)
    cli("sample", str(folder / "west.tif"), "--n", str(args.reference_labels), "--seed", "99", "--output",
        str(folder / "sample"))
    cli("label", str(folder / "sample.csv"), "--reference", str(pool.labels))
    rows, cols, codes = labelled_points(folder / "sample.csv", None)
    loop = Loop(None, pool, assessed, held_out, table, work, 0, 0, 0, rows, cols, codes, trees=args.trees)
    forest = loop.fit()
    figures = {"labels": int(len(codes)), **assess(forest, assessed, folder / "east.tif", table)}
    figures.update({f"held_out_{k}": v for k, v in assess(forest, held_out, folder / "held.tif", table).items()})
    print(f"reference: {figures['labels']} random labels → OA {figures['oa']:.3f} mIoU {figures['miou']:.3f}, "
          f"held-out OA {figures['held_out_oa']:.3f} mIoU {figures['held_out_miou']:.3f}", flush=True)
    return figures


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.classes import ClassTable
    from eoscale.synth import synthesize

    defaults = {"random": args.random_fraction, "per_class": args.per_class, "interior": args.interior,
                "spacing": args.spacing, "quotas": args.quotas}
    strategies = [parse_strategy(t.strip(), defaults) for t in args.strategies.split(",") if t.strip()]
    if not strategies or len({s.label for s in strategies}) < len(strategies):
        raise InputError(f"--strategies {args.strategies!r}: name each strategy once")
    if min(args.initial, args.batch, args.rounds, args.seeds, args.size, args.trees) < 1 \
            or not 0 <= args.random_fraction <= 1 or min(args.gap, args.reference_labels) < 0:
        raise InputError("--initial, --batch, --rounds, --seeds, --size and --trees are at least 1, "
                         "--random-fraction in [0, 1], --gap and --reference-labels at least 0")
    try:
        windows = () if args.windows == "none" else tuple(int(w) for w in args.windows.split(","))
    except ValueError:
        raise InputError(f"--windows {args.windows!r}: odd window sizes in pixels, comma-separated (3,7,15), "
                         "or 'none'") from None
    started = time.perf_counter()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-active-") as tmp:
        work = Path(tmp)
        data = synthesize(work / "data", scenes=2, size=args.size, seed=args.data_seed)
        table = ClassTable.load(data.class_table_path)
        pool, assessed = halves(load_scene(data.scene_paths[0], data.label_paths[0], windows=windows), args.gap)
        held_out = load_scene(data.scene_paths[1], data.label_paths[1], windows=windows)
        ceiling = reference_forest(pool, assessed, held_out, table, work, args)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            pool_map = work / f"initial_{seed}.tif"
            write_map(pool, np.where(pool.valid, table.codes[0], 0), pool_map, table)  # strata for a random draw
            cli("sample", str(pool_map), "--n", str(args.initial), "--seed", str(seed), "--output",
                str(work / f"initial_{seed}"))
            cli("label", str(work / f"initial_{seed}.csv"), "--reference", str(pool.labels))
            rows, cols, codes = labelled_points(work / f"initial_{seed}.csv", None)
            turn = seed % len(strategies)  # each strategy goes first in turn
            for strategy in strategies[turn:] + strategies[:turn]:
                loop = Loop(strategy, pool, assessed, held_out, table, work, seed, args.batch, args.assessment_n, rows, cols,
                            codes, trees=args.trees)
                curve = [loop.round(i, last=i == args.rounds - 1) for i in range(args.rounds)]
                runs.append({"strategy": strategy.label, "seed": seed, "rounds": curve})
                print(f"seed {seed} {strategy.label:<28} labels {curve[0]['labels']}→{curve[-1]['labels']}: OA "
                      + " ".join(f"{r['oa']:.3f}" for r in curve) + "  mIoU " + " ".join(f"{r['miou']:.3f}" for r in curve)
                      + f"  held-out OA {curve[-1]['held_out_oa']:.3f} mIoU {curve[-1]['held_out_miou']:.3f}", flush=True)
    labels = [s.label for s in strategies]
    summary = summarise(runs, labels)
    check = mixed_design_check(runs)
    if check:
        print(f"mixed design: the stratified estimate of the pool map's OA minus its census, mean {check['mean_error']:+.4f} "
              f"over {check['samples']} samples, the 95 % interval held it in {check['ci95_covered']}")
    for label, s in summary.items():
        print(f"{label:<28} median OA {[round(v, 3) for v in s['oa_median']]} mIoU {[round(v, 3) for v in s['miou_median']]}")
        if "vs_random" in s:
            for metric, name in (("oa", "OA"), ("miou", "mIoU"), ("held_out_oa", "held-out OA"),
                                 ("held_out_miou", "held-out mIoU")):
                vs = s["vs_random"]
                print(f"{'':<4}vs random, {name:<14} area {vs[f'{metric}_area_gain_median']:+.4f} "
                      f"({vs[f'{metric}_area_seeds_won']} seeds), final {vs[f'{metric}_final_gain_median']:+.4f} "
                      f"({vs[f'{metric}_final_seeds_won']})")
    options = ("size", "data_seed", "initial", "batch", "rounds", "seeds", "first_seed", "strategies", "spacing",
               "per_class", "interior", "quotas", "random_fraction", "windows", "gap", "reference_labels", "trees",
               "assessment_n")
    command = "eoscale bench active " + " ".join(f"--{o.replace('_', '-')} {getattr(args, o)}" for o in options
                                                 if getattr(args, o) is not None)
    figures = {
        "command": command,
        "setup": {"scene_size": args.size, "data_seed": args.data_seed, "initial_labels": args.initial,
                  "batch": args.batch, "rounds": args.rounds, "seeds": list(range(args.first_seed,
                                                                                args.first_seed + args.seeds)),
                  "strategies": [s.__dict__ for s in strategies], "assessment_n": args.assessment_n,
                  "model": f"random forest ({args.trees} trees) on the bands and NDVI"
                  + (f", their means and standard deviations over {'/'.join(map(str, windows))} px" if windows else ""),
                  "pool": f"scene_000: labels chosen in its west half, its east half ({args.gap} columns beyond) "
                          "the map assessed (census against its reference raster)",
                  "held_out": "scene_001 (census against its reference raster)"},
        "reference": ceiling, "summary": summary, "mixed_design": check, "runs": runs, "wall_seconds": time.perf_counter() - started,
        "pid": os.getpid(),
    }
    if args.record:
        seeds = {"scenes": args.data_seed, "initial_labels": list(range(args.first_seed, args.first_seed + args.seeds))}
        print(f"recorded in {record('active', figures, directory=args.record, seeds=seeds)}")
    return 0
