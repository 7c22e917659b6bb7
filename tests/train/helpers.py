"""A callback the multi-process tests add on the command line to see inside each rank."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning import Callback


class RankReport(Callback):
    """At the end of fit, write `<folder>/rank<r>.pt`: this rank's local parameters (shards under FSDP), its buffers
    (whole on every rank: BatchNorm's running statistics), the full-model element count, and the step reached.
    With `probe`, also the task's logits (eval mode) for a fixed seeded batch shaped as its first validation batch
    (a stack of dates gets fixed dates, all valid): the same input on every rank, to compare what the ranks map."""

    def __init__(self, folder: str, probe: bool = False) -> None:
        self.folder = Path(folder)
        self.probe = probe
        self._shape: tuple[int, ...] | None = None
        self._dated = False

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._shape is None:
            self._shape, self._dated = tuple(batch["image"].shape[1:]), "dates" in batch

    def on_train_start(self, trainer, pl_module) -> None:
        # after any checkpoint was restored: what training starts from
        self._write(trainer, self._report(trainer, pl_module), "start")

    def on_fit_end(self, trainer, pl_module) -> None:
        report = self._report(trainer, pl_module)  # before the probe: FSDP2 leaves the root's parameters whole after a forward
        report["output"] = self._output(pl_module) if self.probe else None
        self._write(trainer, report, "")

    def _output(self, pl_module) -> torch.Tensor:
        """The logits of the fixed batch (every rank runs the network: a sharded one all-gathers)."""
        assert self._shape is not None, "RankReport(probe=True) needs a validation before the end of fit"
        batch = {"image": torch.randn(2, *self._shape, generator=torch.Generator().manual_seed(0))}
        if self._dated:
            steps = self._shape[0]
            batch["dates"] = (19_000 + 30 * torch.arange(steps)).expand(2, steps).clone()
            batch["date_valid"] = torch.ones(2, steps)
        training = pl_module.training
        pl_module.eval()
        with torch.no_grad():
            out = pl_module.logits(batch)
        pl_module.train(training)
        return (out.full_tensor() if hasattr(out, "full_tensor") else out).detach().cpu().clone()

    def _report(self, trainer, pl_module) -> dict:
        local, total = {}, 0
        for name, p in pl_module.named_parameters():
            total += p.numel()
            local[name] = (p.to_local() if hasattr(p, "to_local") else p).detach().cpu().clone()
        buffers = {name: b.detach().cpu().clone() for name, b in pl_module.named_buffers()}
        return {"local": local, "buffers": buffers, "total": total, "step": trainer.global_step,
                "world_size": trainer.world_size, "output": None,
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()}}

    def _write(self, trainer, report: dict, tag: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(report, self.folder / f"{tag}rank{trainer.global_rank}.pt")


class Crash(RuntimeError):
    """What `CrashAt` raises: a stand-in for a node failure or a Slurm time limit."""


class CrashAt(Callback):
    """Kill the run when it is about to take optimizer step `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise Crash(f"simulated crash before step {self.step}")


class CutTracking(Callback):
    """From step `step` on, point every MLflow logger at a port where nothing listens: the server is gone."""

    def __init__(self, step: int, uri: str) -> None:
        self.step, self.uri = step, uri

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            from mlflow import MlflowClient

            for logger in trainer.loggers:
                if hasattr(logger, "_mlflow_client"):
                    logger._mlflow_client = MlflowClient(self.uri)


class DiskFullAt(Callback):
    """Fail as a full disk does (ENOSPC, with the file it was writing) when the run is about to take step `step`."""

    def __init__(self, step: int, path: str = "checkpoints/last.ckpt") -> None:
        self.step, self.path = step, path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            import errno
            import os

            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
