"""Per-pixel regression against a per-pixel random forest on synthetic tree heights (issue 35, continuous targets).

Not yet an `eoscale bench` command (eoscale/bench belongs to another part of the work): run from the repository
root, it writes its record to benchmarks/regression.json.

    python benchmarks/regression_vs_forest.py [--steps 300] [--scenes 4]

Synthetic scenes (`tests.rasters.write_scene`) and heights tied to them (`tests.heights`: by class and by the
5×5 texture of the scene, written at 20 m in EPSG:3035) are ingested with `--targets`; `RegressionTask`
(ResNet-18 + FPN, one output channel, MSE) trains `--steps` steps on CPU; a random forest regressor trains on
pixel spectra of the same training tiles. Both are scored (RMSE, MAE, bias, R²) on every test pixel with a value.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def scores(pred: np.ndarray, truth: np.ndarray) -> dict:
    err = pred - truth
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err))), "bias": float(err.mean()),
            "r2": float(1 - np.sum(err**2) / np.sum((truth - truth.mean()) ** 2)), "pixels": int(truth.size)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--scenes", type=int, default=4)
    parser.add_argument("--samples", type=int, default=50_000, help="training pixels of the random forest")
    args = parser.parse_args()

    import lightning as L
    import torch
    from sklearn.ensemble import RandomForestRegressor

    from eoscale.cli import main as eoscale
    from eoscale.data import open_store
    from eoscale.data.datamodule import TileDataModule
    from eoscale.train.tasks.regression import RegressionTask
    from tests.heights import write_heights
    from tests.rasters import CLASSES_CSV, write_labels, write_scene

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        scenes = []
        for i in range(args.scenes):
            scene = work / f"scene{i}.tif"
            classes = write_scene(scene, height=256, width=256, seed=i, origin=(310_000.0 + 4_000 * i, 5_650_000.0))
            write_labels(work / f"labels{i}.tif", scene, classes)
            write_heights(work / f"heights{i}.tif", scene)
            scenes.append(scene)
        (work / "classes.csv").write_text(CLASSES_CSV)
        store = work / "tiles.zarr"
        code = eoscale(["ingest", "--scenes", *map(str, scenes), "--targets", *[str(work / f"heights{i}.tif") for i in range(args.scenes)],
                        "--target-name", "tree_height", "--target-units", "m", "--output", str(store), "--tile-size", "32",
                        "--workers", "1", "--split", "0.7,0.15,0.15", "--split-block", "2", "-q"])
        assert code == 0

        ds = open_store(store)

        def pixels(split: str) -> tuple[np.ndarray, np.ndarray]:
            start, stop = ds.attrs["splits"][split]
            images = ds["images"][start:stop].isel(time=0).values
            targets = ds["targets"][start:stop].values
            x = images.transpose(0, 2, 3, 1).reshape(-1, images.shape[1]).astype(np.float32)
            y = targets.reshape(-1)
            keep = np.isfinite(y) & (x.max(axis=1) > 0)
            return x[keep], y[keep]

        x_train, y_train = pixels("train")
        x_test, y_test = pixels("test")
        rng = np.random.default_rng(0)
        pick = rng.choice(len(y_train), size=min(args.samples, len(y_train)), replace=False)
        started = time.perf_counter()
        forest = RandomForestRegressor(n_estimators=60, max_depth=20, n_jobs=-1, random_state=0)
        forest.fit(x_train[pick], y_train[pick])
        forest_seconds = time.perf_counter() - started
        forest_scores = {**scores(forest.predict(x_test), y_test), "fit_seconds": forest_seconds,
                         "train_pixels": int(len(pick))}
        mean_scores = scores(np.full_like(y_test, y_train.mean()), y_test)

        L.seed_everything(0)
        dm = TileDataModule(store, target="values", batch_size=16, num_workers=0)
        task = RegressionTask("resnet18", decoder_channels=64, lr=1e-3, weight_decay=0.01, warmup_steps=20)
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, val_check_interval=None,
                            check_val_every_n_epoch=10_000, num_sanity_val_steps=0, default_root_dir=str(work / "fit"))
        started = time.perf_counter()
        trainer.fit(task, datamodule=dm)
        fit_seconds = time.perf_counter() - started
        # scored on the same pixels as the forest: every test pixel with a value and data
        dm.setup("test")
        task.eval()
        preds, truths = [], []
        with torch.no_grad():
            for batch in dm.test_dataloader():
                batch = dm.normalise(batch)
                pred = task(batch["image"])[:, 0] * task.target_std + task.target_mean
                keep = torch.isfinite(batch["target"]) & (batch["image"].abs().amax(dim=1) > 0)
                preds.append(pred[keep].numpy())
                truths.append(batch["target"][keep].numpy())
        start, stop = ds.attrs["splits"]["test"]
        network_scores = {**scores(np.concatenate(preds), np.concatenate(truths)), "fit_seconds": fit_seconds,
                          "steps": args.steps, "batch_size": 16, "test_tiles": stop - start}
        # (the loader repeats at most a few tiles to fill its last batch: the pixel counts may differ slightly)

    record = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()},
        "data": {"scenes": args.scenes, "scene_px": "256x256", "tile": 32,
                 "target": "synthetic tree height (class + 5x5 texture), 20 m EPSG:3035, bilinear onto 10 m"},
        "network": {"model": "RegressionTask resnet18 + FPN (64), MSE", **network_scores},
        "forest": {"model": "random forest regressor on pixel spectra (60 trees, depth 20)", **forest_scores},
        "mean": {"model": "the training mean", **mean_scores},
    }
    path = ROOT / "benchmarks" / "regression.json"
    records = json.loads(path.read_text()) if path.exists() else []
    records.append(record)
    path.write_text(json.dumps(records, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("network", "forest", "mean")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
