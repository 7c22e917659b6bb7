"""LoRA adapters: what trains, what an adapter file holds, several adapters by name, merged == unmerged."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from eoscale.errors import InputError
from eoscale.models import build_model, lora

TINY = {"depth": 2, "embed_dim": 64, "num_heads": 2, "patch_size": 8}


def tiny(seed: int = 0):
    torch.manual_seed(seed)
    return build_model("vit_tiny_patch16_224", in_chans=4, num_classes=3, img_size=32, decoder_channels=16, **TINY)


def perturb(model, seed: int) -> None:
    """LoRA's B starts at zero (the adapter is a no-op): give adapters and head something to carry."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def test_lora_trains_only_adapters_and_head():
    model = lora.apply_finetune(tiny(), "lora", {"r": 4, "alpha": 8, "targets": ["qkv", "proj", "fc1"]})
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or not n.startswith("backbone.") for n in trainable)
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_" in n}
    assert adapted == {"qkv", "proj", "fc1"}
    assert not any("patch_embed" in n for n in trainable)  # `proj` means attention's, not the patch embedding's
    assert any(n.startswith("decoder.") for n in trainable) and any(n.startswith("neck.") for n in trainable)
    done, total = lora.trainable_fraction(model)
    assert 0 < done < total


@pytest.mark.parametrize("mode", ["linear", "full"])
def test_linear_and_full(mode):
    model = lora.apply_finetune(tiny(), mode)
    for name, p in model.named_parameters():
        assert p.requires_grad == (mode == "full" or not name.startswith("backbone.")), name


def test_bad_options_are_input_errors():
    with pytest.raises(InputError, match="targets"):
        lora.LoraSettings.from_dict({"targets": ["mlp"]})
    with pytest.raises(InputError, match="finetune"):
        lora.apply_finetune(tiny(), "partial")
    torch.manual_seed(0)
    cnn = build_model("resnet18", in_chans=4, num_classes=3, decoder_channels=16)
    with pytest.raises(InputError, match="plain ViT"):
        lora.apply_finetune(cnn, "lora", {})


def test_adapter_files_hold_only_adapters_and_head(tmp_path):
    model = lora.apply_finetune(tiny(), "lora", {"r": 2, "name": "forest"})
    lora.save_adapter(model, tmp_path / "adapters" / "forest", contract={"bands": ["B02"]}, model_args={"backbone": "x"})
    folder = tmp_path / "adapters" / "forest"
    adapters = load_file(str(folder / lora.ADAPTER_FILE))
    head = load_file(str(folder / lora.HEAD_FILE))
    assert adapters and all("lora_" in k and ".forest." not in k for k in adapters)
    assert head and not any(k.startswith("backbone.") for k in head)
    backbone = sum(p.numel() for n, p in model.named_parameters() if n.startswith("backbone.") and "lora_" not in n)
    assert sum(v.numel() for v in adapters.values()) < backbone / 10
    assert (folder / "adapter_config.json").is_file()
    assert lora.read_adapter_meta(tmp_path, "forest")["lora"]["r"] == 2
    assert lora.list_adapters(tmp_path) == ["forest"]


def test_several_adapters_by_name_then_merge(tmp_path):
    x = torch.randn(2, 4, 32, 32)
    outputs = {}
    for seed, name in enumerate(["forest", "water"]):
        model = lora.apply_finetune(tiny(), "lora", {"r": 4, "name": name})
        perturb(model, seed)
        lora.save_adapter(model, tmp_path / "adapters" / name)
        outputs[name] = model.eval()(x).detach()
    fresh = tiny()  # the same base weights
    for name in ["forest", "water", "forest"]:
        lora.load_adapter(fresh, tmp_path, name)
        torch.testing.assert_close(fresh.eval()(x), outputs[name], atol=1e-5, rtol=0)
    assert lora.adapter_names(fresh) == ["forest", "water"]
    with pytest.raises(FileNotFoundError, match="found: forest, water"):
        lora.load_adapter(fresh, tmp_path, "urban")

    unmerged = fresh(x).detach()
    lora.merge_adapter(fresh)
    assert not lora.adapter_names(fresh)
    assert type(fresh.backbone.net.blocks[0].attn.qkv) is torch.nn.Linear  # plain timm layers again
    merged = fresh(x).detach()
    assert (merged - unmerged).abs().max() < 1e-5
    torch.testing.assert_close(merged, outputs["forest"], atol=1e-5, rtol=0)
