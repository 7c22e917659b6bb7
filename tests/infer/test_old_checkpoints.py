"""Checkpoints written before the model contract (no `eoscale_model` record) still predict, as the same network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.contract import MODEL_KEY, model_args_from_hparams
from eoscale.infer.model import load_model
from eoscale.infer.run import PredictConfig, predict
from tests.checkpoints import make_checkpoint
from tests.rasters import read_map


def _with_model_record(old, new):
    """`new`: checkpoint `old` as eoscale writes it today, with the network's constructor arguments."""
    saved = torch.load(old, weights_only=True)
    hparams = saved["hyper_parameters"]
    saved[MODEL_KEY] = {"args": model_args_from_hparams(hparams), "finetune": "full", "lora": None}
    torch.save(saved, new)
    return new


def test_an_old_checkpoint_rebuilds_the_network_of_a_new_one(tmp_path):
    old = make_checkpoint(tmp_path / "old.ckpt", backbone="test_vit", tile=32)
    assert MODEL_KEY not in torch.load(old, weights_only=True)
    new = _with_model_record(old, tmp_path / "new.ckpt")
    a, b = load_model(old), load_model(new)
    assert a.spec == b.spec and a.spec["args"]["backbone"] == "test_vit"
    x = torch.randn(2, 10, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(a.network(x), b.network(x))


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_an_old_checkpoint_predicts_the_same_map(checkpoint, scene, tmp_path):
    new = _with_model_record(checkpoint, tmp_path / "new.ckpt")
    for name, ckpt in (("old", checkpoint), ("new", new)):
        predict(PredictConfig(checkpoint=str(ckpt), inputs=[str(scene)], output=str(tmp_path / name), progress=False))
    assert np.array_equal(read_map(tmp_path / "old" / "odd_landcover.tif"), read_map(tmp_path / "new" / "odd_landcover.tif"))
