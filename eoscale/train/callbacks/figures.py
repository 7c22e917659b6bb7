"""The PNGs a training run logs: a confusion matrix and image / label / prediction panels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from eoscale.classes import IGNORE_INDEX


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # compute nodes have no display
    import matplotlib.pyplot as plt

    return plt


def confusion_png(matrix: np.ndarray, names: list[str], path: str | Path) -> Path:
    """Row-normalised confusion matrix (rows: reference, columns: prediction) with the counts written in."""
    plt = _pyplot()
    matrix = np.asarray(matrix, dtype=float)
    n = matrix.shape[0]
    names = names if len(names) == n else [str(i) for i in range(n)]
    rows = matrix.sum(axis=1, keepdims=True)
    share = np.divide(matrix, rows, out=np.zeros_like(matrix), where=rows > 0)
    size = 1.2 + 0.6 * n
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("prediction")
    ax.set_ylabel("reference")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{int(matrix[i, j])}", ha="center", va="center", fontsize=7,
                    color="white" if share[i, j] > 0.5 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, label="share of reference pixels")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def panels_png(
    batch: dict[str, torch.Tensor],
    path: str | Path,
    *,
    rgb: tuple[int, int, int] = (0, 1, 2),
    colors: list[str] | None = None,
) -> Path:
    """One row per tile: a 2–98 % stretched RGB composite, the reference labels and the prediction."""
    plt = _pyplot()
    images, labels, preds = batch["image"].numpy(), batch["label"].numpy(), batch["pred"].numpy()
    if images.ndim == 5:  # tiles of several dates (B, T, C, H, W): the composite of the last date
        images = images[:, -1]
    n = images.shape[0]
    num_classes = int(max(labels[labels != IGNORE_INDEX].max(initial=0), preds.max(initial=0))) + 1
    palette = _palette(colors, num_classes)
    fig, axes = plt.subplots(n, 3, figsize=(7.5, 2.5 * n), squeeze=False)
    for row in range(n):
        composite = images[row, list(rgb)].transpose(1, 2, 0)
        lo, hi = np.percentile(composite, [2, 98])
        axes[row, 0].imshow(np.clip((composite - lo) / max(hi - lo, 1e-6), 0, 1))
        axes[row, 1].imshow(palette[labels[row]])
        axes[row, 2].imshow(palette[preds[row]])
    for ax, title in zip(axes[0], ("image", "label", "prediction"), strict=True):
        ax.set_title(title)
    for ax in axes.ravel():
        ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return Path(path)


def _palette(colors: list[str] | None, num_classes: int) -> np.ndarray:
    """RGB floats for class indices 0..255: the class table's colours, black for ignored pixels."""
    palette = np.zeros((256, 3))
    if not colors:
        import matplotlib

        cmap = matplotlib.colormaps["tab20"]
        colors = [matplotlib.colors.to_hex(cmap(i % 20)) for i in range(num_classes)]
    for i, color in enumerate(colors):
        palette[i] = [int(color[k : k + 2], 16) / 255 for k in (1, 3, 5)]
    return palette
