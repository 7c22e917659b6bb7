"""The forest as tensors (`eoscale.models.trees`) gives scikit-learn's probabilities, and survives a checkpoint
read as plain data (no pickle)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.models.trees import TreeEnsemble


def _pixels(seed: int, n: int = 3000, bands: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, bands)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] + 0.3 * x[:, 2] > 0.5)  # classes 0..3, with noise below
    flip = rng.random(n) < 0.1
    y[flip] = rng.integers(0, 4, flip.sum())
    return x, y + 1  # class indices 1..4: column 0 and 5 of six are classes the forest never saw


@pytest.mark.parametrize("max_depth", [None, 6])
def test_ensemble_equals_predict_proba(max_depth):
    from sklearn.ensemble import RandomForestClassifier

    x, y = _pixels(0)
    forest = RandomForestClassifier(n_estimators=23, max_depth=max_depth, random_state=0).fit(x, y)
    ensemble = TreeEnsemble.from_sklearn(forest, num_classes=6)
    test = np.concatenate([_pixels(1)[0], x[:500]])  # new pixels, and training ones (values on the thresholds' sides)
    got = ensemble.proba(torch.from_numpy(test)).numpy()
    want = forest.predict_proba(test)
    np.testing.assert_allclose(got[:, 1:5], want, atol=1e-6)
    assert np.all(got[:, [0, 5]] == 0)
    assert (got.argmax(1) == forest.predict(test)).all()


def test_forward_is_log_probabilities_per_pixel():
    from sklearn.ensemble import RandomForestClassifier

    x, y = _pixels(2)
    forest = RandomForestClassifier(n_estimators=5, random_state=0).fit(x, y)
    ensemble = TreeEnsemble.from_sklearn(forest, num_classes=6)
    image = torch.from_numpy(_pixels(3, n=2 * 8 * 8)[0]).reshape(2, 8, 8, 4).permute(0, 3, 1, 2)
    logits = ensemble(image)
    assert logits.shape == (2, 6, 8, 8)
    probabilities = logits.softmax(1).permute(0, 2, 3, 1).reshape(-1, 6).numpy()
    pixels = image.permute(0, 2, 3, 1).reshape(-1, 4).numpy()
    np.testing.assert_allclose(probabilities[:, 1:5], forest.predict_proba(pixels), atol=1e-5)


def test_ensemble_round_trips_a_plain_data_checkpoint(tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    x, y = _pixels(4)
    ensemble = TreeEnsemble.from_sklearn(RandomForestClassifier(n_estimators=7, random_state=0).fit(x, y),
                                         num_classes=6)
    torch.save({"state_dict": ensemble.state_dict(), "args": ensemble.shape_args()}, tmp_path / "forest.ckpt")
    saved = torch.load(tmp_path / "forest.ckpt", weights_only=True)
    rebuilt = build_model("random_forest", **saved["args"])
    rebuilt.load_state_dict(saved["state_dict"])
    test = torch.from_numpy(_pixels(5)[0])
    assert torch.equal(rebuilt.proba(test), ensemble.proba(test))


def test_a_forest_checks_its_input_bands():
    with pytest.raises(InputError, match="fitted on 4 bands, the input has 3"):
        TreeEnsemble(in_chans=4, num_classes=2)(torch.zeros(1, 3, 4, 4))
