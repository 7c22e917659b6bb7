"""`spectral_mlp`: a per-pixel MLP beside the decoder, rebuilt from a checkpoint's model arguments."""

from __future__ import annotations

import torch

from eoscale.contract import model_args_from_hparams
from eoscale.models import build_model


def test_pixel_head_adds_per_pixel_logits_and_rebuilds():
    torch.manual_seed(0)
    model = build_model("resnet18", in_chans=4, num_classes=5, spectral_mlp=16).eval()
    assert hasattr(model, "pixel_head")
    x = torch.randn(2, 4, 32, 32)
    with torch.no_grad():
        out = model(x)
        spatial = torch.nn.functional.interpolate(model.decoder(model.neck(model.backbone(x))), size=(32, 32),
                                                  mode="bilinear", align_corners=False)
        assert torch.allclose(out - spatial, model.pixel_head(x), atol=1e-5)
    args = model_args_from_hparams({"backbone": "resnet18", "in_chans": 4, "num_classes": 5, "spectral_mlp": 16})
    rebuilt = build_model(**args).eval()
    rebuilt.load_state_dict(model.state_dict())  # strict: same modules
    plain = build_model("resnet18", in_chans=4, num_classes=5, spectral_mlp=0)
    assert not hasattr(plain, "pixel_head")
    assert set(plain.state_dict()) == {k for k in model.state_dict() if not k.startswith("pixel_head.")}
