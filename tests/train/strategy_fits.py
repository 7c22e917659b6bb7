"""Several `eoscale fit`s of one tiny ViT in one pair of CPU ranks, one strategy after another.

Started by torchrun (2 processes, gloo); each rank calls `eoscale fit` once per strategy with the strategy's
config fragment, as a user would, so the DDP, FSDP2 and ZeRO tests share one start-up (a `python -m eoscale
fit` of two ranks costs 25-30 s here, most of it imports). `StateProbe` writes what each rank saw.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.train.strategy_fits OUT STORE ddp zero2

A name `<strategy>+resume` fits `<strategy>` again in the same folder with `--ckpt_path last` for `RESUMED` more
steps (probe in `OUT/<strategy>+resume/probe`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning import Callback

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEPS = 10
RESUMED = 2  # steps of a `+resume` fit after the first fit's STEPS
# a ViT small enough for seconds of CPU per fit, big enough that its state dwarfs the bookkeeping around it; 8 px
# patches, so that a 32 px tile is 4×4 tokens (at 2×2 the decoder's GroupNorm of 1×1 maps made its loss 1e-3 apart
# between any two strategies by step 9: see test_zero.test_training_matches_ddp)
VIT = ["--model.init_args.backbone", "vit_tiny_patch16_224", "--model.init_args.backbone_kwargs", "{depth: 4, patch_size: 8}",
       "--model.init_args.decoder_channels", "32", "--model.init_args.lr", "1e-4"]


class StateProbe(Callback):
    """Each step's training loss; at step `at_step` (gradients and optimizer state both exist) the state
    bytes this rank holds (`eoscale.train.planning.state`); at the end, the share of the parameters it holds (ZeRO-3
    partitions, DTensor shards), rank 0's MLflow run (None in a fit without a logger), and the global batch and
    last epoch's samples that eoscale's TrainingMonitor counts.
    Written to `<folder>/rank<r>.pt`."""

    def __init__(self, folder: str, at_step: int = 2) -> None:
        self.folder, self.at_step = Path(folder), at_step
        self.losses: list[float] = []
        self.state: dict | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.start_step = trainer.global_step  # a resumed fit: the step of its checkpoint

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.at_step:
            from eoscale.train.planning.state import measure_state

            self.state = measure_state(pl_module, optimizer).to_dict()

    def on_fit_end(self, trainer, pl_module) -> None:
        local = total = 0
        for p in pl_module.parameters():
            if hasattr(p, "ds_tensor"):  # ZeRO-3: this rank's partition; the parameter itself is empty
                local, total = local + p.ds_tensor.numel(), total + p.ds_numel
            else:
                local += (p.to_local() if hasattr(p, "to_local") else p).numel()
                total += p.numel()
        from eoscale.train.callbacks.monitor import TrainingMonitor, run_facts

        # what eoscale compare reads: the batch the run trains at once, and the samples its throughput counts
        facts = run_facts(trainer, pl_module)
        monitor = next((c for c in trainer.callbacks if isinstance(c, TrainingMonitor)), None)
        counted = {"global_batch": facts.get("run/global_batch_size"), "data_parallel": facts["run/data_parallel_size"],
                   "epoch_samples": monitor.epoch_samples if monitor is not None else None,
                   "val_pixels": int(pl_module.last_confusion["val"].sum()) if "val" in getattr(
                       pl_module, "last_confusion", {}) else None}
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save({"losses": self.losses, "state": self.state, "local": local, "total": total, "counted": counted,
                    "world_size": trainer.world_size, "step": trainer.global_step, "start_step": self.start_step,
                    "run_id": str(trainer.logger.run_id) if trainer.global_rank == 0 and trainer.logger else None},
                   self.folder / f"rank{trainer.global_rank}.pt")


def fit_args(store: str, root: Path, name: str) -> list[str]:
    """`eoscale fit` of the tiny ViT under strategy `name` (a fragment in configs/strategy/) on 2 CPU ranks, or
    its resumption (`<strategy>+resume`)."""
    strategy, resume = name.removesuffix("+resume"), name.endswith("+resume")
    return ["fit", "--config", str(CONFIGS / "smoke.yaml"), "--config", str(CONFIGS / "strategy" / f"{strategy}.yaml"),
            *VIT, "--data.init_args.store", store, "--data.init_args.batch_size", "4", "--data.init_args.augment", "false",
            "--trainer.accelerator", "cpu", "--trainer.devices", "2",
            "--trainer.max_steps", str(STEPS + RESUMED if resume else STEPS),
            "--trainer.val_check_interval", str(STEPS), "--trainer.gradient_clip_val", "0.5",
            "--trainer.default_root_dir", str(root / strategy),
            "--trainer.callbacks+=tests.train.strategy_fits.StateProbe",
            f"--trainer.callbacks.folder={root / name / 'probe'}", *(["--ckpt_path", "last"] if resume else [])]


def main(argv: list[str]) -> None:
    from eoscale.train.launch.main import main as fit

    root, store, *strategies = argv
    for strategy in strategies:
        fit(fit_args(store, Path(root), strategy))


if __name__ == "__main__":
    main(sys.argv[1:])
