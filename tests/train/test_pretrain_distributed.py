"""The foundation-model path under the multi-device strategies, two gloo CPU processes each: MAE pretraining
sharded with FSDP2 exports a whole backbone, and LoRA fine-tuning of that backbone under DDP keeps the ranks
equal and writes one adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.processes import ROOT, run_cli

CONFIGS = ROOT / "configs"
TINY = "{patch_size: 8, depth: 2, embed_dim: 64, num_heads: 2}"
TWO_CPUS = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.precision", "32-true",
            "--trainer.enable_progress_bar", "false", "--data.init_args.num_workers", "0",
            "--data.init_args.batch_size", "4", "--trainer.val_check_interval", "2"]

pytestmark = pytest.mark.slow


def _report(root: Path) -> dict:
    return {r: torch.load(root / "report" / f"rank{r}.pt", weights_only=True) for r in (0, 1)}


@pytest.fixture(scope="module")
def fsdp_pretrain(store, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mae-fsdp")
    result = run_cli([
        "pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), "--config", str(CONFIGS / "strategy" / "fsdp.yaml"),
        *TWO_CPUS, "--data.init_args.store", str(store), "--trainer.default_root_dir", str(root),
        "--checkpoint.dirpath", str(root / "checkpoints"), "--trainer.max_steps", "4",
        "--model.init_args.backbone_kwargs", TINY, "--model.init_args.decoder_dim", "32",
        "--model.init_args.decoder_depth", "1", "--model.init_args.decoder_heads", "2",
        "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={root / 'report'}",
    ], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_fsdp_pretrain_shards_and_exports_the_whole_backbone(fsdp_pretrain: Path):
    ranks = _report(fsdp_pretrain)
    assert ranks[0]["step"] == ranks[1]["step"] == 4
    export = fsdp_pretrain / "checkpoints" / "backbone.safetensors"
    with safe_open(str(export), framework="pt") as f:
        meta = json.loads(f.metadata()["eoscale"])
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    # each encoder block is its own FSDP unit: every rank holds half of each of its tensors, different halves
    # (the root unit, stem and decoder, is gathered after validation's forward: reshard_after_forward=False)
    prefix = "model.backbone.net."
    blocks = [n for n in ranks[0]["local"] if n.startswith(prefix + "blocks.")]
    assert blocks
    for name in blocks:
        whole = torch.Size(shapes[name.removeprefix(prefix)]).numel()
        assert ranks[0]["local"][name].numel() + ranks[1]["local"][name].numel() == whole, name
        assert ranks[0]["local"][name].numel() == whole // 2, name
    assert not torch.equal(ranks[0]["local"][blocks[0]], ranks[1]["local"][blocks[0]])
    # whole tensors, gathered from both shards: the embedding is 64 wide, 10 bands in, 4×4 patches of 8 px + cls
    assert shapes["pos_embed"] == (1, 17, 64) and shapes["patch_embed.proj.weight"] == (64, 10, 8, 8)
    assert meta["model_kwargs"]["embed_dim"] == 64 and len(meta["bands"]) == 10


def test_ddp_lora_from_the_fsdp_backbone(fsdp_pretrain: Path, store, tmp_path: Path):
    export = fsdp_pretrain / "checkpoints" / "backbone.safetensors"
    result = run_cli([
        "fit", "--config", str(CONFIGS / "lora_finetune.yaml"), "--config", str(CONFIGS / "strategy" / "ddp.yaml"),
        *TWO_CPUS, "--data.init_args.store", str(store), "--trainer.default_root_dir", str(tmp_path),
        "--trainer.max_steps", "4", "--model.init_args.backbone_kwargs", TINY,
        "--model.init_args.weights", str(export), "--model.init_args.decoder_channels", "16",
        "--model.init_args.lora", "{r: 4, alpha: 8, name: tiny}",
        "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={tmp_path / 'report'}",
    ], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = _report(tmp_path)
    assert ranks[0]["step"] == ranks[1]["step"] == 4
    for name, value in ranks[0]["local"].items():  # DDP: the same model on both ranks, adapters included
        torch.testing.assert_close(ranks[1]["local"][name], value, rtol=0, atol=0, msg=name)
    assert any("lora_" in n for n in ranks[0]["local"])
    with safe_open(str(tmp_path / "adapters" / "tiny" / "adapter_model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    assert keys and all("lora_" in k or not k.startswith("backbone.") for k in keys)
