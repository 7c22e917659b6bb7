"""Models: shapes for each backbone kind and head, names, local weights, sharding blocks, learning."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from eoscale.errors import InputError, InputNotFoundError
from eoscale.models import (
    SegmentationModel,
    TileClassifier,
    build_model,
    create_backbone,
    shardable_blocks,
)

BANDS, CLASSES, TILE = 10, 5, 64
# Small timm models of each kind: a ResNet, a ConvNeXt, a plain ViT at the tile size.
BACKBONES = {
    "resnet18": {},
    "convnext_atto": {},
    "vit_small_patch16_224": {"img_size": TILE},
}


@pytest.fixture(autouse=True)
def _seeded(one_thread):
    torch.manual_seed(0)  # and one torch thread: the test machine's cores are shared


def _tiles(batch: int = 2, size: int = TILE) -> torch.Tensor:
    return torch.randn(batch, BANDS, size, size)


@pytest.mark.parametrize("name", BACKBONES)
def test_segmentation_logits_at_input_size(name):
    model = build_model(name, in_chans=BANDS, num_classes=CLASSES, **BACKBONES[name])
    assert isinstance(model, SegmentationModel)
    assert model(_tiles()).shape == (2, CLASSES, TILE, TILE)
    assert model.neck.reductions == [4, 8, 16, 32]


@pytest.mark.parametrize("name", BACKBONES)
def test_classification_logits_per_tile(name):
    model = build_model(name, in_chans=BANDS, num_classes=CLASSES, task="classification", **BACKBONES[name])
    assert isinstance(model, TileClassifier)
    assert model(_tiles()).shape == (2, CLASSES)


@pytest.mark.parametrize("size", [72, 67])
def test_cnn_takes_sizes_that_are_not_multiples_of_32(size):
    model = build_model("resnet18", in_chans=BANDS, num_classes=CLASSES).eval()
    with torch.no_grad():
        assert model(_tiles(1, size)).shape == (1, CLASSES, size, size)


def test_backbone_reports_channels_and_strides_of_its_maps():
    backbone = create_backbone("resnet18", in_chans=BANDS)
    features = backbone(_tiles())
    assert backbone.channels == [64, 128, 256, 512]
    assert backbone.reductions == [4, 8, 16, 32]
    assert [f.shape[1:] for f in features] == [
        (c, TILE // r, TILE // r) for c, r in zip(backbone.channels, backbone.reductions, strict=True)
    ]


def test_vit_reads_chosen_blocks():
    backbone = create_backbone(
        "vit_small_patch16_224", in_chans=BANDS, img_size=TILE, out_indices=[2, 5, 8, 11]
    )
    assert [f.shape for f in backbone(_tiles(1))] == [(1, 384, 4, 4)] * 4
    model = build_model(
        "vit_small_patch16_224", in_chans=BANDS, num_classes=CLASSES, img_size=TILE, out_indices=[2, 5, 8, 11]
    )
    assert model(_tiles(1)).shape == (1, CLASSES, TILE, TILE)


def test_vit_needs_the_tile_size():
    with pytest.raises(InputError, match="img_size"):
        build_model("vit_small_patch16_224", in_chans=BANDS, num_classes=CLASSES)


def test_unknown_name_lists_close_timm_names():
    with pytest.raises(InputError, match="resnet18") as err:
        build_model("resnt18", in_chans=BANDS, num_classes=CLASSES)
    assert "'resnt18'" in str(err.value) and "\n" not in str(err.value)


def test_bad_task_and_option_are_user_errors():
    with pytest.raises(InputError, match="task='detection'"):
        build_model("resnet18", in_chans=BANDS, num_classes=CLASSES, task="detection")
    with pytest.raises(InputError, match="does not accept"):
        build_model("resnet18", in_chans=BANDS, num_classes=CLASSES, no_such_option=1)


def test_same_seed_same_weights():
    torch.manual_seed(7)
    first = build_model("convnext_atto", in_chans=BANDS, num_classes=CLASSES)
    torch.manual_seed(7)
    second = build_model("convnext_atto", in_chans=BANDS, num_classes=CLASSES)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("name", ["resnet18", "vit_small_patch16_224"])
def test_local_weights_round_trip_outputs(name, tmp_path, caplog):
    source = build_model(name, in_chans=BANDS, num_classes=CLASSES, **BACKBONES[name]).eval()
    path = tmp_path / "backbone.pt"
    torch.save(source.backbone.state_dict(), path)
    torch.manual_seed(1)  # another initialisation, which the file must overwrite
    target = build_model(
        name, in_chans=BANDS, num_classes=CLASSES, weights=str(path), **BACKBONES[name]
    ).eval()
    x = _tiles(1)
    with torch.no_grad():
        assert torch.equal(source.backbone(x)[-1], target.backbone(x)[-1])
    report = target.backbone.load_weights(path)
    assert report.missing == [] and report.unexpected == [] and report.loaded > 0


def test_weights_from_a_full_timm_model_fill_the_feature_backbone(tmp_path):
    import timm

    full = timm.create_model("convnext_atto", pretrained=False, in_chans=BANDS)  # `stages.0...`, a head
    path = tmp_path / "convnext_atto.pt"
    torch.save({"state_dict": full.state_dict()}, path)
    backbone = create_backbone("convnext_atto", in_chans=BANDS)  # `stages_0...`, no head
    report = backbone.load_weights(path)
    assert report.missing == []
    assert report.unexpected and all(k.startswith("head.") for k in report.unexpected)
    assert torch.equal(
        backbone.net.stages_3.blocks[0].conv_dw.weight, full.stages[3].blocks[0].conv_dw.weight
    )


def test_weights_of_another_shape_or_path_are_refused(tmp_path):
    import timm

    rgb = tmp_path / "rgb.pt"
    torch.save(timm.create_model("resnet18", pretrained=False, in_chans=3).state_dict(), rgb)
    with pytest.raises(InputError, match="conv1.weight"):
        create_backbone("resnet18", in_chans=BANDS, weights=rgb)
    with pytest.raises(InputNotFoundError):
        create_backbone("resnet18", in_chans=BANDS, weights=tmp_path / "missing.pt")


def test_weights_transform_hook_runs_first(tmp_path):
    import timm

    rgb = tmp_path / "rgb.pt"
    torch.save(timm.create_model("resnet18", pretrained=False, in_chans=3).state_dict(), rgb)

    def to_ten_bands(state, backbone):
        state["conv1.weight"] = state["conv1.weight"].repeat(1, 4, 1, 1)[:, :BANDS]
        return state

    backbone = create_backbone("resnet18", in_chans=BANDS, weights=rgb, weights_transform=to_ten_bands)
    assert backbone.net.conv1.weight.shape[1] == BANDS


@pytest.mark.parametrize(
    ("name", "count"), [("vit_small_patch16_224", 12), ("resnet18", 4), ("convnext_atto", 4)]
)
def test_shardable_blocks(name, count):
    model = build_model(name, in_chans=BANDS, num_classes=CLASSES, **BACKBONES[name])
    blocks = shardable_blocks(model)
    assert len(blocks) == count
    assert blocks == model.backbone.blocks_for_sharding()
    owned = {id(m) for m in model.backbone.modules()}
    assert all(id(b) in owned for b in blocks)


def test_shardable_blocks_refuses_a_model_without_backbone():
    with pytest.raises(InputError, match="cannot shard"):
        shardable_blocks(nn.Linear(2, 2))


@pytest.mark.parametrize("name", ["resnet18", "vit_small_patch16_224"])
def test_gradients_reach_backbone_and_head(name):
    model = build_model(name, in_chans=BANDS, num_classes=CLASSES, **BACKBONES[name])
    model(_tiles()).square().mean().backward()
    first = next(model.backbone.parameters())
    assert first.grad is not None and first.grad.abs().sum() > 0
    assert model.decoder.classifier.weight.grad.abs().sum() > 0


def test_resnet_segmentation_overfits_a_tiny_batch():
    model = build_model("resnet18", in_chans=BANDS, num_classes=3, decoder_channels=32)
    # Blocks of 8×8 pixels of one class each, whose mean reflectance in the first bands gives it away.
    y = torch.randint(0, 3, (2, 4, 4)).repeat_interleave(8, dim=1).repeat_interleave(8, dim=2)
    x = 0.5 * _tiles(2, 32)
    x[:, :3] += nn.functional.one_hot(y, 3).permute(0, 3, 1, 2)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        optimiser.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
