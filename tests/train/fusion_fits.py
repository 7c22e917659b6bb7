"""`eoscale fit` of a network of several sensors (`configs/fusion_resnet18.yaml`, per-sensor stems, sensor dropout)
under DDP, FSDP2 and DeepSpeed ZeRO-2 in turn, in one pair of CPU ranks (gloo), as `tests.train.strategy_fits` does
for one sensor: one start-up for all the strategies. `OutputProbe` writes what each rank's network maps a fixed input to at the end.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.train.fusion_fits OUT STORE ddp fsdp zero2
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning import Callback

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEPS = 4
# small enough for seconds of CPU a fit: narrow stems and decoder
SMALL = ["--model.init_args.fusion_width", "16", "--model.init_args.decoder_channels", "32",
         "--model.init_args.spectral_mlp", "0", "--model.init_args.warmup_steps", "1"]


def probe_input(channels: int, size: int, *, missing: slice | None = None) -> torch.Tensor:
    """A fixed input of 2 tiles (seeded), the second without the channels `missing` (one sensor: all 0)."""
    x = torch.randn(2, channels, size, size, generator=torch.Generator().manual_seed(0))
    if missing is not None:
        x[1, missing] = 0
    return x


class OutputProbe(Callback):
    """At the end of fit, write `<folder>/rank<r>.pt`: each step's loss, the world size and step, the share of the
    parameters this rank holds (FSDP2 shards), the temperature calibration fitted, and the network's output (eval
    mode) for `probe_input`, its second tile without the first sensor group. Every rank runs the network (a sharded one all-gathers)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_fit_end(self, trainer, pl_module) -> None:
        h = pl_module.hparams
        first = h.sensors[0]
        x = probe_input(h.in_chans, h.img_size, missing=slice(0, len(first["bands"])))
        model = pl_module.model
        model.eval()
        with torch.no_grad():
            out = model(x)
        local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
        total = sum(p.numel() for p in model.parameters())
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save({"losses": self.losses, "step": trainer.global_step, "world_size": trainer.world_size,
                    "local": local, "total": total, "input": x, "temperature": pl_module.contract.temperature,
                    "calibrated": pl_module.contract.calibration is not None,
                    "state": {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
                              for k, v in model.state_dict().items()}, "output": out.full_tensor() if hasattr(out, "full_tensor") else out},
                   self.folder / f"rank{trainer.global_rank}.pt")


def fit_args(store: str, root: Path, strategy: str) -> list[str]:
    """`eoscale fit` of the fusion config under `strategy` (a fragment in configs/strategy/) on 2 CPU ranks."""
    return ["fit", "--config", str(CONFIGS / "fusion_resnet18.yaml"), "--config",
            str(CONFIGS / "strategy" / f"{strategy}.yaml"), *SMALL, "--data.init_args.store", store,
            "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
            "--data.init_args.sensor_dropout", "0.5", "--trainer.accelerator", "cpu", "--trainer.devices", "2",
            "--trainer.max_steps", str(STEPS), "--trainer.val_check_interval", str(STEPS),
            "--trainer.default_root_dir", str(root / strategy), "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=tests.train.fusion_fits.OutputProbe", f"--trainer.callbacks.folder={root / strategy / 'probe'}"]


def main(argv: list[str]) -> None:
    from eoscale.train.launch.main import main as fit

    root, store, *strategies = argv
    for strategy in strategies:
        fit(fit_args(store, Path(root), strategy))


if __name__ == "__main__":
    main(sys.argv[1:])
