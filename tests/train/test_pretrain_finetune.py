"""MAE pretraining → LoRA fine-tuning on a tiny store, through the real CLI (`eoscale pretrain`, `eoscale fit`).

The pretrain run's exported backbone starts a LoRA fit; the adapter it writes is then loaded onto the same
backbone in a fresh process, which must reproduce the fit's predictions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from lightning import Callback
from safetensors import safe_open

from eoscale.models import lora
from eoscale.train.launch.cli import EoscaleCLI
from eoscale.train.launch.pretrain import PRETRAIN_DEFAULTS
from tests.processes import ROOT

CONFIGS = ROOT / "configs"
TINY = "{patch_size: 8, depth: 2, embed_dim: 64, num_heads: 2}"
CPU = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.precision", "32-true",
       "--trainer.enable_progress_bar", "false", "--data.init_args.num_workers", "0",
       "--data.init_args.batch_size", "8"]


class LossLog(Callback):
    """Keeps every training step's loss."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def pretrain(store: Path, root: Path, steps: int = 40) -> EoscaleCLI:
    return EoscaleCLI(args=[
        "fit", *PRETRAIN_DEFAULTS, "--config", str(CONFIGS / "mae_pretrain.yaml"), *CPU,
        "--data.init_args.store", str(store), "--trainer.default_root_dir", str(root),
        "--checkpoint.dirpath", str(root / "checkpoints"), "--trainer.max_steps", str(steps),
        "--trainer.val_check_interval", "20", "--trainer.log_every_n_steps", "5",
        "--model.init_args.backbone_kwargs", TINY, "--model.init_args.decoder_dim", "32",
        "--model.init_args.decoder_depth", "1", "--model.init_args.decoder_heads", "2",
        "--model.init_args.lr", "2e-3", "--model.init_args.warmup_steps", "5",
        "--trainer.callbacks", "tests.train.test_pretrain_finetune.LossLog",
    ])


@pytest.fixture(scope="module")
def pretrained(store, tmp_path_factory):
    root = tmp_path_factory.mktemp("mae")
    cli = pretrain(store, root)
    return cli, root / "checkpoints" / "backbone.safetensors"


@pytest.mark.slow
def test_mae_loss_falls_and_export_carries_band_contract(pretrained, store):
    cli, export = pretrained
    losses = next(cb for cb in cli.trainer.callbacks if isinstance(cb, LossLog)).losses
    assert len(losses) == 40
    assert sum(losses[-8:]) / 8 < 0.9 * sum(losses[:8]) / 8, losses
    with safe_open(str(export), framework="pt") as f:
        meta = json.loads(f.metadata()["eoscale"])
        keys = set(f.keys())
    assert meta["bands"] == cli.datamodule.band_names and len(meta["wavelengths"]) == 10
    assert meta["patch_size"] == 8 and meta["img_size"] == 32 and meta["model"] == "vit_small_patch16_224"
    assert meta["model_kwargs"]["embed_dim"] == 64
    assert len(meta["mean"]) == len(meta["std"]) == 10
    assert "pos_embed" in keys and not any(k.startswith(("decoder", "mask_token")) for k in keys)
    assert list(export.parent.glob("*.ckpt"))  # the checkpoints it sits beside


@pytest.mark.slow
def test_lora_fit_adapter_reloads_in_fresh_process(pretrained, store, tmp_path):
    _, export = pretrained
    root = tmp_path / "lora"
    cli = EoscaleCLI(args=[
        "fit", "--config", str(CONFIGS / "lora_finetune.yaml"), *CPU,
        "--data.init_args.store", str(store), "--trainer.default_root_dir", str(root),
        "--trainer.max_steps", "8", "--trainer.val_check_interval", "8",
        "--model.init_args.backbone_kwargs", TINY, "--model.init_args.weights", str(export),
        "--model.init_args.decoder_channels", "16", "--model.init_args.lora", "{r: 4, alpha: 8, name: tiny}",
        "--model.init_args.lr", "1e-2", "--model.init_args.warmup_steps", "1",
    ])
    model = cli.model.model.eval()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all("lora_" in n or not n.startswith("backbone.") for n in trainable)
    assert lora.list_adapters(root) == ["tiny"]
    meta = lora.read_adapter_meta(root, "tiny")
    assert meta["contract"]["bands"] == cli.datamodule.band_names and meta["model"]["weights"] == str(export)

    x = torch.randn(3, 10, 32, 32, generator=torch.Generator().manual_seed(1))
    torch.save(x, tmp_path / "x.pt")
    with torch.no_grad():
        expected = model(x)
    script = textwrap.dedent(f"""
        import torch
        from eoscale.models import build_model, lora
        from eoscale.models.foundation import FoundationWeights
        m = lora.read_adapter_meta({str(root)!r}, "tiny")["model"]
        bands = lora.read_adapter_meta({str(root)!r}, "tiny")["contract"]["bands"]
        model = build_model(m["backbone"], in_chans=m["in_chans"], num_classes=m["num_classes"], img_size=m["img_size"],
                            decoder_channels=m["decoder_channels"], weights=m["weights"],
                            weights_transform=FoundationWeights(m["weights"], bands=bands), **m["backbone_kwargs"])
        lora.load_adapter(model, {str(root)!r}, "tiny")
        x = torch.load({str(tmp_path / 'x.pt')!r})
        with torch.no_grad():
            torch.save({{"unmerged": model.eval()(x), "merged": lora.merge_adapter(model)(x)}}, {str(tmp_path / 'y.pt')!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.load(tmp_path / "y.pt")
    torch.testing.assert_close(got["unmerged"], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(got["merged"], expected, atol=1e-5, rtol=0)
