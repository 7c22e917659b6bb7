"""`eoscale adapter list | merge`: adapters under a fit's root, folded into a checkpoint predict reads plainly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.cli import main
from eoscale.infer.model import load_model
from eoscale.models.adapter_command import describe_adapters, merge
from tests.checkpoints import make_checkpoint, write_adapter


def _adapter(root, checkpoint, name: str, *, r: int = 2, backbone_kwargs: dict | None = None, mean_shift: float = 100.0):
    """Write adapter `name` into `root/adapters/` as a LoRA fit would: non-zero LoRA updates, its own head,
    and a store with other statistics; returns the unmerged model."""
    from eoscale.train.tasks.segmentation import SegmentationTask

    base = load_model(checkpoint)
    if backbone_kwargs:  # another backbone shape: the adapter does not fit the checkpoint
        model = SegmentationTask(backbone="test_vit", backbone_kwargs=backbone_kwargs, decoder_channels=8,
                                 in_chans=10, num_classes=4, img_size=32).configure_models()
    else:
        from eoscale.models import build_model

        model = build_model(**base.spec["args"])
        model.load_state_dict({k.removeprefix("model."): v for k, v in torch.load(checkpoint)["state_dict"].items()})
    write_adapter(model, base.contract, root, {"r": r, "alpha": 2 * r, "name": name}, mean_shift=mean_shift)
    return model


@pytest.fixture(scope="module")
def fit_root(tmp_path_factory):
    """A ViT checkpoint in `<root>/exp/run/checkpoints/`, adapters 'alps' (r=2) and 'coast' (r=4) in
    `<root>/adapters/`, and 'wide' trained on a wider backbone."""
    root = tmp_path_factory.mktemp("fit")
    checkpoint = make_checkpoint(root / "exp" / "run" / "checkpoints" / "last.ckpt", backbone="test_vit")
    alps = _adapter(root, checkpoint, "alps")
    _adapter(root, checkpoint, "coast", r=4)
    _adapter(root, checkpoint, "wide", backbone_kwargs={"embed_dim": 96, "num_heads": 2})
    return root, checkpoint, alps


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A small scene with the checkpoint's 10 bands."""
    from tests.rasters import write_scene

    path = tmp_path_factory.mktemp("scene") / "odd.tif"
    write_scene(path, height=101, width=117, seed=3)
    return path


def test_list_shows_every_adapter(fit_root, capsys):
    root, _, _ = fit_root
    adapters = {a["name"]: a for a in describe_adapters(root)}
    assert sorted(adapters) == ["alps", "coast", "wide"]
    alps = adapters["alps"]
    assert (alps["r"], alps["alpha"], alps["targets"], alps["backbone"]) == (2, 4.0, ["qkv", "proj"], "test_vit")
    assert adapters["coast"]["r"] == 4 and adapters["coast"]["megabytes"] > alps["megabytes"] > 0
    assert len(alps["bands"]) == 10 and alps["tile_size"] == 32 and len(alps["classes"]) == 4
    assert main(["adapter", "list", str(root)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("alps", "coast", "wide", "qkv, proj", "test_vit"))


def test_list_of_a_root_without_adapters(tmp_path, capsys):
    assert main(["adapter", "list", str(tmp_path)]) == 0
    assert "no adapters under" in capsys.readouterr().out


def test_merged_checkpoint_predicts_as_the_unmerged_model(fit_root, tmp_path, one_thread):
    root, checkpoint, unmerged = fit_root
    out = tmp_path / "merged.ckpt"
    assert main(["adapter", "merge", "--checkpoint", str(checkpoint), "--adapter", "alps", "--output", str(out)]) == 0
    assert not list(tmp_path.glob("*.partial"))
    saved = torch.load(out, weights_only=True)
    assert not any("lora_" in k for k in saved["state_dict"])
    assert saved["hyper_parameters"]["finetune"] == "full" and saved["eoscale_merged_adapter"]["adapter"] == "alps"

    merged = load_model(out)  # no --adapter
    adapted = load_model(checkpoint, adapter="alps")
    assert merged.contract == adapted.contract and merged.adapter is None
    x = torch.randn(3, 10, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(merged.network(x), unmerged.eval()(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(merged.network(x), adapted.network(x), atol=1e-5, rtol=0)
        assert not torch.allclose(load_model(checkpoint).network(x), merged.network(x), atol=1e-2)


@pytest.mark.slow
def test_predict_reads_the_merged_checkpoint_without_adapter(fit_root, scene, tmp_path):
    from eoscale.infer.run import PredictConfig, predict
    from tests.rasters import read_map

    root, checkpoint, _ = fit_root
    out = merge(checkpoint, "coast", tmp_path / "coast.ckpt")
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(tmp_path / "adapter"),
                          adapter="coast", progress=False))
    assert main(["predict", "--checkpoint", str(out), "--input", str(scene), "--output", str(tmp_path / "merged")]) == 0
    with_adapter = read_map(tmp_path / "adapter" / "odd_landcover.tif")
    np.testing.assert_array_equal(read_map(tmp_path / "merged" / "odd_landcover.tif"), with_adapter)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing checkpoint", "no checkpoint at"),
        ("unknown adapter", "no adapter 'alpz'"),
        ("misfit adapter", "does not fit"),
        ("existing output", "exists: pass --overwrite"),
    ],
)
def test_bad_input_is_one_line(fit_root, tmp_path, capsys, case, message):
    root, checkpoint, _ = fit_root
    out = tmp_path / "out.ckpt"
    args = {"checkpoint": str(checkpoint), "adapter": "alps"}
    if case == "missing checkpoint":
        args["checkpoint"] = str(tmp_path / "none.ckpt")
    elif case == "unknown adapter":
        args["adapter"] = "alpz"
    elif case == "misfit adapter":
        args["adapter"] = "wide"
    else:
        out.write_bytes(b"keep me")
    code = main(["adapter", "merge", "--checkpoint", args["checkpoint"], "--adapter", args["adapter"],
                 "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    if case == "existing output":
        assert out.read_bytes() == b"keep me"
        assert main(["adapter", "merge", "--checkpoint", str(checkpoint), "--adapter", "alps", "--output", str(out),
                     "--overwrite"]) == 0
        assert load_model(out).network is not None
    else:
        assert not out.exists() and not list(tmp_path.glob("*.partial"))
