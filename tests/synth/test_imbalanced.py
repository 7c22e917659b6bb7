"""`eoscale.synth.imbalanced`: small, imbalanced, noisy label sets as ordinary ingest inputs (issue 38)."""

from __future__ import annotations

import numpy as np
import rasterio

from eoscale.synth.imbalanced import BANDS, write_imbalanced


def test_two_classes_dominate_and_rare_ones_stay_rare(tmp_path):
    written = write_imbalanced(tmp_path, seed=3, scenes=2, size=256)
    shares = written.fractions
    assert shares["Forest"] + shares["Shrubland"] > 0.85
    rare = [name for name, share in shares.items() if 0 < share < 0.01]
    assert {"Open water", "Barren"} <= set(rare), shares
    assert all(share > 0 for share in shares.values())  # every class is there
    with rasterio.open(written.scenes[0]) as src:
        assert src.count == len(BANDS) and src.descriptions == BANDS and src.res == (30.0, 30.0)
    with rasterio.open(written.labels[0]) as src:
        codes = set(np.unique(src.read(1)).tolist())
    assert codes <= {11, 21, 31, 41, 52, 71, 82, 90}


def test_the_same_seed_writes_the_same_files(tmp_path):
    a = write_imbalanced(tmp_path / "a", seed=1, size=128)
    b = write_imbalanced(tmp_path / "b", seed=1, size=128)
    c = write_imbalanced(tmp_path / "c", seed=2, size=128)
    assert a.scenes[0].read_bytes() == b.scenes[0].read_bytes()
    assert a.labels[0].read_bytes() != c.labels[0].read_bytes()


def test_labels_are_noisy_at_boundaries_only(tmp_path):
    from scipy import ndimage

    from eoscale.synth.imbalanced import class_map, noisy_labels

    rng = np.random.default_rng(0)
    classes = class_map((256, 256), rng)
    labels = noisy_labels(classes, rng)
    differs = labels != classes
    assert 0 < differs.mean() < 0.2
    boundary = ndimage.binary_dilation(ndimage.morphological_gradient(classes, size=3) > 0, iterations=2)
    assert differs[~boundary].mean() == 0  # away from boundaries, the labels are right
