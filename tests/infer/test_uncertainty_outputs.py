"""`predict --uncertainty entropy|margin` and `--probabilities`: valid COGs beside the map, nodata kept, values that
agree with the map and its confidence, the contract's temperature applied, and a values checkpoint refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from rio_cogeo.cogeo import cog_validate

from eoscale.contract import CONTRACT_KEY, BandContract
from eoscale.errors import InputError
from eoscale.infer.run import PredictConfig, predict
from eoscale.models.uncertainty import entropy
from tests.checkpoints import TABLE


def _predict(checkpoint: Path, scene: Path, out: Path, **options) -> None:
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(out), confidence=True,
                          progress=False, **options))


@pytest.fixture(scope="module")
def maps(checkpoint, scene, tmp_path_factory):
    out = tmp_path_factory.mktemp("uncertain")
    _predict(checkpoint, scene, out, uncertainty="entropy", probabilities=True)
    margin_out = tmp_path_factory.mktemp("margin")
    _predict(checkpoint, scene, margin_out, uncertainty="margin")
    return out, margin_out


def _read(path: Path) -> tuple[np.ndarray, dict]:
    with rasterio.open(path) as src:
        return src.read(), {"nodata": src.nodata, "descriptions": src.descriptions, "scales": src.scales,
                            "tags": src.tags(), "dtype": src.dtypes[0], "count": src.count}


def test_layers_are_valid_cogs_with_the_maps_nodata(maps):
    out, margin_out = maps
    for path in (out / "odd_uncertainty.tif", out / "odd_probabilities.tif", margin_out / "odd_uncertainty.tif"):
        valid, errors, _ = cog_validate(str(path), quiet=True)
        assert valid, (path, errors)
    landcover, meta = _read(out / "odd_landcover.tif")
    nodata = landcover[0] == meta["nodata"]
    assert nodata[40:90, :70].all() and nodata.sum() == 50 * 70
    uncertainty, u = _read(out / "odd_uncertainty.tif")
    assert u["dtype"] == "uint8" and u["nodata"] == 255 and u["tags"]["EOSCALE_UNCERTAINTY"] == "entropy"
    assert (uncertainty[0][nodata] == 255).all() and (uncertainty[0][~nodata] <= 100).all()
    probs, p = _read(out / "odd_probabilities.tif")
    assert p["count"] == len(TABLE) and list(p["descriptions"]) == [c.name for c in TABLE.classes]
    assert p["scales"] == pytest.approx([0.005] * len(TABLE))
    assert (probs[:, nodata] == 255).all()
    assert not (margin_out / "odd_probabilities.tif").exists()


def test_layers_agree_with_the_map_and_confidence(maps):
    out, margin_out = maps
    landcover, meta = _read(out / "odd_landcover.tif")
    valid = landcover[0] != meta["nodata"]
    probs = _read(out / "odd_probabilities.tif")[0].astype(np.float32) * 0.005
    # the most probable stored class is the mapped one where the 0.005 rounding left no tie (an untrained network's
    # probabilities are close together)
    codes = np.array([c.code for c in TABLE.classes])[probs.argmax(axis=0)]
    ordered = -np.sort(-probs, axis=0)
    clear = valid & (ordered[0] - ordered[1] > 0.004)
    assert clear.sum() > 1000 and (codes[clear] == landcover[0][clear]).all()
    assert np.abs(probs[:, valid].sum(axis=0) - 1).max() < 0.005 * len(TABLE)
    confidence = _read(out / "odd_confidence.tif")[0][0].astype(np.float32) / 100
    assert np.abs(probs.max(axis=0)[valid] - confidence[valid]).max() <= 0.011
    uncertainty = _read(out / "odd_uncertainty.tif")[0][0].astype(np.float32) / 100
    assert np.abs(entropy(probs)[valid] - uncertainty[valid]).mean() < 0.02
    top2 = -np.sort(-probs, axis=0)[:2]
    margin = _read(margin_out / "odd_uncertainty.tif")[0][0].astype(np.float32) / 100
    assert np.abs((1 - (top2[0] - top2[1]))[valid] - margin[valid]).max() <= 0.025


def test_the_contracts_temperature_is_applied_before_the_softmax(checkpoint, scene, maps, tmp_path):
    saved = torch.load(checkpoint, weights_only=True)
    contract = BandContract.from_dict(saved[CONTRACT_KEY])
    saved[CONTRACT_KEY] = replace(contract, temperature=0.1).to_dict()
    hot = tmp_path / "hot.ckpt"
    torch.save(saved, hot)
    _predict(hot, scene, tmp_path / "maps", uncertainty="entropy")
    before, meta = _read(maps[0] / "odd_uncertainty.tif")
    after, _ = _read(tmp_path / "maps" / "odd_uncertainty.tif")
    valid = before[0] != meta["nodata"]
    # T = 0.1 sharpens the untrained network's nearly even probabilities: less entropy everywhere
    assert after[0][valid].astype(float).mean() < before[0][valid].astype(float).mean() - 5
    assert _read(tmp_path / "maps" / "odd_uncertainty.tif")[1]["tags"]["EOSCALE_TEMPERATURE"] == "0.1"
    # a window's most probable class does not change with T; the blend of overlapping windows' probabilities may,
    # where windows disagree
    same = _read(tmp_path / "maps" / "odd_landcover.tif")[0] == _read(maps[0] / "odd_landcover.tif")[0]
    assert same.mean() > 0.9


def test_a_values_checkpoint_is_refused_in_one_line(checkpoint, scene, tmp_path):
    saved = torch.load(checkpoint, weights_only=True)
    saved[CONTRACT_KEY] = {**saved[CONTRACT_KEY], "target": "values", "classes": [],
                           "target_info": {"name": "height", "units": "m", "mean": 0.0, "std": 1.0}}
    values = tmp_path / "values.ckpt"
    torch.save(saved, values)
    with pytest.raises(InputError, match="--uncertainty describes class probabilities .* drop --uncertainty"):
        _predict(values, scene, tmp_path / "out", uncertainty="entropy")
