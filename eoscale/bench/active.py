"""`eoscale bench active`: does labelling the map's most uncertain pixels teach a model more per label than
labelling random ones?

The loop is eoscale's own active-learning path, run on a synthetic scene set (a pool scene to label, a held-out
scene to assess; labels from the synthetic reference rasters, EPSG:3035 at 20 m, as a person's would come):

    fit a per-pixel random forest on the labelled points' spectra (as `eoscale bench learning`'s baseline)
    → map the pool scene (a map COG with its class table) and its uncertainty (entropy or margin of the forest's
      class probabilities, one float band)
    → `eoscale sample --by mixed --uncertainty …` (uncertainty: the batch to label, and a stratified sample of
      the pool map beside it) or `eoscale sample --n …` (random: a proportional stratified sample, the baseline)
    → `eoscale label … --reference labels/<pool>_landcover.tif` → add the labelled points → refit.

Every round the held-out scene is mapped and assessed against its whole reference raster (a census, with
`eoscale assess`'s estimator): overall accuracy and mIoU per labels added, for each strategy from the same initial
random labels, for several seeds, the strategies alternating within a seed. The mixed design's stratified part is
also assessed each round (`eoscale assess` reads only it) beside the pool map's census, to show that it stays an
unbiased estimate while the labelling points are anything but random.

    eoscale bench active --rounds 8 --batch 40 --seeds 3
    eoscale bench active --strategies random,margin,entropy --random-fraction 0.25
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio

from eoscale.errors import InputError

STRATEGIES = ("random", "margin", "entropy")


@dataclass(frozen=True)
class Scene:
    """A scene's spectra on its grid, where it has data, and the paths the loop needs."""

    image: Path
    labels: Path
    pixels: np.ndarray  # (height, width, bands) float32
    valid: np.ndarray  # (height, width) bool
    profile: dict


def load_scene(image: Path, labels: Path, *, context: int) -> Scene:
    """The scene's spectra per pixel, and with `context` > 1 also each band's mean over a context×context window
    (a per-pixel model that sees its neighbourhood, as a forest on texture features would)."""
    from scipy.ndimage import uniform_filter

    with rasterio.open(image) as src:
        data = src.read(masked=True)
        profile = src.profile
    valid = ~np.ma.getmaskarray(data).any(axis=0)
    bands = data.filled(0).astype(np.float32)
    if context > 1:
        bands = np.concatenate([bands, uniform_filter(bands, size=(1, context, context), mode="nearest")])
    return Scene(image, labels, np.moveaxis(bands, 0, -1), valid, profile)


COMMANDS = {"sample": "eoscale.maps.sample_command", "label": "eoscale.maps.label_command",
            "assess": "eoscale.maps.assess_command"}


def cli(command: str, *argv: str) -> None:
    """Run an eoscale command's module in this process (as `eoscale COMMAND …` would), its report kept off the
    bench's output."""
    import importlib

    module = importlib.import_module(COMMANDS[command])
    parser = argparse.ArgumentParser(prog=f"eoscale {command}")
    module.configure(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = module.run(parser.parse_args(list(argv)))
    if code:
        raise RuntimeError(f"eoscale {command} {' '.join(argv)} failed ({code}):\n{out.getvalue()[-2000:]}")


def write_map(scene: Scene, codes: np.ndarray, path: Path, table) -> None:
    """A land-cover map on the scene's grid, with the class table and nodata tags `eoscale predict` writes."""
    from eoscale.infer.outputs import MapEncoding, map_tags

    profile = {**scene.profile, "driver": "GTiff", "count": 1, "dtype": "uint8", "nodata": 0, "tiled": True,
               "blockxsize": 256, "blockysize": 256, "compress": "deflate", "interleave": "band"}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(codes.astype(np.uint8), 1)
        dataset, band = map_tags(table, MapEncoding.from_table(table), {})
        dst.update_tags(**{**dataset, "EOSCALE_NODATA": "0"})
        dst.update_tags(1, **band)


def write_uncertainty(scene: Scene, values: np.ndarray, path: Path) -> None:
    profile = {**scene.profile, "driver": "GTiff", "count": 1, "dtype": "float32", "nodata": float("nan"),
               "tiled": True, "blockxsize": 256, "blockysize": 256, "compress": "deflate", "interleave": "band"}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(values.astype(np.float32), 1)


def predict(forest, scene: Scene, measure: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Class codes (0 where the scene has no data) and, with a `measure`, the uncertainty (NaN off the data)."""
    from eoscale.maps.uncertain import entropy, margin

    probabilities = forest.predict_proba(scene.pixels[scene.valid])
    codes = np.zeros(scene.valid.shape, dtype=np.uint8)
    codes[scene.valid] = forest.classes_[probabilities.argmax(axis=1)]
    if measure is None:
        return codes, None
    uncertainty = np.full(scene.valid.shape, np.nan, dtype=np.float32)
    uncertainty[scene.valid] = (entropy if measure == "entropy" else margin)(probabilities.T)
    return codes, uncertainty


def census(map_path: Path, labels: Path) -> dict:
    """Overall accuracy and mIoU of a map against its whole reference raster (eoscale assess's census)."""
    from eoscale.maps.classmap import open_map
    from eoscale.maps.estimate import stratified
    from eoscale.maps.reference import census_reference

    reference = census_reference(open_map(map_path), labels)
    estimates = stratified(reference.counts, reference.areas.weights, 1.0, census=True)
    n = reference.counts.astype(np.float64)
    union = n.sum(0) + n.sum(1) - np.diag(n)
    present = union > 0
    return {"oa": float(estimates.overall), "miou": float((np.diag(n)[present] / union[present]).mean())}


def labelled_points(csv: Path, scene: Scene, only: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, col, reference code) of the labelled points of a sample (`only`: one set of a mixed sample)."""
    import pandas as pd

    table = pd.read_csv(csv, dtype={"reference": "Int64"})
    if only is not None:
        table = table[table["set"] == only]
    table = table[table["reference"].notna()]
    return (table["row"].to_numpy(np.int64), table["col"].to_numpy(np.int64),
            table["reference"].to_numpy(np.int64))


@dataclass
class Loop:
    """One strategy's run from the initial labels; `step` adds one batch."""

    strategy: str
    pool: Scene
    held_out: Scene
    table: object
    work: Path
    seed: int
    batch: int
    spacing: int
    per_class: int
    random_fraction: float
    assessment_n: int
    rows: np.ndarray
    cols: np.ndarray
    codes: np.ndarray

    def fit(self):
        from sklearn.ensemble import RandomForestClassifier

        forest = RandomForestClassifier(n_estimators=100, min_samples_leaf=1, n_jobs=1, random_state=self.seed)
        forest.fit(self.pool.pixels[self.rows, self.cols], self.codes)
        return forest

    def round(self, index: int) -> dict:
        """Fit, map, assess the held-out scene, then choose, label and add the next batch."""
        folder = self.work / f"{self.strategy}_{self.seed}_{index:02d}"
        folder.mkdir(parents=True)
        started = time.perf_counter()
        forest = self.fit()
        held_codes, _ = predict(forest, self.held_out, None)
        write_map(self.held_out, held_codes, folder / "held_out.tif", self.table)
        figures = {"round": index, "labels": int(len(self.codes)), **census(folder / "held_out.tif", self.held_out.labels)}
        measure = None if self.strategy == "random" else self.strategy
        pool_codes, uncertainty = predict(forest, self.pool, measure)
        pool_map = folder / "pool.tif"
        write_map(self.pool, pool_codes, pool_map, self.table)
        take_random = self.batch if measure is None else int(round(self.batch * self.random_fraction))
        new = []
        if measure is not None and self.batch - take_random > 0:
            write_uncertainty(self.pool, uncertainty, folder / "uncertainty.tif")
            cli("sample", str(pool_map), "--by", "mixed", "--uncertainty", str(folder / "uncertainty.tif"),
                "--labelling", str(self.batch - take_random), "--n", str(self.assessment_n), "--allocation",
                "min-per-class", "5", "--spacing", str(self.spacing), "--per-class", str(self.per_class),
                "--seed", str(self.seed * 1000 + index), "--output", str(folder / "mixed"))
            cli("label", str(folder / "mixed.csv"), "--reference", str(self.pool.labels))
            new.append(labelled_points(folder / "mixed.csv", self.pool, "labelling"))
            figures.update(mixed_assessment(folder, pool_map, self.pool.labels))
        if take_random:
            cli("sample", str(pool_map), "--n", str(take_random), "--seed", str(self.seed * 1000 + index + 500),
                "--output", str(folder / "random"))
            cli("label", str(folder / "random.csv"), "--reference", str(self.pool.labels))
            new.append(labelled_points(folder / "random.csv", self.pool, None))
        for rows, cols, codes in new:
            self.rows, self.cols = np.concatenate([self.rows, rows]), np.concatenate([self.cols, cols])
            self.codes = np.concatenate([self.codes, codes])
        figures["seconds"] = time.perf_counter() - started
        return figures


def mixed_assessment(folder: Path, pool_map: Path, labels: Path) -> dict:
    """`eoscale assess` of the pool map from the mixed sample (its stratified part only), beside the pool census.
    The few points on the reference raster's nodata (its edges, in another CRS) are dropped, as a labeller would
    drop points they cannot label."""
    import pandas as pd

    table = pd.read_csv(folder / "mixed.csv", dtype=str, keep_default_na=False)
    table[table["reference"] != ""].to_csv(folder / "mixed_labelled.csv", index=False)
    cli("assess", str(pool_map), "--reference", str(folder / "mixed_labelled.csv"), "--design",
        str(folder / "mixed_design.json"), "--output", str(folder / "assessment"), "--no-tracking")
    report = json.loads((folder / "assessment" / "assessment.json").read_text())
    oa = report["overall_accuracy"]
    return {"pool_oa_estimate": oa["estimate"], "pool_oa_ci95": oa["ci95"],
            "pool_oa_census": census(pool_map, labels)["oa"]}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=400, help="synthetic scene size in 10 m pixels (default: 400)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic scenes (default: 0)")
    parser.add_argument("--initial", type=int, default=60, help="random labels to start from (default: 60)")
    parser.add_argument("--batch", type=int, default=30, help="labels added each round (default: 30)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of fit → sample → label (default: 8)")
    parser.add_argument("--seeds", type=int, default=3, help="repeats with other initial labels (default: 3)")
    parser.add_argument("--strategies", default="random,margin",
                        help=f"comma-separated, of {', '.join(STRATEGIES)}; random is the baseline (default: %(default)s)")
    parser.add_argument("--spacing", type=int, default=8, help="eoscale sample --spacing (default: 8)")
    parser.add_argument("--per-class", type=int, default=0, help="eoscale sample --per-class (default: 0)")
    parser.add_argument("--random-fraction", type=float, default=0.0,
                        help="share of each uncertainty batch drawn at random instead (default: 0)")
    parser.add_argument("--context", type=int, default=5,
                        help="the forest also sees each band's mean over CONTEXT×CONTEXT pixels (0: spectra only; "
                             "default: 5)")
    parser.add_argument("--assessment-n", type=int, default=200,
                        help="the mixed sample's stratified points (assessment only, never trained on; default: 200)")


def summarise(runs: list[dict], strategies: list[str]) -> dict:
    """Medians over seeds, per round, and each strategy's mean over the rounds after the first (area under the
    learning curve per label) against random's."""
    out: dict = {}
    for strategy in strategies:
        curves = [r["rounds"] for r in runs if r["strategy"] == strategy]
        rounds = min(len(c) for c in curves)
        out[strategy] = {
            "labels": [curves[0][i]["labels"] for i in range(rounds)],
            "oa_median": [float(np.median([c[i]["oa"] for c in curves])) for i in range(rounds)],
            "miou_median": [float(np.median([c[i]["miou"] for c in curves])) for i in range(rounds)],
        }
        out[strategy]["oa_mean_after_initial"] = float(np.mean(out[strategy]["oa_median"][1:]))
        out[strategy]["miou_mean_after_initial"] = float(np.mean(out[strategy]["miou_median"][1:]))
    if "random" in out:
        for strategy in strategies:
            if strategy != "random":
                s, r = out[strategy], out["random"]
                s["vs_random"] = {
                    "oa_final_gain": s["oa_median"][-1] - r["oa_median"][-1],
                    "miou_final_gain": s["miou_median"][-1] - r["miou_median"][-1],
                    "oa_mean_gain": s["oa_mean_after_initial"] - r["oa_mean_after_initial"],
                    "miou_mean_gain": s["miou_mean_after_initial"] - r["miou_mean_after_initial"],
                    "seeds_won_final_oa": sum(
                        a["rounds"][-1]["oa"] > b["rounds"][-1]["oa"] for a in runs for b in runs
                        if a["strategy"] == strategy and b["strategy"] == "random" and a["seed"] == b["seed"]),
                }
    return out


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record
    from eoscale.classes import ClassTable
    from eoscale.synth import synthesize

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown or not strategies:
        raise InputError(f"--strategies {args.strategies!r}: choose among {', '.join(STRATEGIES)}")
    if min(args.initial, args.batch, args.rounds, args.seeds, args.size) < 1 or not 0 <= args.random_fraction <= 1:
        raise InputError("--initial, --batch, --rounds, --seeds and --size are at least 1, --random-fraction in [0, 1]")
    started = time.perf_counter()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-active-") as tmp:
        work = Path(tmp)
        data = synthesize(work / "data", scenes=2, size=args.size, seed=args.data_seed)
        table = ClassTable.load(data.class_table_path)
        pool = load_scene(data.scene_paths[0], data.label_paths[0], context=args.context)
        held_out = load_scene(data.scene_paths[1], data.label_paths[1], context=args.context)
        for seed in range(args.seeds):
            pool_map = work / f"initial_{seed}.tif"
            write_map(pool, np.where(pool.valid, table.codes[0], 0), pool_map, table)  # strata for a random draw
            cli("sample", str(pool_map), "--n", str(args.initial), "--seed", str(seed), "--output",
                str(work / f"initial_{seed}"))
            cli("label", str(work / f"initial_{seed}.csv"), "--reference", str(pool.labels))
            rows, cols, codes = labelled_points(work / f"initial_{seed}.csv", pool, None)
            order = strategies if seed % 2 == 0 else strategies[::-1]  # alternating
            for strategy in order:
                loop = Loop(strategy, pool, held_out, table, work, seed, args.batch, args.spacing, args.per_class,
                            args.random_fraction, args.assessment_n, rows, cols, codes)
                curve = [loop.round(i) for i in range(args.rounds)]
                runs.append({"strategy": strategy, "seed": seed, "rounds": curve})
                last = curve[-1]
                print(f"seed {seed} {strategy:<8} labels {curve[0]['labels']}→{last['labels']}: held-out OA "
                      f"{curve[0]['oa']:.3f}→{last['oa']:.3f}, mIoU {curve[0]['miou']:.3f}→{last['miou']:.3f}",
                      flush=True)
    summary = summarise(runs, strategies)
    for strategy, s in summary.items():
        gain = s.get("vs_random")
        print(f"{strategy:<8} median OA per round {[round(v, 3) for v in s['oa_median']]}"
              + (f"  vs random: final OA {gain['oa_final_gain']:+.3f}, mean OA {gain['oa_mean_gain']:+.3f}, "
                 f"final mIoU {gain['miou_final_gain']:+.3f}" if gain else ""))
    figures = {
        "setup": {"scene_size": args.size, "data_seed": args.data_seed, "initial_labels": args.initial,
                  "batch": args.batch, "rounds": args.rounds, "seeds": args.seeds, "spacing": args.spacing,
                  "per_class": args.per_class, "random_fraction": args.random_fraction,
                  "assessment_n": args.assessment_n, "model": "random forest (100 trees) on pixel spectra"
                  + (f" and their {args.context}×{args.context} means" if args.context > 1 else ""),
                  "pool": "scene_000", "held_out": "scene_001 (census against its reference raster)"},
        "summary": summary, "runs": runs, "wall_seconds": time.perf_counter() - started,
        "pid": os.getpid(),
    }
    if args.record:
        print(f"recorded in {record('active', figures, directory=args.record)}")
    return 0
