"""Foundation weights from local files in the layouts they come in, mapped onto a store's bands by name."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors.torch import load_file

from eoscale.errors import BandMismatchError, InputError
from eoscale.models import build_model
from eoscale.models.foundation import PRESETS, FoundationWeights, read_export_metadata, save_backbone

TINY = {"depth": 2, "embed_dim": 64, "num_heads": 2}
STORE = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]  # eoscale's L2A set


def vit(in_chans: int, img_size: int, seed: int = 0):
    torch.manual_seed(seed)
    return timm.create_model("vit_tiny_patch16_224", in_chans=in_chans, img_size=img_size, num_classes=0, **TINY)


def load(path, bands, source=None, **kw):
    transform = FoundationWeights(path, bands=bands, source=source)
    model = build_model("vit_tiny_patch16_224", in_chans=len(bands), num_classes=3, img_size=32,
                        decoder_channels=16, weights=path, weights_transform=transform, **TINY, **kw)
    return model.backbone.net, transform.report


def test_ssl4eo_timm_layout_reorders_drops_and_resamples(tmp_path):
    source = vit(13, 64)  # 13 L1C bands, trained at 64 px
    path = tmp_path / "ssl4eo_vit_mae.pth"
    torch.save(source.state_dict(), path)
    wanted = ["B8A", "B04", "B03", "B02"]
    net, report = load(path, wanted, "ssl4eo-s12")
    w, src = net.patch_embed.proj.weight, source.patch_embed.proj.weight
    order = [PRESETS["ssl4eo-s12"].bands.index(b) for b in wanted]
    assert torch.equal(w, src[:, order])
    assert report.copied == wanted and not report.filled and "B10" in report.dropped
    assert net.pos_embed.shape == (1, 1 + 4, 64)  # 4x4 -> 2x2 patches, resampled
    assert torch.equal(net.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)
    assert "4/4 bands copied" in report.summary()


def test_prithvi_eo1_layout_top_level_temporal_and_filled(tmp_path):
    """EO-1.0 as published: encoder and decoder keys side by side at the top level (the old "prithvi" name)."""
    source = vit(6, 32)
    state = dict(source.state_dict())
    frames = torch.randn(64, 6, 2, 16, 16)  # (D, C, T, p, p)
    state["patch_embed.proj.weight"] = frames
    pos = source.pos_embed.detach()
    state["pos_embed"] = torch.cat([pos, pos[:, 1:] + 1.0], dim=1)  # cls + 2 frames of 2x2
    state["decoder_pred.weight"] = torch.zeros(3, 3)
    state["mask_token"] = torch.zeros(1, 1, 64)
    path = tmp_path / "prithvi.pt"
    torch.save({"state_dict": state, "epoch": 7}, path)
    for name in ("prithvi", "prithvi-eo-1.0-100m"):
        net, report = load(path, STORE, name)
        w = net.patch_embed.proj.weight
        mean = frames.mean(dim=2)
        assert torch.allclose(w[:, STORE.index("B8A")], mean[:, 3])
        assert torch.allclose(w[:, STORE.index("B08")], mean[:, 3])  # nearest in wavelength to B08
        assert set(report.filled) == {"B05", "B06", "B07", "B08"} and report.format == "prithvi-eo-1.0-100m preset"
        assert torch.allclose(net.pos_embed[:, 1:], pos[:, 1:] + 0.5)
        assert torch.equal(net.blocks[0].mlp.fc1.weight, source.blocks[0].mlp.fc1.weight)


def test_prithvi_eo2_layout_one_frame_tubelet_and_four_frame_position_embedding(tmp_path):
    """EO-2.0 as published: the MAE's encoder under "encoder.", a tubelet of one frame, and a position embedding
    over 4 frames of 14×14 patches (224 px): averaged over the 4 frames, then resampled to the tile."""
    source = timm.create_model("vit_tiny_patch16_224", in_chans=6, img_size=224, num_classes=0, **TINY)
    state = {f"encoder.{k}": v for k, v in source.state_dict().items()}
    state["encoder.patch_embed.proj.weight"] = source.patch_embed.proj.weight.detach().unsqueeze(2)  # T = 1
    pos = source.pos_embed.detach()
    state["encoder.pos_embed"] = torch.cat([pos] + [pos[:, 1:] + f for f in (1.0, 2.0, 3.0)], dim=1)
    state["decoder.decoder_pred.weight"] = torch.zeros(3, 3)
    path = tmp_path / "Prithvi_EO_V2_300M.pt"
    torch.save({"model": state}, path)
    transform = FoundationWeights(path, bands=STORE, source="prithvi-eo-2.0-300m")
    model = build_model("vit_tiny_patch16_224", in_chans=len(STORE), num_classes=3, img_size=224, decoder_channels=16,
                        weights=path, weights_transform=transform, **TINY)
    net = model.backbone.net
    assert torch.allclose(net.pos_embed[:, 1:], pos[:, 1:] + 1.5)  # the mean of the 4 frames
    assert torch.equal(net.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)
    assert "averaged over time" in " ".join(transform.report.notes)


def test_eoscale_export_carries_its_bands(tmp_path):
    source = vit(3, 32)
    path = save_backbone(source.state_dict(), tmp_path / "backbone.safetensors", metadata={
        "bands": ["B04", "B03", "B02"], "mean": [1, 2, 3], "std": [1, 1, 1], "patch_size": 16, "img_size": 32,
        "model": "vit_tiny_patch16_224"})
    meta = read_export_metadata(path)
    assert meta["wavelengths"][0] == pytest.approx(664.6) and meta["model"] == "vit_tiny_patch16_224"
    net, report = load(path, ["B02", "B03", "B04", "B08"])
    w, src = net.patch_embed.proj.weight, source.patch_embed.proj.weight
    assert torch.equal(w[:, :3], src[:, [2, 1, 0]]) and torch.equal(w[:, 3], src[:, 0])  # B08 <- nearest B04
    assert report.format == "eoscale export"
    assert len(load_file(str(path))) == len(source.state_dict())


def test_unusable_files_are_one_line_errors(tmp_path):
    torch.save(vit(13, 32).state_dict(), tmp_path / "ssl.pth")
    with pytest.raises(BandMismatchError, match="no band in common") as err:
        load(tmp_path / "ssl.pth", ["X1", "X2"], "ssl4eo-s12")
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="ssl4eo-s12"):  # 13 bands without names: suggest the preset
        load(tmp_path / "ssl.pth", STORE)
    torch.save({"conv1.weight": torch.zeros(8, 3, 7, 7)}, tmp_path / "cnn.pth")
    with pytest.raises(InputError, match="not a known format"):  # band names given, no preset: generic layouts
        load(tmp_path / "cnn.pth", STORE, STORE)
    with pytest.raises(InputError, match="preset 'prithvi-eo-2.0-300m'.*expected key 'encoder.patch_embed"):
        load(tmp_path / "cnn.pth", STORE, "prithvi-eo-2.0-300m")
    with pytest.raises(InputError, match="not one of ssl4eo-s12, prithvi-eo-1.0-100m, prithvi-eo-2.0-300m"):
        FoundationWeights(tmp_path / "ssl.pth", bands=STORE, source="landsat")
    assert json.dumps({k: p.as_dict() for k, p in PRESETS.items()})  # presets are plain data


def _preset_file(preset, tmp_path, *, channels=None, patch=None, prefix=None):
    """A synthetic state dict in `preset`'s declared layout (optionally with one thing wrong)."""
    torch.manual_seed(0)
    src = timm.create_model("vit_tiny_patch16_224", in_chans=channels or len(preset.bands), img_size=2 * preset.patch_size,
                            patch_size=preset.patch_size, num_classes=0, **TINY)
    prefix = preset.key_prefix if prefix is None else prefix
    state = {prefix + k: v for k, v in src.state_dict().items()}
    if preset.temporal_patch:
        state[prefix + "patch_embed.proj.weight"] = src.patch_embed.proj.weight.detach().unsqueeze(2)  # T=1
    if patch is not None:
        state[prefix + "patch_embed.proj.weight"] = patch
    path = tmp_path / f"{preset.name}.pt"
    torch.save({"state_dict": state}, path)
    return path, src


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_loads_its_declared_layout(tmp_path, name):
    preset = PRESETS[name]
    assert preset.bands and timm.is_model(preset.model) and f"patch{preset.patch_size}_" in preset.model
    assert preset.mean is None or len(preset.mean) == len(preset.bands) == len(preset.std)
    path, src = _preset_file(preset, tmp_path)
    bands = list(preset.bands[:3])
    net, report = load(path, bands, name)
    assert report.copied == bands and not report.filled
    if preset.patch_size == 16:  # the model's; another one is resampled
        assert torch.equal(net.patch_embed.proj.weight, src.patch_embed.proj.weight[:, :3])
    else:
        assert any("resampled" in n for n in report.notes)
    assert torch.equal(net.blocks[1].attn.qkv.weight, src.blocks[1].attn.qkv.weight)


@pytest.mark.parametrize("name", list(PRESETS))
def test_wrong_file_for_a_preset_names_it(tmp_path, name):
    preset = PRESETS[name]
    path, _ = _preset_file(preset, tmp_path, channels=len(preset.bands) + 1)
    with pytest.raises(InputError, match=f"preset {name!r}: expected patch_embed.proj.weight of shape") as err:
        load(path, list(preset.bands), name)
    assert "\n" not in str(err.value) and f"{len(preset.bands) + 1}" in str(err.value)
    path, _ = _preset_file(preset, tmp_path, prefix="weird.")
    with pytest.raises(InputError, match=f"preset {name!r}: expected key"):
        load(path, list(preset.bands), name)
    dims = (64, len(preset.bands), 1, 8, 8) if preset.temporal_patch else (64, len(preset.bands), 8, 8)
    path, _ = _preset_file(preset, tmp_path, patch=torch.zeros(dims))
    with pytest.raises(InputError, match=f"preset {name!r}.*found \\(64, {len(preset.bands)}"):
        load(path, list(preset.bands), name)
