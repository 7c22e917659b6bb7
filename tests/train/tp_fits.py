"""FSDP2 × tensor parallelism on two CPU ranks (gloo), everything the tests need from one torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.train.tp_fits OUT STORE

In order, on both ranks: (1) the forward of a tiny ViT split over 2 tensor-parallel ranks (and FSDP2 over the
data-parallel dimension) beside the same ViT whole; (2) `eoscale fit` of the tiny ViT under
configs/strategy/fsdp2_tp.yaml, 10 steps, as a user runs it (`strategy_fits.StateProbe`: losses, state bytes; `Outputs`: the
trained network's output on a fixed input); (3) the same fit resumed from its sharded checkpoint for one more
step (`Outputs` again, as the resumed run starts); (4) the fit of a ViT whose 3 heads do not split in 2
(`errors.txt`: its exit code and error output).

With a third argument `w4`, on four ranks (2 tensor-parallel × 2 data-parallel): (1) at that shape
(`forward4.pt`) and (2) as `tp4/`, nothing else.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import torch
from lightning import Callback

from tests.train.strategy_fits import CONFIGS, STEPS

# vit_tiny has 3 heads: 4 split over 2 ranks (head width 48); 8 px patches as in tests.train.strategy_fits
VIT = ["--model.init_args.backbone", "vit_tiny_patch16_224", "--model.init_args.backbone_kwargs",
       "{depth: 4, num_heads: 4, patch_size: 8}", "--model.init_args.decoder_channels", "32", "--model.init_args.lr", "1e-4"]
QKV = "model.backbone.net.blocks.0.attn.qkv.weight"


def fixed_input(in_chans: int, tile: int) -> torch.Tensor:
    return torch.randn(2, in_chans, tile, tile, generator=torch.Generator().manual_seed(1))


def fit_args(store: str, root: Path, name: str, *, strategy: str | None = "fsdp2_tp", devices: int = 2,
             steps: int = STEPS) -> list[str]:
    """`eoscale fit` of the tiny ViT, 10 steps, fp32, clipping 0.5; `strategy` None: one process."""
    fragment = ["--config", str(CONFIGS / "strategy" / f"{strategy}.yaml")] if strategy else []
    return ["fit", "--config", str(CONFIGS / "smoke.yaml"), *fragment, *VIT, "--data.init_args.store", store,
            "--data.init_args.batch_size", "4", "--data.init_args.augment", "false", "--trainer.accelerator", "cpu",
            "--trainer.devices", str(devices), "--trainer.max_steps", str(steps),
            "--trainer.val_check_interval", str(STEPS), "--trainer.limit_val_batches", "1", "--trainer.logger", "false",
            "--trainer.gradient_clip_val", "0.5",
            "--trainer.default_root_dir", str(root / name), "--checkpoint.dirpath", str(root / name / "checkpoints"),
            "--trainer.callbacks+=tests.train.strategy_fits.StateProbe", f"--trainer.callbacks.folder={root / name / 'probe'}"]


class Outputs(Callback):
    """The network's output on `fixed_input` and the full first AdamW moment of block 0's qkv weight (in the
    checkpoint's row order), when the fit ends or, with `at_start`, when training starts: `<folder>/outputs.pt`."""

    def __init__(self, folder: str, at_start: bool = False) -> None:
        self.folder, self.at_start = Path(folder), at_start

    def _write(self, trainer, pl_module) -> None:
        # what a checkpoint of this moment would hold (TensorParallelStrategy: in the model's row order); before
        # the forward below, which leaves FSDP2's root parameters gathered (not the ones the optimizer holds)
        moment = trainer.strategy.optimizer_state(trainer.optimizers[0])["state"][QKV]["exp_avg"]
        h = pl_module.hparams
        with torch.no_grad():
            y = pl_module.model(fixed_input(h.in_chans, h.img_size))
        moment = moment.full_tensor() if hasattr(moment, "full_tensor") else moment
        if trainer.global_rank == 0:
            self.folder.mkdir(parents=True, exist_ok=True)
            torch.save({"output": y, "exp_avg": moment, "step": trainer.global_step}, self.folder / "outputs.pt")

    def on_train_start(self, trainer, pl_module) -> None:
        if self.at_start:
            self._write(trainer, pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        if not self.at_start:
            self._write(trainer, pl_module)


def forward_check(out: Path, data_parallel: int = 1) -> None:
    """The largest difference between a tiny ViT's output whole and split (TP 2 × FSDP2 over `data_parallel`):
    `forward<ranks>.pt` (`forward.pt` at 2 ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    from eoscale.models import build_model
    from eoscale.train.strategies.tp import TensorParallelStrategy, parallelize_and_shard

    kwargs = {"in_chans": 4, "num_classes": 3, "img_size": 32, "decoder_channels": 16, "depth": 2, "num_heads": 4}
    torch.manual_seed(0)
    whole = build_model("vit_tiny_patch16_224", **kwargs)
    torch.manual_seed(0)
    split = build_model("vit_tiny_patch16_224", **kwargs)
    mesh = init_device_mesh("cpu", (data_parallel, 2), mesh_dim_names=("data_parallel", "tensor_parallel"))
    parallelize_and_shard(split, mesh, strategy=TensorParallelStrategy())
    x = fixed_input(4, 32)
    with torch.no_grad():
        diff = (split(x) - whole(x)).abs().max()
    local = sum(p.to_local().numel() for p in split.backbone.net.blocks[0].attn.qkv.parameters())
    if torch.distributed.get_rank() == 0:
        torch.save({"diff": diff, "qkv_local": local, "qkv_total": sum(p.numel() for p in whole.backbone.net.blocks[0]
                                                                        .attn.qkv.parameters())},
                   out / ("forward.pt" if data_parallel == 1 else f"forward{2 * data_parallel}.pt"))


def main(argv: list[str]) -> None:
    from eoscale.cli import main as eoscale_main
    from eoscale.train.launch.main import main as fit

    root, store = Path(argv[0]), argv[1]
    torch.distributed.init_process_group("gloo")  # Lightning's fits below use this group
    if argv[2:] == ["w4"]:
        forward_check(root, data_parallel=2)
        fit([*fit_args(store, root, "tp4", devices=4), "--trainer.callbacks+=tests.train.tp_fits.Outputs",
             f"--trainer.callbacks.folder={root / 'tp4'}"])
        return
    forward_check(root)
    fit([*fit_args(store, root, "tp"), "--trainer.callbacks+=tests.train.tp_fits.Outputs",
         f"--trainer.callbacks.folder={root / 'tp'}"])
    last = root / "tp" / "checkpoints" / "last.ckpt"
    fit([*fit_args(store, root, "resumed", steps=STEPS + 1), "--ckpt_path", str(last),
         "--trainer.callbacks+=tests.train.tp_fits.Outputs", f"--trainer.callbacks.folder={root / 'resumed'}",
         "--trainer.callbacks.at_start=true"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = eoscale_main([*fit_args(store, root, "three_heads", steps=1), "--model.init_args.backbone_kwargs",
                             "{depth: 2}"])
    (root / f"errors{torch.distributed.get_rank()}.txt").write_text(f"{code}\n{err.getvalue()}")


if __name__ == "__main__":
    main(sys.argv[1:])
