"""Checkpoints in the exact format `eoscale fit` writes, without training.

`make_checkpoint` writes Lightning's `state_dict` with the task's `model.` prefix, `hyper_parameters` = the
task's hparams and the band contract under "eoscale"; the network is built by the training task itself from a
fixed seed. `TABLE` is the class table of `tests.rasters`, `MEAN`/`STD` roughly its scenes' statistics.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eoscale.bands import SENTINEL2_NAMES
from eoscale.classes import ClassTable
from eoscale.contract import CONTRACT_KEY, BandContract
from tests.rasters import CLASSES_CSV

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
