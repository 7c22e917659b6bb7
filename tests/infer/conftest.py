"""Checkpoints and scenes for the prediction tests.

`make_checkpoint` writes a checkpoint in the exact format `eoscale fit` writes (Lightning's `state_dict` with
the task's `model.` prefix, `hyper_parameters` = the task's hparams, the band contract under "eoscale"),
without training: the network is built by the training task itself from a fixed seed. Scenes come from
`tests.rasters.write_scene` (10 Sentinel-2 bands, UTM 32N, a nodata box).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from eoscale.bands import SENTINEL2_NAMES
from eoscale.classes import ClassTable
from eoscale.contract import CONTRACT_KEY, BandContract
from tests.rasters import CLASSES_CSV, write_scene

ROOT = Path(__file__).resolve().parents[2]
TILE = 32
TABLE = ClassTable.from_records(
    [dict(zip(("code", "name", "color"), line.split(","), strict=True)) for line in CLASSES_CSV.strip().splitlines()[1:]]
)
# roughly the statistics of tests.rasters scenes: 900 * (class + 1) + noise + 37 * band
MEAN = tuple(2250.0 + 37 * i for i in range(len(SENTINEL2_NAMES)))
STD = tuple(1000.0 for _ in SENTINEL2_NAMES)


def make_checkpoint(path: Path, *, backbone: str = "test_resnet", bands: tuple[str, ...] = SENTINEL2_NAMES,
                    tile: int = TILE, seed: int = 0) -> Path:
    from eoscale.train.task import SegmentationTask

    task = SegmentationTask(backbone=backbone, decoder_channels=8, in_chans=len(bands), num_classes=len(TABLE),
                            img_size=tile, init_seed=seed)
    torch.manual_seed(seed)
    network = task.configure_models()
    contract = BandContract(tuple(bands), MEAN[: len(bands)], STD[: len(bands)], tile, tuple(TABLE.to_records()))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"model.{k}": v for k, v in network.state_dict().items()},
        "hyper_parameters": dict(task.hparams),
        CONTRACT_KEY: contract.to_dict(),
    }, path)
    return path


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "best.ckpt")


def damaged_copy(scene: Path, folder: Path) -> Path:
    """`folder/damaged.tif`: `scene` with part of its pixel tiles overwritten (the header still reads)."""
    data = bytearray(scene.read_bytes())
    data[len(data) // 3 : len(data) // 2] = b"\x07" * (len(data) // 2 - len(data) // 3)
    damaged = folder / "damaged.tif"
    damaged.write_bytes(bytes(data))
    return damaged


@pytest.fixture(scope="session")
def scene(tmp_path_factory) -> Path:
    """An odd-sized scene (301 × 347) with a nodata box."""
    path = tmp_path_factory.mktemp("scene") / "odd.tif"
    write_scene(path, height=301, width=347, seed=3, nodata_box=(slice(40, 90), slice(0, 70)))
    return path


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory) -> str:
    """One SQLite MLflow store for the session (creating one takes about 10 s)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def read_map(path: Path) -> np.ndarray:
    import rasterio

    with rasterio.open(path) as src:
        return src.read(1)
