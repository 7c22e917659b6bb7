"""`eoscale predict --store STORE --split test`: a checkpoint's accuracy on a tile store's split.

Tiles come through `TileDataModule` exactly as training and `eoscale test` see them (the checkpoint's bands,
the store's normalisation, nodata as ignored labels); the metrics are the training task's own
(`eoscale.models.metrics`), so the names and values line up with `eoscale test`: `test_miou`,
`test_iou/<class>`, `test_accuracy`, `test_f1`; and `test_ece`, the expected calibration error of the probabilities
`predict` maps from (the checkpoint's temperature applied: `eoscale calibrate`). Tiles are predicted one by one,
not reassembled into scenes.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

from eoscale.classes import IGNORE_INDEX
from eoscale.contract import BandContract
from eoscale.errors import InputError
from eoscale.infer.model import PredictionModel
from eoscale.models.metrics import segmentation_metrics
from eoscale.models.uncertainty import CalibrationBins


def evaluate(model: PredictionModel, store: str | Path, *, split: str = "test", batch_size: int = 16,
             num_workers: int = 0) -> dict[str, float]:
    """Per-class IoU, mIoU, accuracy and F1 of `model` on split `split` of the tile store `store`."""
    if model.contract.target != "classes":
        raise InputError(f"checkpoint {str(model.checkpoint)!r} maps {model.contract.target!r}: --store evaluates "
                         "class models only (IoU per class)")
    from eoscale.data.datamodule import TileDataModule

    data = TileDataModule(store, batch_size=batch_size, num_workers=num_workers, bands=list(model.contract.bands),
                          labels=True, augment=False, predict_split=split)
    # the same check as fine-tuning: same bands, classes, tile size and normalisation as the training store
    model.contract.check(BandContract.from_datamodule(data), what=f"checkpoint {str(model.checkpoint)!r}")
    data.setup("predict")
    metrics = segmentation_metrics(len(model.classes.classes)).clone(prefix=f"{split}_")
    calibration = CalibrationBins()
    device = model.device
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    with torch.inference_mode():
        with data.predict_dataloader() as loader:
            for batch in loader:
                # compact batches (uint16 images, uint8 labels) become model input on the device, as in training
                batch = data.normalise({k: v.to(device, non_blocking=True) for k, v in batch.items()})
                with autocast:
                    logits = model.network(batch["image"])
                metrics.update(logits.argmax(dim=1).cpu(), batch["label"].cpu())
                probs = model.contract.activate(logits).cpu().movedim(1, 0).numpy()  # (classes, tiles, y, x)
                calibration.add_probs(probs, batch["label"].cpu().numpy(), ignore_index=IGNORE_INDEX)
        values = metrics.compute()
    per_class = values.pop(f"{split}_iou")
    result = {k: float(v) for k, v in values.items()}
    for c, value in zip(model.classes.classes, per_class, strict=True):
        result[f"{split}_iou/{c.name}"] = float(value)
    result[f"{split}_ece"] = calibration.ece()
    return result
