"""`predict` of float scenes (issue 46, item 6): a checkpoint whose store converted float reflectance (`ingest --scale`)
maps a float scene with the same conversion, to the map of the uint16 scene it was made from; a checkpoint trained on
integer scenes refuses a float scene in one line, rather than feed the network values 10,000 times too small."""

from __future__ import annotations

import numpy as np
import torch

from eoscale.cli import main
from eoscale.contract import CONTRACT_KEY
from eoscale.infer.run import PredictConfig, predict
from tests.checkpoints import make_checkpoint
from tests.rasters import read_map, write_reflectance


def test_a_float_scene_is_mapped_with_the_checkpoints_conversion(checkpoint, scene, tmp_path, capsys):
    reflectance = tmp_path / "reflectance.tif"
    write_reflectance(scene, reflectance)
    converted = make_checkpoint(tmp_path / "converted.ckpt")  # the same weights as `checkpoint` (seed 0)
    saved = torch.load(converted, weights_only=True)
    saved[CONTRACT_KEY]["input_scale"] = {"scale": 10000.0, "offset": 0.0}
    torch.save(saved, converted)
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(tmp_path / "dn"), progress=False))
    predict(PredictConfig(checkpoint=str(converted), inputs=[str(reflectance)], output=str(tmp_path / "float"),
                          progress=False))
    np.testing.assert_array_equal(read_map(tmp_path / "float" / "reflectance_landcover.tif"),
                                  read_map(tmp_path / "dn" / "odd_landcover.tif"))

    code = main(["predict", "--checkpoint", str(checkpoint), "--input", str(reflectance), "--output",
                 str(tmp_path / "refused"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"eoscale predict: error: scene 'reflectance' ({reflectance}) holds float pixels, and nothing says "
                      f"which scale they are on: checkpoint {str(checkpoint)!r} was trained on a store of integer "
                      "scenes: convert the scene onto that store's scale first, or train on a store ingested from "
                      "float scenes with --scale")
    assert not (tmp_path / "refused").exists()
