"""Temporal MAE pretraining (`eoscale.train.tasks.temporal_mae`): tubes hide the same patch on every date, the loss
leaves out dates without observations and pixels without data, a tiny `eoscale pretrain` on a season store writes
a backbone that `configs/temporal_prithvi.yaml` fine-tunes with every weight as trained (the temporal patch
embedding and date encoding included), and a single-date store for it, or a season for the single-date MAE, is
refused in one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from eoscale.cli import main
from eoscale.models.temporal import TemporalViTBackbone, build_temporal_model
from eoscale.models.temporal_vit import TemporalViT
from eoscale.train.launch.cli import EoscaleCLI
from eoscale.train.tasks.temporal_mae import TemporalMaskedAutoencoder
from tests.time_stores import make_time_store

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# the shape of configs/temporal_prithvi.yaml's encoder, with a learnt date-encoding scale (a weight to carry over)
SHAPE = "{embed_dim: 64, depth: 2, num_heads: 2, patch_size: 8, coords_encoding: [time], coords_scale_learn: true}"
CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.precision", "32-true",
       "--trainer.enable_progress_bar", "false", "--trainer.logger", "false", "--data.init_args.num_workers", "0",
       "--data.init_args.batch_size", "4"]


def _model(masking: str = "tube", tubelet: int = 1) -> TemporalMaskedAutoencoder:
    torch.manual_seed(0)
    encoder = TemporalViT(in_chans=3, embed_dim=32, depth=1, num_heads=2, patch_size=4, tubelet=tubelet,
                          coords_encoding=("time",) if tubelet == 1 else ())
    return TemporalMaskedAutoencoder(TemporalViTBackbone(encoder), masking=masking, mask_ratio=0.75, decoder_dim=32,
                                     decoder_depth=1, decoder_heads=2)


def _stack(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two tiles of 4 dates, 3 bands, 16 px; tile 0's date 2 has no observations."""
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(2, 4, 3, 16, 16, generator=g)
    image[0, 2] = 0
    dates = torch.tensor([[19783, 19813, 19843, 19873]] * 2)
    return image, dates, torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 0.5, 1.0, 1.0]])


@pytest.mark.parametrize("tubelet", [1, 2])
def test_tube_masking_hides_the_same_patches_on_every_date_and_random_masking_does_not(tubelet):
    image, dates, valid = _stack()
    frames = 4 // tubelet
    for masking in ("tube", "random"):
        model = _model(masking, tubelet)
        noise = torch.rand(model.noise_shape(image), generator=torch.Generator().manual_seed(1))
        _, pred, mask = model(image, dates, valid, noise)
        assert pred.shape == (2, frames * 16, tubelet * 4 * 4 * 3)
        assert (mask.sum(dim=1) == frames * 12).all()  # 75% of the 16 patches (tokens) of every date
        per_date = mask.view(2, frames, 16)
        same = bool((per_date == per_date[:, :1]).all())
        assert same if masking == "tube" else not same
        if masking == "tube":  # the noise ranks patches: the 4 lowest stay visible on every date
            visible = noise.argsort(dim=1)[:, :4]
            assert (per_date[:, 0].gather(1, visible) == 0).all()


def test_the_loss_ignores_dates_without_observations_and_pixels_without_data():
    model = _model("tube")
    image, dates, valid = _stack()
    noise = torch.rand(model.noise_shape(image), generator=torch.Generator().manual_seed(2))
    loss, pred, mask = model(image, dates, valid, noise)
    # anything on tile 0's masked date (pixels that the loader would have zeroed) changes neither encoder nor loss
    garbage = image.clone()
    garbage[0, 2] = 50 * torch.randn(3, 16, 16)
    torch.testing.assert_close(model(garbage, dates, valid, noise)[0], loss)
    # ... but the same date marked valid does count
    assert not torch.allclose(model(garbage, dates, torch.ones_like(valid), noise)[0], loss)
    # a tile without a single valid date: nothing of it counts, and nothing turns NaN
    none = valid.clone()
    none[0] = 0
    lone, pred_none, _ = model(image, dates, none, noise)
    assert torch.isfinite(pred_none).all() and torch.isfinite(lone)
    anything = image.clone()  # (finite outputs alone held for a loss that still counted the tile)
    anything[0] = 50 * torch.randn(anything[0].shape, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(model(anything, dates, none, noise)[0], lone)
    # pixels without data (0 in every band) on a valid date: no prediction there changes the loss (every token
    # taken as hidden, so that each counts)
    holes = image.clone()
    holes[1, 0, :, :8, :8] = 0  # tokens 0, 1, 4, 5 of tile 1's first date
    hidden, frames = torch.ones_like(mask), valid > 0
    base = model.loss(holes, pred, hidden, frames)
    wild = pred.clone()
    wild[1, [0, 1, 4, 5]] += 1e3
    torch.testing.assert_close(model.loss(holes, wild, hidden, frames), base)
    wild[1, 3] += 1.0  # token 3 (row 0, column 3) has data
    assert model.loss(holes, wild, hidden, frames) > base

def test_a_tubelet_backbone_loads_with_its_temporal_patch_embedding_as_it_is(tmp_path):
    from eoscale.models.foundation import save_backbone

    net = _model("tube", tubelet=2).backbone.net
    path = save_backbone(net.state_dict(), tmp_path / "b.safetensors",
                         metadata={"bands": ["B02", "B03", "B04"], "mean": [0.0] * 3, "std": [1.0] * 3,
                                   "patch_size": 4, "img_size": 16, "model": "temporal_vit"})
    model = build_temporal_model("temporal_vit", in_chans=3, num_classes=2, weights=path, embed_dim=32, depth=1,
                                 num_heads=2, patch_size=4, tubelet=2)
    loaded = model.backbone.net.patch_embed.proj.weight
    assert loaded.shape == (32, 3, 2, 4, 4)  # two dates' filters, not one averaged
    torch.testing.assert_close(loaded, net.patch_embed.proj.weight)


@pytest.fixture(scope="module")
def season(tmp_path_factory) -> Path:
    return make_time_store(tmp_path_factory.mktemp("season"), steps=3)


def test_a_tiny_pretrain_writes_a_backbone_that_temporal_prithvi_fine_tunes(season, tmp_path):
    root = tmp_path / "mae"
    assert main(["pretrain", "--config", str(CONFIGS / "temporal_mae_pretrain.yaml"), *CPU,
                 "--data.init_args.store", str(season), "--trainer.default_root_dir", str(root),
                 "--checkpoint.dirpath", str(root / "checkpoints"), "--trainer.max_steps", "4",
                 "--trainer.val_check_interval", "4", "--model.init_args.backbone_kwargs", SHAPE,
                 "--model.init_args.lr", "1e-2", "--model.init_args.warmup_steps", "1"]) == 0
    export = root / "checkpoints" / "backbone.safetensors"
    with safe_open(str(export), framework="pt") as f:
        meta = json.loads(f.metadata()["eoscale"])
    assert (meta["model"], meta["patch_size"], meta["tubelet"], meta["time_steps"], meta["in_chans"]) == (
        "temporal_vit", 8, 1, 3, 10)
    saved = load_file(str(export))
    assert saved["patch_embed.proj.weight"].shape == (64, 10, 1, 8, 8)
    assert not any(k.startswith(("decoder", "mask_token")) for k in saved)
    torch.manual_seed(0)  # the pretraining's initial encoder (init_seed 0): pretraining moved it
    init = TemporalViT(in_chans=10, embed_dim=64, depth=2, num_heads=2, patch_size=8, coords_encoding=("time",),
                       coords_scale_learn=True).state_dict()
    assert not torch.equal(saved["patch_embed.proj.weight"], init["patch_embed.proj.weight"])
    assert not torch.equal(saved["temporal_embed_enc.scale"], init["temporal_embed_enc.scale"])

    # fine-tuning with the backbone frozen (finetune: linear): its encoder is the file's, weight for weight
    cli = EoscaleCLI(args=["fit", "--config", str(CONFIGS / "temporal_prithvi.yaml"), *CPU,
                           "--data.init_args.store", str(season), "--trainer.default_root_dir", str(tmp_path / "seg"),
                           "--trainer.max_steps", "1", "--trainer.val_check_interval", "1",
                           "--model.init_args.backbone_kwargs", SHAPE[:-1] + ", out_indices: [1]}",
                           "--model.init_args.weights", str(export), "--model.init_args.finetune", "linear"])
    encoder = cli.model.model.backbone.net.state_dict()
    assert set(encoder) == set(saved)
    for key, value in saved.items():
        assert torch.equal(encoder[key].cpu(), value), key


def test_a_single_date_store_for_temporal_mae_and_a_season_for_mae_are_refused_in_one_line(season, capsys, tmp_path):
    single = season.parent / "tiles.zarr"  # the season's single-date source (`make_time_store`)
    for config, store, expected in (
            ("temporal_mae_pretrain.yaml", single, "holds one date a tile"),
            ("mae_pretrain.yaml", season, "holds 3 dates a tile: MAE pretraining takes one date")):
        root = tmp_path / config
        assert main(["pretrain", "--config", str(CONFIGS / config), *CPU, "--data.init_args.store", str(store),
                     "--trainer.default_root_dir", str(root), "--checkpoint.dirpath", str(root / "checkpoints"),
                     "--trainer.max_steps", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
        assert not list(root.rglob("*.ckpt")) and not list(root.rglob("*.safetensors"))
