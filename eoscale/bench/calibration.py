"""`eoscale bench calibration`: does temperature scaling lower the calibration error, and is the map unsure where it
is wrong?

End to end with the real commands, on synthetic data whose truth is known:

1. `eoscale synth` scenes and `eoscale ingest` them into a tile store (60/20/20 % train/val/test, in blocks of 2×2
   tiles, so val and test hold enough pixels for a 15-bin ECE);
2. `eoscale fit` (configs/smoke.yaml, `--steps` steps) with the fit's own calibration off, so its checkpoint is the
   uncalibrated baseline;
3. `eoscale calibrate` that checkpoint on the store's **val** split (a second checkpoint with the temperature);
4. both scored on the **test** split, which the temperature never saw: expected calibration error (15 bins), NLL,
   and, for the calibrated one, the normalised entropy of the probabilities on wrongly and rightly classified
   pixels, and the AUROC of entropy as a detector of errors (0.5: no better than chance);
5. `eoscale predict --uncertainty entropy` with the calibrated checkpoint on a scene synthesised apart (another
   seed) and compared with its label raster: the uncertainty COG is validated (`rio cogeo validate`), and its
   entropy on wrong and right pixels, and its AUROC for the errors, are measured the same way.

The baseline of every ratio is measured in the same run (the uncalibrated checkpoint on the same pixels).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _eoscale(*argv: str) -> str:
    """Run an eoscale command as a user would; its stdout, or a RuntimeError with its stderr's tail."""
    done = subprocess.run([sys.executable, "-m", "eoscale", *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                      os.environ.get("PYTHONPATH")]))})
    if done.returncode != 0:
        raise RuntimeError(f"eoscale {argv[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def separation(uncertainty: np.ndarray, wrong: np.ndarray) -> dict:
    """Mean uncertainty of wrong and right pixels, and the AUROC of uncertainty as a score for wrong pixels."""
    from sklearn.metrics import roc_auc_score

    uncertainty, wrong = np.asarray(uncertainty, dtype=np.float64).ravel(), np.asarray(wrong, dtype=bool).ravel()
    both = wrong.any() and (~wrong).any()
    return {"pixels": int(wrong.size), "error_rate": float(wrong.mean()) if wrong.size else None,
            "mean_wrong": float(uncertainty[wrong].mean()) if wrong.any() else None,
            "mean_right": float(uncertainty[~wrong].mean()) if (~wrong).any() else None,
            "auroc_errors": float(roc_auc_score(wrong, uncertainty)) if both else None}


def score_split(checkpoint: Path, store: Path, *, split: str, pixels: int, bins: int) -> dict:
    """ECE, NLL and entropy separation of `checkpoint` (its contract's temperature applied) on `split`."""
    import torch

    from eoscale.infer.calibrate import sample_split
    from eoscale.infer.model import load_model
    from eoscale.models.calibration import nll
    from eoscale.models.uncertainty import CalibrationBins, entropy

    model = load_model(checkpoint)
    sample = sample_split(model, store, split=split, limit=pixels, batch_size=16)
    logits, labels = sample.tensors()
    probs = torch.softmax(logits / model.contract.temperature, 1).T.numpy()  # as BandContract.activate
    found = CalibrationBins(bins)
    found.add_probs(probs, labels.numpy())
    wrong = probs.argmax(axis=0) != labels.numpy()
    return {"temperature": model.contract.temperature, "ece": found.ece(), "accuracy": found.accuracy(),
            "nll": nll(logits, labels, temperature=model.contract.temperature), "reliability": found.reliability(),
            "entropy": separation(entropy(probs), wrong)}


def score_map(maps: Path, scene_id: str, labels: Path, classes: Path) -> dict:
    """The uncertainty COG of `predict` against the scene's label raster (reprojected onto the map's grid, nearest)."""
    import rasterio
    from rasterio.warp import Resampling, reproject
    from rio_cogeo.cogeo import cog_validate

    from eoscale.classes import ClassTable

    table = ClassTable.load(classes)
    landcover, uncertainty = maps / f"{scene_id}_landcover.tif", maps / f"{scene_id}_uncertainty.tif"
    valid_cog, errors, _ = cog_validate(str(uncertainty), quiet=True)
    with rasterio.open(landcover) as src:
        mapped, nodata = src.read(1), src.nodata
        truth = np.zeros(mapped.shape, dtype=np.int32)
        with rasterio.open(labels) as lab:
            reproject(lab.read(1).astype(np.int32), truth, src_transform=lab.transform, src_crs=lab.crs,
                      dst_transform=src.transform, dst_crs=src.crs, resampling=Resampling.nearest, src_nodata=0,
                      dst_nodata=0)
    with rasterio.open(uncertainty) as src:
        percent = src.read(1)
    known = (mapped != nodata) & np.isin(truth, table.codes) & (percent != 255)
    result = separation(percent[known] / 100.0, mapped[known] != truth[known])
    return {"cog_valid": bool(valid_cog), "cog_errors": errors, **result}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenes", type=int, default=3, help="synthetic scenes in the store (default: 3)")
    parser.add_argument("--size", type=int, default=320, help="scene size in pixels (default: 320)")
    parser.add_argument("--steps", type=int, default=150, help="training steps of the fit (default: 150)")
    parser.add_argument("--batch-size", type=int, default=8, help="tiles a training step (default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic scenes (default: 0)")
    parser.add_argument("--pixels", type=int, default=1_000_000, help="pixels of a split scored at most")
    parser.add_argument("--bins", type=int, default=15, help="confidence bins of the ECE (default: 15)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="work in DIR and keep it (default: a temporary folder)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-calibration-") as tmp:
        work = Path(args.keep or tmp)
        data, unseen, store = work / "data", work / "unseen", work / "tiles.zarr"
        print(f"synth {args.scenes} scenes of {args.size} px and ingest them …")
        _eoscale("synth", str(data), "--scenes", str(args.scenes), "--size", str(args.size), "--seed", str(args.seed))
        _eoscale("synth", str(unseen), "--scenes", "1", "--size", str(args.size), "--seed", str(args.seed + 1000))
        _eoscale("ingest", "--scenes", *sorted(map(str, (data / "scenes").glob("*.tif"))),
                 "--labels", *sorted(map(str, (data / "labels").glob("*.tif"))), "--classes",
                 str(data / "classes.csv"), "--output", str(store), "--split", "0.6,0.2,0.2", "--split-block", "2")
        print(f"fit configs/smoke.yaml for {args.steps} steps (its own calibration off) …")
        _eoscale("fit", "--config", "configs/smoke.yaml", "--data.init_args.store", str(store),
                 "--data.init_args.batch_size", str(args.batch_size), "--trainer.max_steps", str(args.steps), "--trainer.val_check_interval", str(args.steps),
                 "--trainer.default_root_dir", str(work / "fit"), "--calibration.enabled", "false",
                 "--model.init_args.warmup_steps", str(min(20, args.steps // 5)))
        checkpoint = max((work / "fit").rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        calibrated = work / "calibrated.ckpt"
        print("eoscale calibrate on the val split …")
        print(_eoscale("calibrate", str(checkpoint), "--store", str(store), "--split", "val", "--output",
                       str(calibrated), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}").strip())
        print("score both on the test split …")
        before = score_split(checkpoint, store, split="test", pixels=args.pixels, bins=args.bins)
        after = score_split(calibrated, store, split="test", pixels=args.pixels, bins=args.bins)
        print("predict --uncertainty entropy on a scene synthesised apart …")
        (scene,) = sorted((unseen / "scenes").glob("*.tif"))
        (labels,) = sorted((unseen / "labels").glob("*.tif"))
        _eoscale("predict", "--checkpoint", str(calibrated), "--input", str(scene), "--output", str(work / "maps"),
                 "--uncertainty", "entropy", "--no-progress", "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}")
        unseen_map = score_map(work / "maps", scene.stem, labels, unseen / "classes.csv")
    figures = {
        "data": {"scenes": args.scenes, "size": args.size, "seed": args.seed, "fit_steps": args.steps,
                 "batch_size": args.batch_size,
                 "config": "configs/smoke.yaml", "temperature_fitted_on": "val", "scored_on": "test"},
        "uncalibrated": before, "calibrated": after,
        "ece_ratio_calibrated_to_uncalibrated": after["ece"] / before["ece"] if before["ece"] else None,
        "unseen_scene_uncertainty_cog": unseen_map,
        "seconds": time.perf_counter() - started,
    }
    e = after["entropy"]
    print(f"temperature {after['temperature']:.3f}; test ECE {before['ece']:.4f} -> {after['ece']:.4f} "
          f"(x{figures['ece_ratio_calibrated_to_uncalibrated']:.2f}), NLL {before['nll']:.4f} -> {after['nll']:.4f}")
    print(f"test entropy on wrong pixels {e['mean_wrong']:.3f}, right {e['mean_right']:.3f}, AUROC for errors "
          f"{e['auroc_errors']:.3f} (error rate {e['error_rate']:.3f})")
    print(f"unseen scene's uncertainty COG (valid: {unseen_map['cog_valid']}): entropy on wrong "
          f"{unseen_map['mean_wrong']:.3f}, right {unseen_map['mean_right']:.3f}, AUROC {unseen_map['auroc_errors']:.3f}")
    if args.record:
        seeds = {"scenes": args.seed, "unseen_scene": args.seed + 1000}
        print(f"recorded in {record('calibration', figures, directory=args.record, seeds=seeds)}")
    return 0
