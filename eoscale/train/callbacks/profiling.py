"""`eoscale fit|pretrain --profile`: torch.profiler over a few training steps, the trace and its summary in MLflow.

    eoscale fit --config configs/smoke.yaml --profile                      # the defaults below
    eoscale fit --config configs/smoke.yaml --config configs/profile.yaml  # the same, as a config fragment
    eoscale fit ... --profile.wait 5 --profile.active 10                   # later, longer

Every rank traces the same steps into `<default_root_dir>/profile/<run>/rank<N>.pt.trace.json.gz` (rank 0 names
the folder for all); after the last recorded step the ranks meet, and rank 0 writes the summary
(`eoscale.track.trace_summary`: top ops by self time, peak memory, Holistic Trace Analysis per rank) and logs
the traces and the summary to the run's MLflow artifacts under `profile/`.
"""

from __future__ import annotations

from pathlib import Path

from lightning import Callback, LightningModule, Trainer

from eoscale.track.profiler import Profile, Schedule, trace_files


def bare_flag(args: list[str]) -> list[str]:
    """`--profile` alone on the command line means `--profile.enabled=true` (jsonargparse wants a value)."""
    return ["--profile.enabled=true" if a == "--profile" else a for a in args]


class Profiling(Callback):
    """torch.profiler over training steps `[wait + warmup, wait + warmup + active)` of the first epoch.

    Args:
        enabled: profile this run (`--profile`).
        wait: steps to skip before tracing (the loader's start-up, the first allocations).
        warmup: steps traced and dropped (the profiler's own start-up cost).
        active: steps recorded.
        record_shapes: record each op's input shapes.
        profile_memory: record allocations (the summary's memory peak).
        with_stack: record Python stacks (larger traces; flame graphs in the viewers).
    """

    def __init__(self, enabled: bool = False, wait: int = 1, warmup: int = 1, active: int = 3,
                 record_shapes: bool = True, profile_memory: bool = True, with_stack: bool = False) -> None:
        self.enabled = enabled
        self.schedule = Schedule(wait=wait, warmup=warmup, active=active)
        self.options = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
        self.profile: Profile | None = None
        self.folder: Path | None = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.enabled:
            return
        folder = None
        if trainer.is_global_zero:
            from eoscale.train.callbacks.monitor import mlflow_loggers

            runs = [lg.version for lg in mlflow_loggers(trainer)]
            name = str(runs[0]) if runs else "run"
            folder = str(Path(trainer.default_root_dir).resolve() / "profile" / name)
        # the ranks write into one folder, which rank 0 names (only it knows the MLflow run)
        self.folder = Path(trainer.strategy.broadcast(folder, src=0))
        self.profile = Profile(self.folder, f"rank{trainer.global_rank}", self.schedule, **self.options).start()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        if self.profile is None:
            return
        self.profile.step()
        if self.profile.written:
            self._finish(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.profile is None:
            return
        self.profile.close()  # a run shorter than the schedule: what was recorded
        self._finish(trainer)

    def _finish(self, trainer: Trainer) -> None:
        self.profile = None
        trainer.strategy.barrier("profile")  # every rank's trace is on disk
        if not trainer.is_global_zero or self.folder is None:
            return
        from eoscale.track.trace_summary import summarize
        from eoscale.train.callbacks.monitor import mlflow_loggers

        traces = trace_files(self.folder)
        if not traces:
            print(f"eoscale: --profile recorded nothing: the run took fewer than {self.schedule.steps} steps "
                  f"(wait {self.schedule.wait} + warmup {self.schedule.warmup} + active {self.schedule.active})")
            return
        files = summarize(self.folder, title="eoscale fit --profile")
        print(f"eoscale: profile of steps {self.schedule.wait + self.schedule.warmup}-{self.schedule.steps - 1} "
              f"in {self.folder} ({files[0].name})")
        for logger in mlflow_loggers(trainer):
            if hasattr(logger, "log_artifact"):
                for path in [*traces, *files]:
                    logger.log_artifact(path, "profile")
