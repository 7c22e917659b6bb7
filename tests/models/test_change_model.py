"""The bi-temporal change network: one encoder shared by both dates, fusion that knows the direction of a change."""

from __future__ import annotations

import pytest
import torch

from eoscale.models import build_model
from eoscale.models.change import ChangeModel, split_dates


@pytest.mark.parametrize("backbone,kwargs", [("resnet18", {}), ("vit_tiny_patch16_224", {"patch_size": 8})])
def test_two_dates_in_change_logits_out_at_the_input_size(backbone, kwargs):
    torch.manual_seed(0)
    model = build_model(backbone, in_chans=4, num_classes=5, task="change", img_size=32, **kwargs).eval()
    assert isinstance(model, ChangeModel)
    with torch.no_grad():
        out = model(torch.randn(2, 8, 32, 32))
    assert out.shape == (2, 5, 32, 32)
    # one encoder for both dates: its input layer takes one date's bands
    first = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.in_channels == 4


def test_the_dates_are_encoded_by_the_same_weights_and_their_order_matters():
    torch.manual_seed(0)
    model = build_model("resnet18", in_chans=3, num_classes=4, task="change").eval()
    a, b = torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ab, ba, aa = model(torch.cat([a, b], 1)), model(torch.cat([b, a], 1)), model(torch.cat([a, a], 1))
        # the shared encoder: date b's features alone equal b encoded as the first date
        fa = model.neck(model.backbone(a))
        pair = model.neck(model.backbone(torch.cat([a, b])))
    assert all(torch.allclose(x[:1], y, atol=1e-5) for x, y in zip(pair, fa, strict=True))
    assert not torch.allclose(ab, ba)  # from-to: swapping the dates is another change
    assert not torch.allclose(ab, aa)


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_a_change_model_learns_where_a_pair_differs():
    """A few steps on pairs whose second date has a bright square: the model finds the square (a real fit, small)."""
    torch.manual_seed(0)
    model = build_model("resnet18", in_chans=2, num_classes=2, task="change", decoder_channels=32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)

    def batch():
        before = torch.randn(8, 2, 32, 32, generator=gen) * 0.3
        after = before + torch.randn(8, 2, 32, 32, generator=gen) * 0.05
        label = torch.zeros(8, 32, 32, dtype=torch.long)
        for i in range(8):
            y, x = torch.randint(0, 20, (2,), generator=gen).tolist()
            after[i, :, y:y + 12, x:x + 12] += 1.5
            label[i, y:y + 12, x:x + 12] = 1
        return torch.cat([before, after], 1), label

    for _ in range(30):  # IoU 0.82 after 30 steps here (0.85 after 60): the bound below has room
        x, y = batch()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x, y = batch()
    with torch.no_grad():
        pred = model(x).argmax(1)
    inter = ((pred == 1) & (y == 1)).sum().item()
    union = ((pred == 1) | (y == 1)).sum().item()
    assert inter / union > 0.6


def test_split_dates_refuses_channels_that_do_not_divide():
    assert split_dates(torch.zeros(1, 6, 4, 4), 2).shape == (1, 2, 3, 4, 4)
    with pytest.raises(ValueError, match="7 input channels"):
        split_dates(torch.zeros(1, 7, 4, 4), 2)
