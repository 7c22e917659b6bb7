"""The temporal models: a Prithvi-EO-2.0-layout state dict (T = 4, the "TL" encodings) loads into `TemporalViT`
with its temporal weights as they are, and its forward equals a reference written here from the published
equations (numpy sine-cosine tables, explicit attention); both temporal segmentation models leave missing dates
out (what a masked date holds changes nothing); L-TAE gives a masked date no weight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eoscale.errors import InputError
from eoscale.models.ltae import LTAE
from eoscale.models.temporal import build_temporal_model, date_coords
from eoscale.models.temporal_vit import TemporalViT, load_prithvi_state

D, DEPTH, HEADS, C, T, P, SIZE = 64, 2, 4, 6, 4, 4, 16


def _sincos(dim: int, pos: np.ndarray) -> np.ndarray:
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    out = np.outer(pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _positions(dim: int, t: int, h: int, w: int) -> np.ndarray:
    """Prithvi's 3-D table: for token (ti, hi, wi) in (t, h, w) order, [column | row | time] encodings."""
    rows = []
    for ti in range(t):
        for hi in range(h):
            for wi in range(w):
                rows.append(np.concatenate([_sincos(dim // 16 * 6, np.array([wi]))[0], _sincos(dim // 16 * 6, np.array([hi]))[0],
                                            _sincos(dim // 16 * 4, np.array([ti]))[0]]))
    return np.stack(rows)


def _layer_norm(x, w, b, eps=1e-6):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _reference(state: dict, x: np.ndarray, coords: np.ndarray, location: np.ndarray) -> np.ndarray:
    """Prithvi-EO-2.0's encoder forward (float64), from its state dict alone."""
    s = {k.removeprefix("encoder."): v.double().numpy() for k, v in state.items() if k.startswith("encoder.")}
    b, c, t, hh, ww = x.shape
    h, w = hh // P, ww // P
    patches = x.reshape(b, c, t, h, P, w, P).transpose(0, 2, 3, 5, 1, 4, 6).reshape(b, t * h * w, c * P * P)
    kernel = s["patch_embed.proj.weight"][:, :, 0].reshape(D, c * P * P)
    tokens = patches @ kernel.T + s["patch_embed.proj.bias"] + _positions(D, t, h, w)
    year = _sincos(D // 2, coords[..., 0]).reshape(b, t, -1)
    day = _sincos(D - D // 2, coords[..., 1]).reshape(b, t, -1)
    tokens = tokens + (s["temporal_embed_enc.scale"] * np.concatenate([year, day], -1)).repeat(h * w, axis=1)
    lat, lon = _sincos(D // 2, location[:, 0]), _sincos(D - D // 2, location[:, 1])
    tokens = tokens + (s["location_embed_enc.scale"] * np.concatenate([lat, lon], -1))[:, None]
    tokens = np.concatenate([np.broadcast_to(s["cls_token"], (b, 1, D)), tokens], axis=1)
    for i in range(DEPTH):
        p = {k.removeprefix(f"blocks.{i}."): v for k, v in s.items() if k.startswith(f"blocks.{i}.")}
        y = _layer_norm(tokens, p["norm1.weight"], p["norm1.bias"])
        qkv = (y @ p["attn.qkv.weight"].T + p["attn.qkv.bias"]).reshape(b, -1, 3, HEADS, D // HEADS).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // HEADS)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = scores / scores.sum(-1, keepdims=True)
        y = (attn @ v).transpose(0, 2, 1, 3).reshape(b, -1, D)
        tokens = tokens + y @ p["attn.proj.weight"].T + p["attn.proj.bias"]
        y = _layer_norm(tokens, p["norm2.weight"], p["norm2.bias"])
        y = _gelu(y @ p["mlp.fc1.weight"].T + p["mlp.fc1.bias"]) @ p["mlp.fc2.weight"].T + p["mlp.fc2.bias"]
        tokens = tokens + y
    return _layer_norm(tokens, s["norm.weight"], s["norm.bias"])


def _prithvi_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A Prithvi-EO-2.0 "TL" MAE state dict of the published key names and shapes (small sizes), random values."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    state = {"encoder.cls_token": r(1, 1, D), "encoder.pos_embed": torch.zeros(1, 1 + T * (SIZE // P) ** 2, D),
             "encoder.patch_embed.proj.weight": r(D, C, 1, P, P), "encoder.patch_embed.proj.bias": r(D),
             "encoder.temporal_embed_enc.scale": torch.tensor([0.7]), "encoder.location_embed_enc.scale": torch.tensor([0.3]),
             "encoder.norm.weight": 1 + r(D), "encoder.norm.bias": r(D),
             "decoder.mask_token": r(1, 1, 32), "decoder.decoder_embed.weight": r(32, D)}
    for i in range(DEPTH):
        for name, shape in (("norm1", (D,)), ("norm2", (D,))):
            state[f"encoder.blocks.{i}.{name}.weight"] = 1 + r(*shape)
            state[f"encoder.blocks.{i}.{name}.bias"] = r(*shape)
        for name, (o, n) in (("attn.qkv", (3 * D, D)), ("attn.proj", (D, D)), ("mlp.fc1", (4 * D, D)), ("mlp.fc2", (D, 4 * D))):
            state[f"encoder.blocks.{i}.{name}.weight"] = r(o, n)
            state[f"encoder.blocks.{i}.{name}.bias"] = r(o)
    return state


def _encoder() -> TemporalViT:
    return TemporalViT(in_chans=C, embed_dim=D, depth=DEPTH, num_heads=HEADS, patch_size=P, num_frames=T,
                       coords_encoding=("time", "location")).eval()


def test_a_prithvi_state_dict_loads_with_its_temporal_weights_and_the_forward_equals_the_reference():
    state = _prithvi_state()
    encoder = _encoder()
    left = load_prithvi_state(encoder, {"model": state})
    assert sorted(left) == ["decoder.decoder_embed.weight", "decoder.mask_token", "encoder.pos_embed"]
    # the temporal patch embedding and the date encoding's scale as they are in the file, not averaged
    assert encoder.patch_embed.proj.weight.shape == (D, C, 1, P, P)
    assert torch.equal(encoder.patch_embed.proj.weight, state["encoder.patch_embed.proj.weight"])
    assert encoder.temporal_embed_enc.scale.item() == pytest.approx(0.7)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, C, T, SIZE, SIZE))
    coords = np.stack([rng.integers(2018, 2025, (2, T)), rng.integers(0, 365, (2, T))], -1).astype(np.float64)
    location = rng.uniform(-60, 60, (2, 2))
    with torch.no_grad():
        got = encoder(torch.tensor(x, dtype=torch.float32), temporal_coords=torch.tensor(coords, dtype=torch.float32),
                      location_coords=torch.tensor(location, dtype=torch.float32))
    expected = _reference(state, x, coords, location)
    assert got.shape == (2, 1 + T * (SIZE // P) ** 2, D)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_state_dict_of_another_shape_is_refused_in_one_line():
    state = _prithvi_state()
    state["encoder.patch_embed.proj.weight"] = state["encoder.patch_embed.proj.weight"][:, :4]
    with pytest.raises(InputError, match=r"patch_embed.proj.weight has shape \(64, 4, 1, 4, 4\)") as err:
        load_prithvi_state(_encoder(), state, path="prithvi.pt")
    assert "\n" not in str(err.value)
    del state["encoder.blocks.1.mlp.fc2.bias"]
    with pytest.raises(InputError, match="lacks encoder.blocks.1.mlp.fc2.bias"):
        load_prithvi_state(_encoder(), state)


def test_the_segmenter_loads_prithvi_weights_from_a_file(tmp_path):
    path = tmp_path / "prithvi.pt"
    torch.save(_prithvi_state(), path)
    model = build_temporal_model("temporal_vit", in_chans=C, num_classes=3, embed_dim=D, depth=DEPTH, num_heads=HEADS,
                                 patch_size=P, num_frames=T, coords_encoding=["time", "location"], weights=str(path))
    assert torch.equal(model.backbone.net.blocks[1].mlp.fc2.bias, _prithvi_state()["encoder.blocks.1.mlp.fc2.bias"])


def test_dates_become_year_and_day_of_year():
    days = torch.tensor([[np.datetime64("2024-03-01", "D").astype(np.int64), np.datetime64("2023-12-31", "D").astype(np.int64),
                          np.datetime64("2000-01-01", "D").astype(np.int64), torch.iinfo(torch.int64).min]])
    assert date_coords(days).tolist() == [[[2024, 60], [2023, 364], [2000, 0], [0, 0]]]


@pytest.mark.parametrize("architecture, options", [
    ("utae", {"backbone": "resnet18", "n_head": 4, "d_model": 32}),
    ("temporal_vit", {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 4, "coords_encoding": ["time"],
                      "out_indices": [0, 1, 0, 1]}),
])
def test_a_missing_date_changes_nothing_and_every_valid_date_counts(architecture, options):
    torch.manual_seed(0)
    model = build_temporal_model(architecture, in_chans=5, num_classes=3, img_size=32, **options).eval()
    x = torch.randn(2, 3, 5, 32, 32)
    dates = torch.tensor([[19700, 19730, 19760]] * 2)
    valid = torch.tensor([[1.0, 0.0, 0.6], [1.0, 1.0, 1.0]])
    with torch.no_grad():
        before = model(x, dates=dates, date_valid=valid)
        changed = x.clone()
        changed[:, 1] = torch.randn(2, 5, 32, 32) * 5  # the second date: missing in tile 0, valid in tile 1
        after = model(changed, dates=dates, date_valid=valid)
    assert before.shape == (2, 3, 32, 32)
    assert torch.equal(before[0], after[0])  # the missing date took no part
    assert not torch.allclose(before[1], after[1])  # a valid one did


def test_ltae_gives_a_masked_date_no_weight():
    torch.manual_seed(0)
    ltae = LTAE(8, n_head=2, d_k=4, d_model=16, mlp=(16, 8)).eval()
    x, days = torch.randn(5, 4, 8), torch.tensor([[0, 30, 60, 90]] * 5)
    mask = torch.tensor([[True, False, True, True]] * 4 + [[False] * 4])
    out, attention = ltae(x, days, mask)
    assert out.shape == (5, 8) and attention.shape == (2, 5, 4)
    assert (attention[:, :4, 1] == 0).all() and torch.allclose(attention.sum(-1), torch.ones(2, 5))
    assert torch.allclose(attention[:, 4], torch.full((2, 4), 0.25))  # no valid date: all alike


def test_utae_leaves_a_masked_date_out_of_the_backbones_batch_statistics():
    torch.manual_seed(0)
    model = build_temporal_model("utae", in_chans=5, num_classes=3, img_size=32, backbone="resnet18", n_head=4,
                                 d_model=32).train()
    x, dates = torch.randn(2, 3, 5, 32, 32), torch.tensor([[19700, 19730, 19760]] * 2)
    valid = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)  # (L-TAE's dropout)
    before = model(x, dates=dates, date_valid=valid)
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    model.load_state_dict(state)
    changed = x.clone()
    changed[0, 1] = torch.randn(5, 32, 32) * 5 + 3  # masked dates, in training mode (batch statistics)
    changed[1, 2] = torch.randn(5, 32, 32) * 5 - 3
    torch.manual_seed(1)
    after = model(changed, dates=dates, date_valid=valid)
    assert torch.equal(before, after)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats.items())


def test_utae_positions_a_date_by_its_day_of_the_year_whatever_the_tiles_first_valid_date():
    """Issue 47: L-TAE's positions were days since each tile's first *valid* date, so a cloud over a tile's first
    date shifted the position of every other date of that tile (and two windows of one place at predict disagreed).
    A date's position is now its day of the year; checkpoints fitted the old way keep it (inferred when unrecorded)."""
    from eoscale.contract import model_spec
    from eoscale.models.temporal import day_of_year, season_days

    dates = torch.tensor([[19700, 19730, 19760]] * 2)  # 2023-12-09, 2024-01-08, 2024-02-07
    cloudy_first = torch.tensor([[False, True, True], [True, True, True]])
    assert day_of_year(dates, cloudy_first).tolist() == [[0, 7, 37], [342, 7, 37]]  # a date's own, in both tiles
    assert season_days(dates, cloudy_first).tolist() == [[0, 0, 30], [0, 30, 60]]  # the old, shifted encoding
    unknown = torch.tensor([[torch.iinfo(torch.int64).min, 19730, 19760]])
    assert day_of_year(unknown, torch.ones(1, 3, dtype=torch.bool)).tolist() == [[0, 7, 37]]
    model = build_temporal_model("utae", in_chans=5, num_classes=3, img_size=32, backbone="resnet18", n_head=4,
                                 d_model=32)
    assert model.positions is day_of_year  # the default of every new model
    old = model_spec({"eoscale_model": {"args": {"architecture": "utae", "in_chans": 5, "num_classes": 3}}}, "x.ckpt")
    assert old["args"]["date_encoding"] == "first_valid"  # a U-TAE checkpoint of before: rebuilt as it was fitted
    assert build_temporal_model("utae", in_chans=5, num_classes=3, img_size=32, backbone="resnet18", n_head=4,
                                d_model=32, date_encoding=old["args"]["date_encoding"]).positions is season_days
    with pytest.raises(InputError, match="date_encoding='weeks'"):
        build_temporal_model("utae", in_chans=5, num_classes=3, date_encoding="weeks")
    from eoscale.contract import model_args_from_hparams
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    task = TemporalSegmentationTask("utae", backbone_kwargs={"n_head": 4, "d_model": 32})
    assert model_args_from_hparams(task.hparams)["date_encoding"] == "day_of_year"  # recorded in every new checkpoint


def test_utae_pixel_mask_gives_a_date_no_weight_where_it_holds_nothing():
    """Issue 47: L-TAE's mask was a tile's dates only, so at the pixels a cloud hid on a date (every channel 0 after
    the preparation) that date was attended to as an observation of the mean spectrum. With `pixel_mask` (every new
    fit's, `TemporalSegmentationTask`), a date weighs 0 at the cells of the coarse map where it holds nothing."""
    torch.manual_seed(0)
    options = {"backbone": "resnet18", "n_head": 4, "d_model": 32, "out_indices": [1, 2, 3]}  # coarse map 2×2
    x, dates = torch.randn(1, 3, 5, 32, 32), torch.tensor([[19700, 19730, 19760]])
    x[0, 1, :, :, :16] = 0  # the second date clouded over the left half of the tile
    seen = {}
    for pixel_mask in (False, True):
        model = build_temporal_model("utae", in_chans=5, num_classes=3, img_size=32, pixel_mask=pixel_mask,
                                     **options).eval()
        model.ltae.register_forward_hook(lambda module, args, out, key=pixel_mask: seen.update({key: out[1]}))
        with torch.no_grad():
            model(x, dates=dates, date_valid=torch.ones(1, 3))
    left, right = [0, 2], [1, 3]  # the 2×2 cells, row-major
    assert (seen[True][:, left, 1] == 0).all() and (seen[True][:, right, 1] > 0).all()
    assert (seen[False][:, left, 1] > 0).all()  # without it, the clouded date counted


def test_utae_stems_take_each_sensor_through_its_own_stem_and_old_checkpoints_rebuild_without_the_new_parts():
    """A U-TAE of several sensors (`fusion="stems"`: each date's sensors averaged over those present at each pixel,
    before the per-date backbone) is built from the model args a new checkpoint records; a U-TAE checkpoint of
    before (no `pixel_mask`, no `fusion` in its args) rebuilds as it was fitted."""
    from eoscale.contract import model_args_from_hparams, model_spec
    from eoscale.models import build_model
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    task = TemporalSegmentationTask("utae", backbone_kwargs={"n_head": 4, "d_model": 32}, fusion="stems")
    sensors = [{"name": "sentinel-2", "bands": ["B02", "B03", "B04"]}, {"name": "sentinel-1", "bands": ["VV", "VH"]}]
    task.hparams.update(in_chans=5, num_classes=3, img_size=32, sensors=sensors)
    args = model_args_from_hparams(task.hparams)
    assert args["pixel_mask"] is True and args["fusion"] == "stems" and args["sensors"] == sensors
    model = build_model(**args).eval()
    assert model.stems is not None and model.backbone.net.conv1.in_channels == model.stems.channels
    x = torch.randn(2, 3, 5, 32, 32)
    x[:, :, :3, :16] = 0  # the optical group absent over the top half of every date
    with torch.no_grad():
        assert model(x, dates=torch.tensor([[19700, 19730, 19760]] * 2)).shape == (2, 3, 32, 32)
    old = model_spec({"eoscale_model": {"args": {"architecture": "utae", "backbone": "resnet18", "in_chans": 5,
                                                 "num_classes": 3, "n_head": 4, "d_model": 32}}}, "x.ckpt")
    rebuilt = build_model(**old["args"])
    assert rebuilt.pixel_mask is False and rebuilt.stems is None
    with pytest.raises(InputError, match="fusion='tokens'"):
        build_model("resnet18", architecture="utae", in_chans=5, num_classes=3, fusion="tokens", sensors=sensors)


SENSORS = [{"name": "sentinel-2", "bands": ["B02", "B03", "B04"]}, {"name": "sentinel-1", "bands": ["VV", "VH"]}]


def test_utae_presence_channels_tell_a_sensor_absent_at_a_pixel_from_its_mean_spectrum():
    """Issue 47: on a date of a fused season where a cloud hides the optical bands and the radar sees, the prepared
    optical channels read 0, which is also the optical mean spectrum: the per-date backbone got the same input for
    "no optical observation" as for "an observation of the mean". With `presence_channels`, each date's backbone
    input carries one channel a sensor after the bands, 1 where that sensor's channels are not all 0."""
    from eoscale.models import build_model

    torch.manual_seed(0)
    options = {"backbone": "resnet18", "n_head": 4, "d_model": 32, "out_indices": [1, 2, 3]}
    x = torch.randn(2, 3, 5, 32, 32)
    x[:, 1, :3, :, :16] = 0  # the second date's optical bands absent over the left half (a cloud), the radar there
    x[0, 2, 3:] = 0  # the third date of the first tile without a radar pass
    model = build_model(architecture="utae", in_chans=5, num_classes=3, img_size=32, presence_channels=True,
                        sensors=SENSORS, **options).eval()
    assert model.backbone.net.conv1.in_channels == 5 + 2
    seen = []
    model.backbone.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        assert model(x, dates=torch.tensor([[19700, 19730, 19760]] * 2)).shape == (2, 3, 32, 32)
    (fed,) = seen
    fed = fed.unflatten(0, (2, 3))  # every date valid: one backbone batch of B × T dates
    assert torch.equal(fed[:, :, :5], x)  # the bands as they came
    optical, radar = fed[:, :, 5], fed[:, :, 6]
    assert set(optical.unique().tolist()) == {0.0, 1.0}
    assert (optical[:, 1, :, :16] == 0).all() and (optical[:, 1, :, 16:] == 1).all()
    assert (optical[:, [0, 2]] == 1).all()
    assert (radar[0, 2] == 0).all() and (radar[1, 2] == 1).all() and (radar[:, :2] == 1).all()
    # without them (every U-TAE before), the cloud's zeros and an optical observation at the mean are one input
    plain = build_model(architecture="utae", in_chans=5, num_classes=3, img_size=32, **options).eval()
    assert plain.presence is None and plain.backbone.net.conv1.in_channels == 5


def test_utae_presence_channels_are_recorded_in_the_model_args_and_old_checkpoints_rebuild_without_them():
    """A fit with `presence_channels` records the store's sensors and the option in its model args, and the network
    rebuilt from them takes the fitted weights; a U-TAE checkpoint of before (no `presence_channels`) rebuilds as it
    was fitted; the option without sensors, or on the temporal ViT, is refused in one line."""
    from types import SimpleNamespace

    from eoscale.contract import model_args_from_hparams, model_spec
    from eoscale.models import build_model
    from eoscale.sensors.groups import parse_groups
    from eoscale.train.tasks.temporal import TemporalSegmentationTask

    groups = parse_groups(SENSORS, [b for s in SENSORS for b in s["bands"]])
    store = SimpleNamespace(labelled=True, num_bands=5, num_classes=3, tile_size=32, sensor_groups=groups, time_steps=3)
    task = TemporalSegmentationTask("utae", backbone_kwargs={"n_head": 4, "d_model": 32, "presence_channels": True})
    task.read_datamodule(store)
    args = model_args_from_hparams(task.hparams)
    assert args["presence_channels"] is True and args["sensors"] == SENSORS and "fusion" not in args
    fitted = task.configure_models()
    rebuilt = build_model(**model_spec({"eoscale_model": {"args": args}}, "x.ckpt")["args"])
    rebuilt.load_state_dict(fitted.state_dict())  # strict: the same parts, the same shapes
    assert rebuilt.backbone.net.conv1.in_channels == 7
    old = model_spec({"eoscale_model": {"args": {"architecture": "utae", "backbone": "resnet18", "in_chans": 5,
                                                 "num_classes": 3, "n_head": 4, "d_model": 32}}}, "x.ckpt")
    before = build_model(**old["args"])
    assert before.presence is None and before.backbone.net.conv1.in_channels == 5
    with pytest.raises(InputError, match="presence_channels=True needs the input's sensors"):
        build_model("resnet18", architecture="utae", in_chans=5, num_classes=3, presence_channels=True)
    with pytest.raises(InputError, match="presence_channels is U-TAE's option"):
        build_model("resnet18", architecture="temporal_vit", in_chans=5, num_classes=3, presence_channels=True,
                    sensors=SENSORS)
