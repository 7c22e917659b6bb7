"""`ForestTask`: a per-pixel random forest fitted through `eoscale fit`, the baseline every analyst runs first.

    eoscale fit --config configs/forest.yaml --data.init_args.store runs/tiles.zarr

One training epoch reads every training tile once, through the same `TileDataModule` (normalised band values,
nodata and ignored labels left out), and keeps a uniform sample of each class's pixels: at most
`pixels_per_class` of a class (a reservoir: each pixel draws a random key, the smallest keys stay), so rare
classes keep all their pixels and the dominant ones a bounded share. At the epoch's last batch scikit-learn fits a
`RandomForestClassifier` on the sample; `prior: store` (the default) weights each sampled pixel by its class's
pixels in the split over its sampled ones, so the forest learns the store's class prior as one fitted on every
pixel would, `prior: sample` leaves the capped sample's (rare classes favoured, more of them found, more false
alarms). Validation then scores it with the same metrics as a network (`val_miou`, per-class IoU), and the
checkpoint holds the forest as tensors (`eoscale.models.trees.TreeEnsemble`), its band contract and its model
contract, so `eoscale predict` maps scenes with it out of core and `eoscale assess` scores the maps.

One process only: a forest is fitted in one place (scikit-learn uses the machine's cores, `n_jobs`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from eoscale.classes import IGNORE_INDEX
from eoscale.contract import MODEL_KEY
from eoscale.errors import InputError
from eoscale.models.trees import TREE_MODELS, TreeEnsemble
from eoscale.train.tasks.base import BaseTask
from eoscale.train.tasks.segmentation import SegmentationLoss, SegmentationTask

Prior = Literal["store", "sample"]


class ForestTask(SegmentationTask):
    """A random forest on pixel band values, with a segmentation task's validation, metrics and checkpoints.

    Args:
        backbone: the kind of tree ensemble (`random_forest`, the one there is: `eoscale.models.trees.TREE_MODELS`).
        trees: the forest's trees (`n_estimators`).
        max_depth: the deepest a tree grows (None: until its leaves are pure); deeper trees mean larger
            checkpoints and slower maps.
        min_samples_leaf: the fewest sampled pixels in a leaf.
        max_features: bands tried at each split (`sqrt`, `log2`, a count, or None for all).
        pixels_per_class: the most pixels of one class the forest is fitted on (a uniform sample of the class).
        prior: `store` weights the sample back to the split's class frequencies, `sample` keeps the capped
            sample's (see the module's docstring).
        n_jobs: scikit-learn's processes for fitting (-1: every core).
        seed: the pixel sample's and the forest's random seed.
        in_chans, num_classes, img_size: taken from the datamodule when left out.
    """

    def __init__(
        self,
        backbone: str = "random_forest",
        *,
        trees: int = 100,
        max_depth: int | None = 20,
        min_samples_leaf: int = 1,
        max_features: str | int | None = "sqrt",
        pixels_per_class: int = 50_000,
        prior: Prior = "store",
        n_jobs: int = -1,
        seed: int = 0,
        in_chans: int | None = None,
        num_classes: int | None = None,
        img_size: int | None = None,
    ) -> None:
        BaseTask.__init__(self)  # not SegmentationTask's: a forest has no backbone, loss or optimizer options
        if backbone not in TREE_MODELS:
            raise InputError(f"backbone={backbone!r} is not a tree ensemble eoscale fits: use one of "
                             f"{', '.join(TREE_MODELS)}")
        if prior not in ("store", "sample"):
            raise InputError(f"prior={prior!r} is not one of 'store', 'sample'")
        for option, value in (("trees", trees), ("min_samples_leaf", min_samples_leaf),
                              ("pixels_per_class", pixels_per_class)):
            if not isinstance(value, int) or value < 1:
                raise InputError(f"{option}={value!r}: give a positive whole number")
        self.save_hyperparameters()
        self.automatic_optimization = False  # nothing to step: the forest is fitted once, at the epoch's end
        self.class_names: list[str] = []
        self._class_weights = None
        self._sample: dict[int, tuple[Tensor, Tensor]] = {}  # class -> (pixels (n, bands), reservoir keys (n,))
        self._seen = torch.zeros(0, dtype=torch.int64)  # pixels of each class read so far
        self._generator = torch.Generator().manual_seed(seed)
        self.fit_report: dict[str, Any] = {}

    def read_datamodule(self, datamodule: Any) -> None:
        if not getattr(datamodule, "labelled", True):
            raise InputError(f"tile store {datamodule.store!r} has no labels (ingested without --labels): a forest "
                             "is fitted on labelled pixels; ingest again with --labels")
        self.hparams.in_chans = int(datamodule.num_bands)
        self.hparams.num_classes = int(datamodule.num_classes)
        self.hparams.img_size = int(datamodule.tile_size)

    def configure_models(self) -> nn.Module:
        h = self.hparams
        for name in ("in_chans", "num_classes"):
            if h.get(name) is None:
                raise InputError(f"{name} is unknown: give a datamodule (data.store) or model.{name}")
        names = [c["name"] for c in self.contract.classes] if self.contract is not None else None
        self.class_names = names or [str(i) for i in range(h.num_classes)]
        self._seen = torch.zeros(h.num_classes, dtype=torch.int64)
        return TreeEnsemble(in_chans=h.in_chans, num_classes=h.num_classes)  # no trees until fitted

    def configure_finetune(self, model: nn.Module) -> nn.Module:
        return model

    def configure_losses(self) -> nn.Module:
        return SegmentationLoss(None)  # val_loss: the cross-entropy of the forest's probabilities

    def configure_optimizers(self) -> None:
        return None

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.trainer is not None and self.trainer.world_size > 1:
            raise InputError(f"a forest is fitted in one process, not {self.trainer.world_size}: run 'eoscale fit' "
                             "with trainer.devices 1 (scikit-learn uses every core of the machine)")

    def on_fit_end(self) -> None:
        pass

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        BaseTask.on_save_checkpoint(self, checkpoint)
        args = {"backbone": self.hparams.backbone, **self.model.shape_args()}
        checkpoint[MODEL_KEY] = {"args": args, "finetune": "full", "lora": None}
        checkpoint["eoscale_forest"] = dict(self.fit_report)  # what it was fitted on (plain data)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        raise InputError("a forest is not resumed or fine-tuned from a checkpoint: fit it again (it takes minutes)")

    # -- the pixel sample and the fit ----------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.keep_pixels(batch["image"], batch["label"])
        if batch_idx + 1 >= self.trainer.num_training_batches:  # the epoch's last batch: every tile was read
            self.fit_forest()

    def keep_pixels(self, image: Tensor, label: Tensor) -> None:
        """Add a batch's labelled pixels to each class's reservoir of at most `pixels_per_class`."""
        cap = int(self.hparams.pixels_per_class)
        pixels = image.detach().permute(0, 2, 3, 1).reshape(-1, image.shape[1]).float().cpu()
        labels = label.detach().reshape(-1).cpu()
        valid = labels != IGNORE_INDEX
        pixels, labels = pixels[valid], labels[valid]
        self._seen += torch.bincount(labels, minlength=len(self._seen))[: len(self._seen)]
        for cls in labels.unique().tolist():
            chosen = pixels[labels == cls]
            keys = torch.rand(len(chosen), generator=self._generator)
            if cls in self._sample:
                old, old_keys = self._sample[cls]
                chosen, keys = torch.cat([old, chosen]), torch.cat([old_keys, keys])
            if len(keys) > cap:
                keep = keys.topk(cap, largest=False).indices
                chosen, keys = chosen[keep], keys[keep]
            self._sample[cls] = (chosen, keys)

    def fit_forest(self) -> None:
        """Fit scikit-learn's forest on the sample and put its trees in the network."""
        from sklearn.ensemble import RandomForestClassifier

        if not self._sample:
            raise InputError("the training tiles hold no labelled pixel: check the store's labels and nodata")
        h = self.hparams
        classes = sorted(self._sample)
        x = torch.cat([self._sample[c][0] for c in classes]).numpy()
        y = np.concatenate([np.full(len(self._sample[c][0]), c) for c in classes])
        sampled = np.bincount(y, minlength=h.num_classes)
        weight = None
        if h.prior == "store":  # each sampled pixel stands for seen / sampled pixels of its class
            per_class = self._seen.numpy() / np.maximum(sampled, 1)
            weight = (per_class / per_class[classes].min())[y]
        forest = RandomForestClassifier(n_estimators=h.trees, max_depth=h.max_depth,
                                        min_samples_leaf=h.min_samples_leaf, max_features=h.max_features,
                                        n_jobs=h.n_jobs, random_state=h.seed)
        started = time.perf_counter()
        forest.fit(x, y, sample_weight=weight)
        seconds = time.perf_counter() - started
        self.model = TreeEnsemble.from_sklearn(forest, num_classes=h.num_classes).to(self.device)
        self.fit_report = {"pixels": int(len(y)), "pixels_per_class": sampled.tolist(),
                           "pixels_seen_per_class": self._seen.tolist(), "fit_seconds": seconds,
                           "nodes": int(sum(e.tree_.node_count for e in forest.estimators_)),
                           "depth": int(self.model.depth)}
        self.log_dict({"forest_pixels": float(len(y)), "forest_fit_seconds": seconds,
                       "forest_nodes": float(self.fit_report["nodes"])}, on_step=True, on_epoch=False)
        print(f"random forest: {h.trees} trees fitted on {len(y):,} pixels in {seconds:.1f} s "
              f"({self.fit_report['nodes']:,} nodes, depth {self.model.depth})")
