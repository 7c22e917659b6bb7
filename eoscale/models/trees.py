"""`TreeEnsemble`: a fitted scikit-learn random forest as a network of plain tensors (no pickle).

A per-pixel random forest on band values is the baseline a remote-sensing analyst compares any new tool with
(issue 38). eoscale keeps it a first-class model: `eoscale fit --config configs/forest.yaml` fits one
(`eoscale.train.tasks.forest.ForestTask`), and its checkpoint runs through `predict` and `assess` as a network
does. Checkpoints are read with `torch.load(weights_only=True)` and never unpickled, so the forest is stored as
its trees' arrays, exported from scikit-learn's `tree_` (`children_left`/`children_right`, `feature`,
`threshold`, `value`), padded to the largest tree, and evaluated here by a vectorised descent in torch:

    forest = RandomForestClassifier(...).fit(pixels, labels)
    ensemble = TreeEnsemble.from_sklearn(forest, num_classes=8)     # predict_proba(x) == ensemble.proba(x)
    build_model("random_forest", in_chans=4, num_classes=8, trees=T, nodes=M, depth=D)  # the empty shell

`forward` takes `(B, bands, H, W)` normalised images, as every eoscale network, and returns per-pixel
log-probabilities `(B, classes, H, W)`: the contract's softmax (`BandContract.activate`) gives the forest's
probabilities back, so blending, confidence and areas are the same code as for a network.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from eoscale.errors import InputError

TREE_MODELS = ("random_forest",)  # the `backbone` names `build_model` builds as a TreeEnsemble
LEAF = -1  # scikit-learn's TREE_LEAF: a leaf's children
PROBABILITY_FLOOR = 1e-7  # log(0) would make the softmax of a class the forest never gives NaN-prone


class TreeEnsemble(nn.Module):
    """Decision trees over pixel band values, averaged into class probabilities (a random forest).

    Buffers, one row a tree, padded to `nodes`: `feature` (the band a node splits on, -1 at a leaf), `threshold`
    (go left when the value is at most it), `left` and `right` (child node indices; a leaf points at itself, so
    a descent of `depth` steps stops there), and the parameter `value` (each node's class probabilities; the
    forest's "weights", kept as a parameter so code that asks a network for its device finds one).
    """

    def __init__(self, *, in_chans: int, num_classes: int, trees: int = 0, nodes: int = 1, depth: int = 0,
                 chunk_trees: int = 16):
        super().__init__()
        for option, value in (("in_chans", in_chans), ("num_classes", num_classes), ("nodes", nodes)):
            if not isinstance(value, int) or value < 1:
                raise InputError(f"{option}={value!r}: give a positive whole number")
        self.in_chans, self.num_classes, self.depth, self.chunk_trees = in_chans, num_classes, depth, chunk_trees
        self.register_buffer("feature", torch.full((trees, nodes), -1, dtype=torch.int64))
        self.register_buffer("threshold", torch.zeros(trees, nodes))
        self.register_buffer("left", torch.zeros(trees, nodes, dtype=torch.int64))
        self.register_buffer("right", torch.zeros(trees, nodes, dtype=torch.int64))
        self.value = nn.Parameter(torch.full((trees, nodes, num_classes), 1.0 / num_classes), requires_grad=False)

    @property
    def trees(self) -> int:
        return int(self.feature.shape[0])

    def shape_args(self) -> dict[str, int]:
        """`build_model`'s keywords that rebuild this ensemble's empty shell (the checkpoint's model contract)."""
        return {"in_chans": self.in_chans, "num_classes": self.num_classes, "trees": self.trees,
                "nodes": int(self.feature.shape[1]), "depth": int(self.depth)}

    @classmethod
    def from_sklearn(cls, forest, *, num_classes: int) -> TreeEnsemble:
        """The fitted `forest` (a `RandomForestClassifier` or `ExtraTreesClassifier`) as tensors; its classes
        (`forest.classes_`, class indices) become columns of `num_classes`, the classes it never saw get 0."""
        estimators = list(forest.estimators_)
        if not estimators:
            raise InputError("the forest has no trees: fit it first")
        columns = np.asarray(forest.classes_, dtype=np.int64)
        if columns.min() < 0 or columns.max() >= num_classes:
            raise InputError(f"the forest's classes {columns.tolist()} are not indices below num_classes={num_classes}")
        nodes = max(e.tree_.node_count for e in estimators)
        ensemble = cls(in_chans=int(forest.n_features_in_), num_classes=num_classes, trees=len(estimators),
                       nodes=nodes, depth=max(e.tree_.max_depth for e in estimators))
        feature = np.full((len(estimators), nodes), -1, dtype=np.int64)
        threshold = np.zeros((len(estimators), nodes), dtype=np.float32)
        left = np.zeros((len(estimators), nodes), dtype=np.int64)
        right = np.zeros((len(estimators), nodes), dtype=np.int64)
        value = np.zeros((len(estimators), nodes, num_classes), dtype=np.float32)
        for t, estimator in enumerate(estimators):
            tree, n = estimator.tree_, estimator.tree_.node_count
            leaf = tree.children_left == LEAF
            own = np.arange(n)
            feature[t, :n] = np.where(leaf, -1, tree.feature)
            # scikit-learn compares float32 values with a float64 threshold: x <= t exactly when x is at most the
            # largest float32 not above t, so that float32 threshold decides every pixel as scikit-learn does
            rounded = tree.threshold.astype(np.float32)
            too_high = rounded.astype(np.float64) > tree.threshold
            rounded[too_high] = np.nextafter(rounded[too_high], np.float32(-np.inf))
            threshold[t, :n] = np.where(leaf, 0.0, rounded)
            left[t, :n] = np.where(leaf, own, tree.children_left)
            right[t, :n] = np.where(leaf, own, tree.children_right)
            counts = tree.value[:, 0, :]  # (nodes, forest classes): fractions (scikit-learn >= 1.4) or counts
            value[t, :n][:, columns] = counts / np.maximum(counts.sum(1, keepdims=True), 1e-12)
        with torch.no_grad():
            for name, array in (("feature", feature), ("threshold", threshold), ("left", left), ("right", right)):
                getattr(ensemble, name).copy_(torch.from_numpy(array))
            ensemble.value.copy_(torch.from_numpy(value))
        return ensemble

    def proba(self, pixels: Tensor) -> Tensor:
        """Class probabilities `(N, classes)` of `(N, bands)` pixels: the mean of the trees' leaf values."""
        pixels = pixels.to(self.threshold.dtype)
        columns = pixels.T.contiguous()  # (bands, N): a gather along bands picks each pixel's split band
        n = pixels.shape[0]
        total = torch.zeros(n, self.num_classes, dtype=self.value.dtype, device=pixels.device)
        if self.trees == 0:
            return total + 1.0 / self.num_classes
        for start in range(0, self.trees, self.chunk_trees):
            rows = slice(start, start + self.chunk_trees)
            feature, threshold = self.feature[rows], self.threshold[rows]
            left, right = self.left[rows], self.right[rows]
            node = torch.zeros(feature.shape[0], n, dtype=torch.int64, device=pixels.device)
            for _ in range(self.depth):
                band = feature.gather(1, node).clamp_min(0)
                goes_left = columns.gather(0, band) <= threshold.gather(1, node)
                node = torch.where(goes_left, left.gather(1, node), right.gather(1, node))
            leaves = self.value[rows].gather(1, node.unsqueeze(-1).expand(-1, -1, self.num_classes))
            total += leaves.sum(0)
        return total / self.trees

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        if c != self.in_chans:
            raise InputError(f"the forest was fitted on {self.in_chans} bands, the input has {c}")
        probabilities = self.proba(x.permute(0, 2, 3, 1).reshape(-1, c))
        log = probabilities.clamp_min(PROBABILITY_FLOOR).log()
        return log.reshape(b, h, w, self.num_classes).permute(0, 3, 1, 2)
