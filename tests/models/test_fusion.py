"""Networks of several sensors (`eoscale.models.fusion`): shapes, presence read from the zeros, the stems' and patch
embeddings' averages over the sensors present, models without sensors unchanged, refusals."""

from __future__ import annotations

import pytest
import torch

from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.models.fusion import SensorPatchEmbed, SensorStems, sensor_groups

SENSORS = [{"name": "sentinel-2", "bands": ["B02", "B03", "B04", "B08", "B11", "B12"]},
           {"name": "sentinel-1", "bands": ["VV", "VH"]}]
VIT = {"depth": 2, "patch_size": 8}


def _input(seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 8, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("backbone", "fusion", "kwargs"), [("resnet18", "stems", {}),
                                                            ("vit_tiny_patch16_224", "tokens", VIT),
                                                            ("vit_tiny_patch16_224", "stems", VIT)])
def test_fusion_models_map_tiles_with_a_sensor_missing(backbone: str, fusion: str, kwargs: dict):
    torch.manual_seed(0)
    model = build_model(backbone, in_chans=8, num_classes=5, img_size=32, sensors=SENSORS, fusion=fusion,
                        decoder_channels=32, spectral_mlp=8, **kwargs).eval()
    x = _input()
    x[0, :6] = 0  # tile 0: no optical data
    x[1, 6:, :, :16] = 0  # tile 1: no radar on its left half
    with torch.no_grad():
        out = model(x)
    assert out.shape == (2, 5, 32, 32) and torch.isfinite(out).all()
    # the network reads presence: nothing of the optical sensor's own layer reaches the map of tile 0, which has no
    # optical data, while tile 1's map (optical everywhere) moves with it. A network that took the zeros as data would
    # pass the optical layer's output at 0 (its biases, GroupNorm's shift) into the average, and fail here.
    layer = model.stem.stems[0] if fusion == "stems" else model.backbone.net.patch_embed.embeds[0]
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(torch.rand(parameter.shape, generator=torch.Generator().manual_seed(1)) + 0.5)
        if fusion == "tokens":
            model.backbone.net.patch_embed.sensor_embed[0] += 1.0
        moved = model(x)
    torch.testing.assert_close(moved[0], out[0], rtol=1e-5, atol=1e-5)
    assert (moved[1] - out[1]).abs().max() > 1e-2


def test_stems_average_over_the_sensors_present_at_each_pixel():
    torch.manual_seed(0)
    groups = sensor_groups(SENSORS, in_chans=8, fusion="stems")
    stems = SensorStems(groups, width=16).eval()
    x = _input()
    x[:, :6, :8] = 0  # rows 0-7: radar only
    x[:, 6:, :, :8] = 0  # columns 0-7: optical only (rows 0-7 there: nothing)
    with torch.no_grad():
        out = stems(x)
        optical, radar = (stem(x[:, g.channels]) for stem, g in zip(stems.stems, groups, strict=True))
    torch.testing.assert_close(out[..., 8:, 8:], (optical + radar)[..., 8:, 8:] / 2)
    torch.testing.assert_close(out[..., :8, 8:], radar[..., :8, 8:])
    torch.testing.assert_close(out[..., 8:, :8], optical[..., 8:, :8])
    assert (out[..., :8, :8] == 0).all()  # no sensor: 0


def test_patch_embedding_weighs_each_sensor_by_the_pixels_it_sees():
    torch.manual_seed(0)
    model = build_model("vit_tiny_patch16_224", in_chans=8, num_classes=3, img_size=32, sensors=SENSORS,
                        fusion="tokens", **VIT).eval()
    embed = model.backbone.net.patch_embed
    assert isinstance(embed, SensorPatchEmbed) and embed.grid_size == (4, 4) and embed.feat_ratio() == 8
    x = _input()
    x[:, :6, :8] = 0  # the first row of patches: radar only
    x[:, 6:, :4, 8:16] = 0  # patch (0, 1): radar on half of its pixels, no optical
    with torch.no_grad():
        tokens = embed(x)  # (B, 16, D)
        optical = embed.embeds[0](x[:, :6]) + embed.sensor_embed[0]
        radar = embed.embeds[1](x[:, 6:]) + embed.sensor_embed[1]
    torch.testing.assert_close(tokens[:, 0], radar[:, 0])  # patch (0, 0): radar only
    torch.testing.assert_close(tokens[:, 1], radar[:, 1])  # patch (0, 1): half radar, no optical: still radar's
    torch.testing.assert_close(tokens[:, 5], (optical[:, 5] + radar[:, 5]) / 2)  # both, whole


def test_a_model_without_sensors_is_todays():
    torch.manual_seed(0)
    plain = build_model("resnet18", in_chans=8, num_classes=3, spectral_mlp=8)
    torch.manual_seed(0)
    early = build_model("resnet18", in_chans=8, num_classes=3, spectral_mlp=8, sensors=SENSORS)  # no fusion: early
    assert list(plain.state_dict()) == list(early.state_dict())
    assert all(torch.equal(v, early.state_dict()[k]) for k, v in plain.state_dict().items())
    assert not hasattr(plain, "stem")


@pytest.mark.parametrize(("options", "message"), [
    ({"backbone": "resnet18", "fusion": "tokens", "sensors": SENSORS}, "no plain ViT: use fusion='stems'"),
    ({"backbone": "resnet18", "fusion": "stems"}, "needs the input's sensors"),
    ({"backbone": "resnet18", "fusion": "late", "sensors": SENSORS}, "fusion='late' is not one of"),
    ({"backbone": "resnet18", "fusion": "stems", "sensors": SENSORS[:1]}, "the sensors list 6 bands, in_chans=8"),
    ({"backbone": "resnet18", "fusion": "stems", "sensors": SENSORS, "task": "change"}, "for segmentation models"),
    ({"backbone": "resnet18", "fusion": "stems", "sensors": SENSORS, "fusion_width": 1}, "fusion_width=1"),
])
def test_bad_fusion_options_are_one_line(options: dict, message: str):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_model(in_chans=8, num_classes=3, img_size=32, **options)
