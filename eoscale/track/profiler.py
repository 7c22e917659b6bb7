"""torch.profiler for eoscale's runs (`eoscale fit|pretrain --profile`, `eoscale predict --profile`).

One schedule for both: `wait` steps skipped, `warmup` steps traced and thrown away (the profiler's own start-up
cost lands there), `active` steps recorded, with input shapes and memory. The trace is written as a gzipped
Chrome trace, `<folder>/<name>.pt.trace.json.gz` (one per rank, named by rank), which chrome://tracing,
Perfetto (ui.perfetto.dev), TensorBoard's profiler plugin and Holistic Trace Analysis all read;
`eoscale.track.trace_summary` turns the folder into a Markdown and PNG summary.

A run that ends inside the recorded steps still writes what it recorded (`Profile.close`).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TRACE_SUFFIX = ".pt.trace.json.gz"


@dataclass(frozen=True)
class Schedule:
    """Steps skipped, traced and dropped, and recorded (torch.profiler.schedule with repeat=1)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3

    @property
    def steps(self) -> int:
        """Steps the profiler needs to have seen to have written its trace."""
        return self.wait + self.warmup + self.active


class Profile:
    """A torch.profiler session that writes its trace to `folder` as `<name>.pt.trace.json.gz`.

    Call `step()` once per training step (or batch of windows); `close()` at the end, whatever happened.
    """

    def __init__(self, folder: str | os.PathLike, name: str, schedule: Schedule = Schedule(), *,
                 record_shapes: bool = True, profile_memory: bool = True, with_stack: bool = False) -> None:
        # Kineto, the profiler's engine, logs its start, stop and device probing to stderr unless told not to
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        import torch
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler import schedule as make_schedule

        self.folder = Path(folder)
        self.trace = self.folder / f"{name}{TRACE_SUFFIX}"
        self.schedule = schedule
        self.written = False
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            schedule=make_schedule(wait=schedule.wait, warmup=schedule.warmup, active=schedule.active, repeat=1),
            on_trace_ready=self._ready, record_shapes=record_shapes, profile_memory=profile_memory,
            with_stack=with_stack)
        self._steps = 0
        self._open = False

    def start(self) -> Profile:
        self.folder.mkdir(parents=True, exist_ok=True)
        with _quiet_stderr():
            self._profiler.start()
        self._open = True
        return self

    def step(self) -> None:
        """One step done; the profiler stops itself once the recorded steps are written."""
        if not self._open:
            return
        self._steps += 1
        with _quiet_stderr():  # the step that starts or stops tracing
            self._profiler.step()
        if self.written:
            self.close()

    def close(self) -> None:
        """Stop the profiler (a run shorter than the schedule writes the steps it recorded, if any)."""
        if self._open:
            self._open = False
            with _quiet_stderr():
                self._profiler.stop()

    def _ready(self, profiler) -> None:
        profiler.export_chrome_trace(str(self.trace))  # .gz: torch compresses it
        self.written = True

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def _quiet_stderr():
    """Send the process's stderr (file descriptor 2) to /dev/null: Kineto and c10 write their start/stop lines
    ("USDT: … profiler_start", "Memory block of unknown size …") there from C++, past Python's sys.stderr and
    past KINETO_LOG_LEVEL."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def trace_files(folder: str | os.PathLike) -> list[Path]:
    """The traces of a profile folder, by name."""
    return sorted(Path(folder).glob(f"*{TRACE_SUFFIX}"))
