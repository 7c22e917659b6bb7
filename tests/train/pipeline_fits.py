"""Pipeline-parallel MAE pretraining on two CPU ranks (gloo), everything the tests need from one torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.train.pipeline_fits OUT STORE

In order, on both ranks, as a user runs them (`eoscale pretrain` with configs/strategy/pipeline.yaml): a tiny
MAE in 2 stages under GPipe, then under 1F1B (losses and state per rank: `strategy_fits.StateProbe`; parameters
at start and end: `helpers.RankReport`; the exported backbone and the checkpoints), then the 1F1B fit resumed
from its last checkpoint for one more step. Bad configurations fail before any rank starts: the tests run them
in their own process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tests.train.strategy_fits import CONFIGS

STEPS = 6
# 3 encoder + 1 decoder blocks: stage 0 the embedding and the first encoder block(s), stage 1 the rest, the
# encoder's norm and the decoder (balanced by parameters), so the exported encoder comes from both. lr 1e-4: at 2e-3 AdamW's normalised update turns the
# summation-order differences of near-zero gradients (attention key biases) into 1e-4 loss differences by step 5
TINY = ["--model.init_args.backbone_kwargs", "{patch_size: 8, depth: 3, embed_dim: 64, num_heads: 2}",
        "--model.init_args.decoder_dim", "32", "--model.init_args.decoder_depth", "1",
        "--model.init_args.decoder_heads", "2", "--model.init_args.lr", "1e-4", "--model.init_args.warmup_steps", "2"]


def pretrain_args(store: str, root: Path, name: str, *, schedule: str | None = "1f1b", devices: int = 2,
                  steps: int = STEPS) -> list[str]:
    """`eoscale pretrain` of the tiny MAE, fp32, batch 4 in 2 microbatches, clipping 0.5; `schedule` None: one
    process, no pipeline."""
    fragment = ["--config", str(CONFIGS / "strategy" / "pipeline.yaml"),
                "--trainer.strategy.init_args.schedule", schedule,
                "--trainer.strategy.init_args.microbatches", "2"] if schedule else []
    return ["pretrain", "--config", str(CONFIGS / "mae_pretrain.yaml"), *fragment, *TINY,
            "--data.init_args.store", store, "--data.init_args.batch_size", "4", "--data.init_args.augment", "false",
            "--data.init_args.num_workers", "0", "--trainer.accelerator", "cpu", "--trainer.devices", str(devices),
            "--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false",
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", "3", "--trainer.limit_val_batches", "2",
            "--trainer.gradient_clip_val", "0.5", "--trainer.default_root_dir", str(root / name),
            "--checkpoint.dirpath", str(root / name / "checkpoints"),
            "--trainer.callbacks+=tests.train.strategy_fits.StateProbe", f"--trainer.callbacks.folder={root / name / 'probe'}",
            "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={root / name / 'report'}"]


def main(argv: list[str]) -> None:
    from eoscale.cli import main as eoscale_main

    root, store = Path(argv[0]), argv[1]
    torch.distributed.init_process_group("gloo")  # Lightning's fits below use this group
    for schedule in ("gpipe", "1f1b"):
        assert eoscale_main(pretrain_args(store, root, schedule, schedule=schedule)) == 0
    last = root / "1f1b" / "checkpoints" / "last.ckpt"
    assert eoscale_main([*pretrain_args(store, root, "resumed", steps=STEPS + 1), "--ckpt_path", str(last)]) == 0


if __name__ == "__main__":
    main(sys.argv[1:])
