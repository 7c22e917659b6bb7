"""`--adapter NAME`: a LoRA adapter (and its head) on the checkpoint's backbone, merged into the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.cli import main
from eoscale.contract import BandContract
from eoscale.infer.model import load_model
from eoscale.infer.run import PredictConfig, predict
from tests.checkpoints import make_adapted_checkpoint
from tests.rasters import read_map


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    """A ViT checkpoint in `<root>/exp/run/checkpoints/`, and adapter 'alps' in `<root>/adapters/` as a LoRA
    fit writes it: LoRA on qkv/proj with non-zero updates, its own head, and a store with other statistics."""
    checkpoint, model, stats = make_adapted_checkpoint(tmp_path_factory.mktemp("lora"), mean_shift=100.0)
    return checkpoint, model, BandContract.from_dict(stats)


def test_adapter_is_merged_into_the_network(adapted):
    checkpoint, unmerged, contract = adapted
    loaded = load_model(checkpoint, adapter="alps")
    assert loaded.adapter == "alps" and loaded.contract == contract  # the adapter's store rules the input
    assert not any("lora_" in name for name, _ in loaded.network.named_parameters())
    x = torch.randn(3, 10, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(loaded.network(x), unmerged(x), atol=1e-4)
        assert not torch.allclose(load_model(checkpoint).network(x), unmerged(x), atol=1e-2)


@pytest.mark.slow
def test_predict_with_an_adapter(adapted, scene, tmp_path, capsys):
    checkpoint, _, _ = adapted
    run = predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(tmp_path / "alps"),
                                adapter="alps", progress=False))
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(tmp_path / "base"),
                          progress=False))
    with_adapter, without = read_map(tmp_path / "alps" / "odd_landcover.tif"), read_map(tmp_path / "base" / "odd_landcover.tif")
    assert (with_adapter == 0).sum() == (without == 0).sum() == 50 * 70
    assert not np.array_equal(with_adapter, without)
    import rasterio

    with rasterio.open(tmp_path / "alps" / "odd_landcover.tif") as src:
        assert src.tags()["EOSCALE_ADAPTER"] == "alps"
    assert run.scenes[0].areas["valid_pixels"] == 301 * 347 - 50 * 70

    code = main(["predict", "--checkpoint", str(checkpoint), "--adapter", "alpz", "--input", str(scene),
                 "--output", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no adapter 'alpz'" in err[0] and "found: alps" in err[0], err


def test_checkpoint_of_a_lora_fit(tmp_path):
    """A checkpoint trained with `finetune: lora` holds LoRA layers: rebuilt as trained, then merged."""
    from eoscale.contract import CONTRACT_KEY
    from eoscale.train.tasks.segmentation import SegmentationTask
    from tests.checkpoints import MEAN, STD, TABLE

    task = SegmentationTask(backbone="test_vit", decoder_channels=8, in_chans=10, num_classes=4, img_size=32,
                            finetune="lora", lora={"r": 2, "name": "fit"})
    model = task.configure_finetune(task.configure_models()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    contract = BandContract(tuple(f"B{i:02d}" for i in range(2, 12)), MEAN, STD, 32, tuple(TABLE.to_records()))
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": dict(task.hparams), CONTRACT_KEY: contract.to_dict()}, tmp_path / "lora.ckpt")
    loaded = load_model(tmp_path / "lora.ckpt")
    assert not any("lora_" in name for name, _ in loaded.network.named_parameters())
    x = torch.randn(2, 10, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(loaded.network(x), model(x), atol=1e-4)
