"""`predict --smooth bayes[:W[:S]]` and `--mmu PIXELS`: Bayesian smoothing removes isolated noise but keeps edges,
the sieve leaves no region under the unit, both are the same whatever the column tiles (out of core), and bad
values are one line."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from rio_cogeo.cogeo import cog_validate
from scipy import ndimage

from eoscale.errors import InputError
from eoscale.infer.outputs.smoothing import BayesSmoothing, check_mmu
from eoscale.infer.run import PredictConfig, predict


def test_bayes_smoothing_removes_salt_and_pepper_and_keeps_the_edge():
    rng = np.random.default_rng(0)
    truth = np.zeros((60, 60), dtype=int)
    truth[:, 30:] = 1  # two halves, a straight edge
    probs = np.full((3, 60, 60), 0.05, dtype=np.float32)
    probs[truth, np.arange(60)[:, None], np.arange(60)[None]] = 0.9
    noisy = rng.random((60, 60)) < 0.1  # 10 % of pixels confidently wrong
    probs[:, noisy] = np.float32([0.05, 0.05, 0.9])[:, None]
    valid = np.ones((60, 60), dtype=bool)
    smoothed = BayesSmoothing(7, 10.0)(probs, valid)
    assert smoothed.shape == probs.shape and np.allclose(smoothed.sum(axis=0), 1, atol=1e-5)
    before, after = (probs.argmax(0) != truth).mean(), (smoothed.argmax(0) != truth).mean()
    assert before > 0.08 and after < 0.01
    # the edge stays where it was: columns 29 and 30 keep their classes
    assert (smoothed.argmax(0)[:, 29] == 0).mean() > 0.9 and (smoothed.argmax(0)[:, 30] == 1).mean() > 0.9


def test_nodata_is_not_a_neighbour():
    probs = np.full((2, 20, 20), 0.5, dtype=np.float32)
    probs[0, :, :10], probs[1, :, :10] = 0.9, 0.1
    valid = np.zeros((20, 20), dtype=bool)
    valid[:, :10] = True
    smoothed = BayesSmoothing(5, 10.0)(probs, valid)
    assert np.allclose(smoothed[0, :, :10], 0.9, atol=1e-3)  # its neighbours beyond are nodata, not 0.5


@pytest.mark.parametrize("text", ["gauss", "bayes:4", "bayes:7:0", "bayes:x", "bayes:7:10:3", "bayes:99"])
def test_bad_smoothing_is_one_line(text):
    with pytest.raises(InputError, match="--smooth"):
        BayesSmoothing.parse(text)


def test_parse_defaults_and_mmu_limits():
    assert BayesSmoothing.parse("bayes") == BayesSmoothing(7, 10.0)
    assert BayesSmoothing.parse("bayes:9:20") == BayesSmoothing(9, 20.0)
    assert BayesSmoothing.parse(None) is None
    with pytest.raises(InputError, match="--mmu -1"):
        check_mmu(-1)


def _predict(checkpoint, scene, out, **options):
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(out), progress=False,
                          confidence=True, **options))
    with rasterio.open(out / "odd_landcover.tif") as src:
        return src.read(1), src.nodata, src.tags()


@pytest.fixture(scope="module")
def plain(checkpoint, scene, tmp_path_factory):
    return _predict(checkpoint, scene, tmp_path_factory.mktemp("plain"))


@pytest.mark.slow  # three predictions of the scene (about 40 s on 2 shared cores)
def test_smoothing_and_sieve_in_predict_are_out_of_core_and_leave_no_small_region(checkpoint, scene, plain, tmp_path):
    options = {"smooth": "bayes:5:10", "mmu": 12, "uncertainty": "entropy", "probabilities": True}
    whole, nodata, tags = _predict(checkpoint, scene, tmp_path / "whole", **options)
    # narrow column tiles: the parts' boundaries cross the neighbourhoods and the regions
    tiled, _, _ = _predict(checkpoint, scene, tmp_path / "tiled", column_tile=96, **options)
    assert np.array_equal(whole, tiled)
    assert tags["EOSCALE_SMOOTH"] == "bayes:5:10" and tags["EOSCALE_MMU_PIXELS"] == "12"
    for name in ("landcover", "confidence", "uncertainty", "probabilities"):
        valid, errors, _ = cog_validate(str(tmp_path / "whole" / f"odd_{name}.tif"), quiet=True)
        assert valid, (name, errors)
    raw, _, _ = plain
    assert np.array_equal(whole == nodata, raw == nodata)  # nodata stays nodata, and only it
    for code in np.unique(whole[whole != nodata]):
        regions, count = ndimage.label(whole == code, structure=np.ones((3, 3)))
        assert np.bincount(regions.ravel())[1:].min() >= 12, code
    # fewer regions than the raw map's
    def regions(m):
        return sum(ndimage.label(m == c, structure=np.ones((3, 3)))[1] for c in np.unique(m[m != nodata]))
    assert regions(whole) < regions(raw)
    # the area table counts the smoothed, sieved map
    import json
    areas = json.loads((tmp_path / "whole" / "odd_areas.json").read_text())
    counted = {r["code"]: r["pixels"] for r in areas["classes"]}
    assert all(counted.get(int(c), 0) == int((whole == c).sum()) for c in np.unique(whole[whole != nodata]))


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_sieve_alone_keeps_the_parts_layers(checkpoint, scene, plain, tmp_path):
    sieved, nodata, tags = _predict(checkpoint, scene, tmp_path, mmu=4)
    raw, _, _ = plain
    assert "EOSCALE_SMOOTH" not in tags and (sieved != raw).any() and (sieved == raw).mean() > 0.5
    with rasterio.open(tmp_path / "odd_confidence.tif") as src:  # the parts' confidence layer, in percent
        confidence = src.read(1)
        mapped = confidence != src.nodata
    assert mapped.any() and confidence[mapped].max() <= 100
    assert np.array_equal(mapped, sieved != nodata)  # where the map is, and only there
