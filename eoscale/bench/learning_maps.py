"""The class probabilities of `eoscale bench learning --scene`'s models, on the pixels that are scored or that choose:
the held-out half mapped as a user maps it (`eoscale predict --probabilities`), the val tiles of the train half read
from the store as training validated them (`tile_probabilities`: choosing the stack's weight needs no map of the
whole train half, which cost a `predict` of each model a seed), and the scikit-learn baselines' forests on any
pixels (`pixel_forest`).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BASELINE_TREES = 200
BASELINE_PIXELS = 200_000  # pixels the scikit-learn baselines are fitted on, drawn from the train half
# the baselines' trees and scores do not depend on it (random_state fixes each tree): a seed's wall does; their
# fitting seconds are wall seconds on this many threads
BASELINE_JOBS = 2


def probabilities(checkpoint: Path, scene: Path, output: Path) -> np.ndarray:
    """`eoscale predict --probabilities` of `scene`: every class's probability, (classes, height, width)."""
    import shutil

    import rasterio

    shutil.rmtree(output, ignore_errors=True)  # the maps of an earlier run in the work folder
    argv = [sys.executable, "-m", "eoscale", "predict", "--checkpoint", str(checkpoint), "--input", str(scene),
            "--output", str(output), "--probabilities", "--device", "cpu", "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed:\n{done.stderr[-3000:]}")
    with rasterio.open(next(output.rglob("*_probabilities.tif"))) as src:
        return src.read().astype(np.float32) * src.scales[0]


def tile_probabilities(checkpoint: Path, store: str, shape: tuple[int, int], *, split: str = "val",
                       batch_size: int = 16) -> np.ndarray:
    """A checkpoint's class probabilities on the tiles of `split` of `store` (tiles as training reads them,
    `eoscale.bench.learning_fits.score_checkpoint`'s way), each put at its place (the store's `row_off`, `col_off`)
    on the grid of the scene the store was ingested from, `shape`; 0 off those tiles: (classes, height, width)."""
    import torch

    from eoscale.data.datamodule import TileDataModule
    from eoscale.infer.model import load_model

    model = load_model(checkpoint)
    data = TileDataModule(store, batch_size=batch_size, num_workers=0, bands=list(model.contract.bands), labels=True,
                          augment=False, predict_split=split)
    data.setup("predict")
    rows, cols = _tile_offsets(store)
    out = np.zeros((len(model.contract.classes), *shape), dtype=np.float32)
    with torch.inference_mode(), data.predict_dataloader() as loader:
        for batch in loader:
            tiles = batch["tile"].numpy()
            batch = data.normalise(batch)
            for tile, p in zip(tiles, model.network(batch["image"]).softmax(1).numpy(), strict=True):
                row, col = rows[tile], cols[tile]
                height, width = min(p.shape[1], shape[0] - row), min(p.shape[2], shape[1] - col)
                out[:, row:row + height, col:col + width] = p[:, :height, :width]
    return out


def _tile_offsets(store: str) -> tuple[np.ndarray, np.ndarray]:
    import xarray as xr

    from eoscale.store.schema import COL_OFF, ROW_OFF

    tiles = xr.open_zarr(store, consolidated=False)
    return tiles[ROW_OFF].values.astype(np.int64), tiles[COL_OFF].values.astype(np.int64)


def pixel_forest(train: np.ndarray, truth: np.ndarray, images: list[np.ndarray], *, nodata, means: tuple[int, ...],
                 classes: int, seed: int, where: list[np.ndarray | None] | None = None) -> tuple[list[np.ndarray], float]:
    """A scikit-learn random forest on the band values (and their means over `means` px windows) of up to
    `BASELINE_PIXELS` labelled pixels of `train` (`truth`: their class indices): its class probabilities
    `(classes, height, width)` on each of `images` (0 where they have no data, and off `where`'s pixels of each
    image if given: the features are still made of the whole image), and its fitting seconds."""
    from sklearn.ensemble import RandomForestClassifier

    from eoscale.classes import IGNORE_INDEX

    train_x, train_valid = _pixel_features(train, nodata, means)
    labelled = np.flatnonzero(train_valid.ravel() & (truth.ravel() != IGNORE_INDEX))
    picked = np.random.default_rng(seed).choice(labelled, min(BASELINE_PIXELS, labelled.size), replace=False)
    started = time.perf_counter()
    forest = RandomForestClassifier(BASELINE_TREES, n_jobs=BASELINE_JOBS, random_state=seed)
    forest.fit(train_x[picked], truth.ravel()[picked])
    seconds = time.perf_counter() - started
    mapped = []
    for image, keep in zip(images, where or [None] * len(images), strict=True):
        x, valid = _pixel_features(image, nodata, means)
        pixels = valid.ravel() if keep is None else valid.ravel() & keep.ravel()
        proba = np.zeros((valid.size, classes), dtype=np.float32)
        proba[np.ix_(pixels, forest.classes_)] = forest.predict_proba(x[pixels])
        mapped.append(proba.T.reshape(classes, *valid.shape))
    return mapped, seconds


def _pixel_features(image: np.ndarray, nodata, means: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    from scipy.ndimage import uniform_filter

    valid = np.ones(image.shape[1:], bool) if nodata is None else ~np.any(image == nodata, axis=0)
    bands = [b.astype(np.float32) for b in image]
    features = list(bands)
    for size in means:  # the mean of the valid pixels in the window
        weight = np.maximum(uniform_filter(valid.astype(np.float32), size, mode="constant"), 1e-6)
        features += [uniform_filter(np.where(valid, b, 0), size, mode="constant") / weight for b in bands]
    return np.stack(features, axis=-1).reshape(-1, len(features)), valid
