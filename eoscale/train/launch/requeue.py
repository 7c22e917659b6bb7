"""Slurm's warning before the time limit (`--signal=SIGUSR1@N`): every rank checkpoints at the same step, then
the job is requeued and resumes from that checkpoint.

Lightning's own auto-requeue saves the checkpoint inside the signal handler. A handler runs between any two
bytecodes, so one rank can enter `save_checkpoint`'s barrier while another is still in the step's gradient
all-reduce: the collectives no longer pair up and the job hangs until Slurm kills it (Lightning issue #21406;
seen here: the local Slurm test hung for its 600 s limit with the checkpoint half-made). Here the handler only
records the signal; after each training batch the ranks agree whether any of them got it (one boolean
all-reduce, `Strategy.reduce_boolean_decision`) and, if so, all save `hpc_ckpt_N.ckpt` together and training stops; when the fit has ended
on every rank, rank 0 runs `scontrol requeue`. The requeued job resumes from the highest N (Lightning picks it up
under Slurm; `eoscale.train.launch.cli` continues the MLflow run).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from types import FrameType
from typing import Any

from lightning import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback

REQUEUE_SIGNAL = signal.SIGUSR1


def hpc_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """`<root>/hpc_ckpt_N.ckpt` files by N, lowest first."""
    numbered = [(int(p.stem.removeprefix("hpc_ckpt_")), p) for p in root.glob("hpc_ckpt_*.ckpt")
                if p.stem.removeprefix("hpc_ckpt_").isdigit()]
    return sorted(numbered)


def slurm_job_id() -> str:
    """The id `scontrol requeue` takes: `<array job>_<task>` for an array task, else the job id."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ["SLURM_JOB_ID"]


class SlurmRequeue(Callback):
    """Checkpoint and requeue on SIGUSR1 at a step every rank reaches (see the module docstring)."""

    def __init__(self) -> None:
        self.signalled = False
        self._previous: Any = None
        self._resume_from: Path | None = None  # the checkpoint saved on the signal: requeue when the fit ends

    def _note(self, signum: int, frame: FrameType | None) -> None:
        # nothing but a flag: the handler may run in the middle of a collective (or in a forked loader worker)
        self.signalled = True

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # before Trainer._run registers its signal handlers: Lightning leaves SIGUSR1 alone when one is set
        self.signalled = False
        if stage == "fit" and self._previous is None:
            self._previous = signal.signal(REQUEUE_SIGNAL, self._note)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._previous is not None:
            signal.signal(REQUEUE_SIGNAL, self._previous)
            self._previous = None

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not trainer.strategy.reduce_boolean_decision(self.signalled, all=False):
            return
        root = Path(trainer.default_root_dir)
        found = hpc_checkpoints(root)
        path = root / f"hpc_ckpt_{found[-1][0] + 1 if found else 1}.ckpt"
        if trainer.is_global_zero:
            print(f"eoscale: Slurm's time-limit signal (SIGUSR1): every rank saves {path} at step "
                  f"{trainer.global_step}, then the job is requeued", flush=True)
        # every rank, ending in a barrier: the file is whole before the requeue (weights_only=False says what
        # Lightning's default is, so that it does not print it on every rank)
        trainer.save_checkpoint(path, weights_only=False)
        trainer.should_stop = True
        self._resume_from = path

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # `scontrol requeue` ends the job's step at once: asked for in on_train_batch_end, it killed the ranks in the
        # middle of that step's validation (a gloo abort and a traceback from every rank in the job's log). Here
        # every rank is done with collectives, and Lightning has put back its SIGTERM handler (which logged
        # "Bypassing SIGTERM"); the ranks wait for each other first, so none is cut off in the fit's last step.
        path, self._resume_from = self._resume_from, None
        if path is None:
            return
        trainer.strategy.barrier("eoscale-requeue")
        if trainer.is_global_zero:
            job = slurm_job_id()
            done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            if done.returncode == 0:
                print(f"eoscale: requeued Slurm job {job}; it resumes from {path.name}", flush=True)
            else:
                print(f"eoscale: warning: 'scontrol requeue {job}' failed ({done.stderr.strip() or done.returncode}); "
                      f"resubmit the job: it resumes from {path}", flush=True)
