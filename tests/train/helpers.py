"""A callback the multi-process tests add on the command line to see inside each rank."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning import Callback


class RankReport(Callback):
    """At the end of fit, write `<folder>/rank<r>.pt`: this rank's local parameters (shards under FSDP),
    the full-model element count, and the step reached."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_train_start(self, trainer, pl_module) -> None:
        # after any checkpoint was restored: what training starts from
        self._save(trainer, pl_module, "start")

    def on_fit_end(self, trainer, pl_module) -> None:
        self._save(trainer, pl_module, "")

    def _save(self, trainer, pl_module, tag: str) -> None:
        local, total = {}, 0
        for name, p in pl_module.named_parameters():
            total += p.numel()
            local[name] = (p.to_local() if hasattr(p, "to_local") else p).detach().cpu().clone()
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save({"local": local, "total": total, "step": trainer.global_step, "world_size": trainer.world_size,
                    "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()}},
                   self.folder / f"{tag}rank{trainer.global_rank}.pt")


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
