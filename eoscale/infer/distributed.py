"""Processes of one `eoscale predict` run: who is who, how they agree on a work folder, how they wait.

Three ways to run N processes, one code path:

- `srun -n N eoscale predict ...`: ranks from Slurm (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`); the job and
  step ids name the run;
- `torchrun --nproc-per-node N -m eoscale predict ...`: ranks from `RANK`/`WORLD_SIZE`; rank 0 draws a run
  name and sends it to the others over a gloo process group (the rendezvous torchrun set up);
- `eoscale predict --devices N`: the command starts N processes itself (torch.multiprocessing spawn).

The processes share nothing but the output folder: each writes its part files there and the process that
finalises a scene waits for the parts to appear. A process that fails leaves a note there, so the others
stop waiting and report it instead of hanging.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eoscale.errors import InputError, UserError

WAIT_TIMEOUT_S = 6 * 3600.0  # how long a process waits for another's part before giving up
POLL_S = 0.1


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int
    run_id: str


def ranks_from_environment() -> Ranks | None:
    """This process's rank under torchrun or srun with more than one process, else None."""
    env = os.environ
    if int(env.get("WORLD_SIZE", "1")) > 1 and "RANK" in env:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        return Ranks(rank, world, int(env.get("LOCAL_RANK", "0")), _torchrun_run_id(rank, world))
    # SLURM_STEP_NUM_TASKS is srun's; a batch script alone sees SLURM_NTASKS of the allocation but runs once
    tasks = env.get("SLURM_STEP_NUM_TASKS")
    if tasks is not None and int(tasks) > 1 and "SLURM_PROCID" in env:
        run_id = f"slurm-{env.get('SLURM_JOB_ID', 'job')}.{env.get('SLURM_STEP_ID', 'step')}"
        return Ranks(int(env["SLURM_PROCID"]), int(tasks), int(env.get("SLURM_LOCALID", "0")), run_id)
    return None


def _torchrun_run_id(rank: int, world: int) -> str:
    import torch.distributed as dist

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    shared = [uuid.uuid4().hex[:12] if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    if own:  # nothing else goes through the group: the processes meet in the output folder
        dist.destroy_process_group()
    return f"torchrun-{shared[0]}"


def new_run_id() -> str:
    return f"local-{uuid.uuid4().hex[:12]}"


def spawn(target: Callable[[int, int, str, object], None], config: object, *, processes: int, run_id: str,
          work: Path) -> None:
    """Run `target(rank, processes, run_id, config)` in `processes` fresh processes and wait for them all.

    A process that failed on a user error is reported as that error (one line); any other failure keeps
    the traceback the process left.
    """
    import torch.multiprocessing as mp

    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)  # "Terminating process ..." when one fails: the error below says why
    try:
        mp.spawn(_spawned, args=(target, processes, run_id, config), nprocs=processes, join=True)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as err:
        note = first_failure(work)
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            work.parent.rmdir()  # unless another run's work folder is there
        if note is not None and note[1].startswith("user: "):
            raise InputError(note[1].removeprefix("user: ")) from None
        raise RuntimeError(f"a prediction process failed: {note[1] if note else err}") from None
    finally:
        spawn_log.setLevel(level)


def _spawned(rank: int, target: Callable, processes: int, run_id: str, config: object) -> None:
    target(rank, processes, run_id, config)


def report_failure(work: Path, rank: int, err: BaseException) -> None:
    """Leave a note that process `rank` failed, so that no other process waits for it in vain."""
    text = f"user: {err}" if isinstance(err, UserError) else "bug: " + "".join(traceback.format_exception(err))
    work.mkdir(parents=True, exist_ok=True)
    (work / f"failed-rank-{rank:04d}").write_text(text)


def first_failure(work: Path) -> tuple[int, str] | None:
    notes = sorted(work.glob("failed-rank-*")) if work.exists() else []
    if not notes:
        return None
    return int(notes[0].name.rsplit("-", 1)[1]), notes[0].read_text()


def wait_for(ready: Callable[[], bool], work: Path, *, what: str, timeout: float = WAIT_TIMEOUT_S) -> None:
    """Wait until `ready()`; stop with the failure another process reported, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        note = first_failure(work)
        if note is not None:
            rank, text = note
            if text.startswith("user: "):
                raise InputError(f"process {rank} stopped: {text.removeprefix('user: ')}")
            raise RuntimeError(f"process {rank} failed while this one waited for {what}:\n{text.removeprefix('bug: ')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {timeout:.0f} s for {what}: is every process of the run still running?")
        time.sleep(POLL_S)
