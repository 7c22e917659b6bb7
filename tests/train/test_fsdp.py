"""`shard_model` on one gloo rank: block-by-block FSDP2 with activation checkpointing, and its refusals."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from eoscale.errors import InputError
from eoscale.models import build_model
from eoscale.train.strategies.fsdp import FSDP2Strategy, local_fraction, shard_model


@pytest.fixture(scope="module")
def mesh():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # set for this module only: a MASTER_PORT left in os.environ reaches every later test's `eoscale` subprocess,
    # whose rank 0 then fails to bind it while rank 1 joins this process's store and waits forever
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MASTER_ADDR", "127.0.0.1")
        patch.setenv("MASTER_PORT", str(port))
        dist.init_process_group("gloo", rank=0, world_size=1)
        yield init_device_mesh("cpu", (1, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
        dist.destroy_process_group()


@pytest.mark.parametrize(("backbone", "units"), [("resnet18", 4 + 1), ("vit_tiny_patch16_224", 12 + 1)])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_shard_block_by_block(mesh, backbone: str, units: int, checkpointing: bool):
    """ResNet stages or ViT blocks each become an FSDP unit, plus the root; outputs do not change."""
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    model = build_model(backbone, in_chans=4, num_classes=3, decoder_channels=64, img_size=32)
    x = torch.randn(2, 4, 32, 32)
    expected = model(x)
    strategy = FSDP2Strategy(activation_checkpointing=checkpointing)
    sharded = shard_model(model, mesh, strategy=strategy, precision="bf16-mixed")  # CPU: stays fp32
    assert isinstance(sharded, FSDPModule)
    assert sum(isinstance(m, FSDPModule) for m in sharded.modules()) == units
    out = sharded(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    out.square().mean().backward()
    assert all(p.grad is not None for p in sharded.parameters())
    assert local_fraction(sharded) == 1.0


def test_refuses_models_it_cannot_shard(mesh):
    with pytest.raises(InputError, match="cannot use FSDP here: cannot shard a Sequential"):
        shard_model(nn.Sequential(nn.Linear(2, 2)), mesh)


def test_refuses_tensor_parallelism():
    class Mesh:
        mesh_dim_names = ("data_parallel", "tensor_parallel")

        def __getitem__(self, name):
            return type("Sub", (), {"size": lambda self: 2})()

    with pytest.raises(InputError, match="tensor_parallel_size=1"):
        shard_model(build_model("resnet18", in_chans=4, num_classes=3), Mesh())
