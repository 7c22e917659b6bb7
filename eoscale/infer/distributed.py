"""Processes of one `eoscale predict` run: who is who, how they agree on a work folder, how they wait.

Three ways to run N processes, one code path:

- `srun -n N eoscale predict ...`: ranks from Slurm (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`); the job and
  step ids name the run (unless `EOSCALE_INDEPENDENT_TASKS=1`: then each task is a run of its own, as in the
  predict array template);
- `torchrun --nproc-per-node N -m eoscale predict ...`: ranks from `RANK`/`WORLD_SIZE`; rank 0 draws a run
  name and sends it to the others over a gloo process group (the rendezvous torchrun set up);
- `eoscale predict --devices N`: the command starts N processes itself (torch.multiprocessing spawn).

The processes share nothing but the output folder: each writes its part files there and the process that
finalises a scene waits for the parts to appear. A process that fails leaves a note there, so the others
stop waiting and report it instead of hanging.

A process that dies without a note (killed, out of memory, its node lost) or hangs is found by its
*heartbeat*: every process rewrites `alive-rank-NNNN.json` in the run's work folder every `HEARTBEAT_S`
seconds with its pid, host and how far its work has come. A process that waits for others fails the run,
with one line naming the lost process (exit code 1), when a process it waits for

- has gone from this machine (same host and pid namespace: its pid no longer runs): within about a second;
- on another machine (or where /proc cannot tell), has not rewritten its heartbeat for `SILENT_AFTER_S`
  (60 s);
- never wrote a heartbeat within `START_WITHIN_S` (10 min) of the wait's start;
- beats but its work has not advanced for the longer of `STALL_MIN_S` (10 min) and the time it had worked
  until its last step (a hung process; a scene's COG is written in one step, which takes a fraction of the
  time its prediction took);
- finished (every process it waits for has), and what it waits for has not appeared `SILENT_AFTER_S` later.

The finalising process fails before it writes any output, so nothing that looks finished is left behind.

Before any work, the processes of an srun or torchrun run meet at a *rendezvous* (`rendezvous`): each writes a
note of its arguments (the options that decide the work, and the scene files they name) into the run's work
folder and waits for every other process's note. Processes given different arguments would deal different work
to each other and wait for parts nobody writes (a user's own `srun` line that gives each task its own scene is
the usual case: those are independent runs, `EOSCALE_INDEPENDENT_TASKS=1`); so every process compares the notes
and, where they differ, all stop in one line that names what differs and that variable (exit code 2). A process
that does not arrive within `EOSCALE_RENDEZVOUS_TIMEOUT` seconds (default `START_WITHIN_S`) is named in one line
(exit code 1): it failed to start, or was given another `--output` (its notes go to another folder).
Differing arguments are refused rather than taken for independent runs: processes that share a run id and an
output folder cannot become separate runs after the fact (their work folders are one), and a user who meant one
run over several processes would get a silent change of plan instead of the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eoscale.errors import InputError, UserError

POLL_S = 0.1  # how often a waiting process looks for what it waits for
PEER_CHECK_S = 1.0  # how often it looks at the other processes' heartbeats
HEARTBEAT_S = 2.0
SILENT_AFTER_S = 60.0
START_WITHIN_S = 600.0
STALL_MIN_S = 600.0
RENDEZVOUS_TIMEOUT = "EOSCALE_RENDEZVOUS_TIMEOUT"  # seconds a process waits for the others at the rendezvous


class PeerLostError(UserError, RuntimeError):
    """Another process of the run died or hung: not a mistake in the input and not a bug here, but one line
    (which process, where to look) serves the user better than a traceback of the process that waited."""

    exit_code = 1


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int
    run_id: str


INDEPENDENT = "EOSCALE_INDEPENDENT_TASKS"  # set (to 1) where srun's tasks are separate runs, not ranks of one


def ranks_from_environment() -> Ranks | None:
    """This process's rank under torchrun or srun with more than one process, else None.

    srun's tasks are ranks of one run unless `EOSCALE_INDEPENDENT_TASKS=1` says otherwise: the predict array
    template starts one independent `eoscale predict` per task (each its own scene) under one srun, and
    tasks taken for ranks would each predict a slice of their own scene and wait for slices nobody writes.
    """
    env = os.environ
    if env.get(INDEPENDENT, "").strip() not in ("", "0"):
        return None
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


# -- the rendezvous ------------------------------------------------------------------------------------------
def arguments_path(work: Path, rank: int) -> Path:
    return Path(work) / f"arguments-rank-{rank:04d}.json"


def rendezvous_timeout() -> float:
    text = os.environ.get(RENDEZVOUS_TIMEOUT, "").strip()
    try:
        seconds = float(text) if text else START_WITHIN_S
    except ValueError:
        raise InputError(f"{RENDEZVOUS_TIMEOUT}={text!r}: give a number of seconds, e.g. 600") from None
    if not seconds > 0:
        raise InputError(f"{RENDEZVOUS_TIMEOUT}={text!r}: give a number of seconds above 0, e.g. 600")
    return seconds


def rendezvous(work: Path, rank: int, world: int, arguments: dict, *, timeout: float | None = None) -> None:
    """Meet the other `world - 1` processes of the run in `work`: leave this process's `arguments` (JSON-able,
    keyed by the flag that gives each), wait for every other process's, and stop, on every process alike, where
    any differs from process 0's (`InputError`, naming `EOSCALE_INDEPENDENT_TASKS` and what differs) or where a
    process has not arrived within `timeout` seconds (`PeerLostError`, naming it). A process that failed before
    it got here and left a note (`report_failure`) stops the others at once with its error."""
    timeout = rendezvous_timeout() if timeout is None else timeout
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()
    work.mkdir(parents=True, exist_ok=True)
    staged = work / f".arguments-rank-{rank:04d}.json.partial"
    staged.write_text(json.dumps({"digest": digest, "arguments": arguments}, sort_keys=True, default=str))
    os.replace(staged, arguments_path(work, rank))  # a process reading it never reads it half-written
    notes: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while True:
        for other in range(world):
            if other not in notes:
                with contextlib.suppress(FileNotFoundError, ValueError):  # not there yet, or caught mid-write
                    notes[other] = json.loads(arguments_path(work, other).read_text())
        if len(notes) == world:
            break
        _raise_reported(work, "the other processes at the start of the run")
        if time.monotonic() > deadline:
            missing = [r for r in range(world) if r not in notes]
            raise PeerLostError(
                f"process {missing[0]}{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''} of the "
                f"{world} did not reach the start of the run in {timeout:.0f} s ({RENDEZVOUS_TIMEOUT}), looked for "
                f"in {work}: it failed to start (see its log) or was given another --output; the tasks of one srun "
                f"step are the processes of one run and take the same command; for separate runs set "
                f"{INDEPENDENT}=1")
        time.sleep(POLL_S)
    differ = [r for r in range(world) if notes[r].get("digest") != notes[0].get("digest")]
    if differ:
        raise InputError(f"the {world} processes of this run were given different arguments ({_difference(notes, differ[0])}"
                         f"{f'; {len(differ)} processes differ from process 0' if len(differ) > 1 else ''}): the "
                         f"tasks of one srun step (or torchrun) are the processes of one run and take the same "
                         f"command; to run each task on its own inputs as a separate run, set {INDEPENDENT}=1")


def _difference(notes: dict[int, dict], rank: int) -> str:
    """What process `rank`'s arguments have that process 0's have not, shortly: `--input: process 0 [...], process
    1 [...]` for the first option that differs."""
    ours, theirs = notes[0].get("arguments", {}), notes[rank].get("arguments", {})
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            return f"{key}: process 0 {_short(ours.get(key))}, process {rank} {_short(theirs.get(key))}"
    return f"process {rank}'s note differs from process 0's"


def _short(value: object, limit: int = 120) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def wait_for(ready: Callable[[], bool], work: Path, *, what: str, peers: Peers | None = None) -> None:
    """Wait until `ready()`; stop with the failure another process reported, or when `peers` finds one of the
    processes lost (see the module docstring for the bounds)."""
    checked = time.monotonic()
    while not ready():
        _raise_reported(work, what)
        if peers is not None and time.monotonic() - checked >= PEER_CHECK_S:
            checked = time.monotonic()
            lost = peers.lost()
            # it may have finished (or reported its failure) just before it went: look once more
            if lost is not None and not ready():
                _raise_reported(work, what)
                raise PeerLostError(f"{lost} while this process waited for {what}: the run failed and wrote no "
                                    f"map for it; see that process's log, then run the command again")
        time.sleep(POLL_S)


def _raise_reported(work: Path, what: str) -> None:
    note = first_failure(work)
    if note is not None:
        rank, text = note
        if text.startswith("user: "):
            raise InputError(f"process {rank} stopped: {text.removeprefix('user: ')}")
        raise RuntimeError(f"process {rank} failed while this one waited for {what}:\n{text.removeprefix('bug: ')}")


# -- heartbeats -----------------------------------------------------------------------------------------------
def beat_path(work: Path, rank: int) -> Path:
    return Path(work) / f"alive-rank-{rank:04d}.json"


def _gone(note: dict) -> bool:
    """Whether the process a heartbeat note names has surely ended: it ran on this machine, in this pid
    namespace, and that pid no longer runs (or runs another process, started at another time)."""
    identity = _process_identity()
    if note.get("host") != identity["host"] or note.get("pidns") is None or note.get("pidns") != identity["pidns"]:
        return False
    return _start_time(int(note["pid"])) != note.get("start")


def left_over_runs(root: Path, *, keep: str, silent_after: float = SILENT_AFTER_S) -> list[Path]:
    """The run folders under `root` (`<output>/.eoscale-predict`) other than `keep` that an interrupted run
    left behind: every process whose heartbeat is there has ended on this machine, or none has rewritten its
    heartbeat for `silent_after` seconds (a folder without heartbeats: nothing in it changed for as long).
    A run still going, here or on another node, keeps beating, so its folder is never among them."""
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name == keep or not folder.is_dir():
            continue
        beats = list(folder.glob("alive-rank-*.json"))
        try:
            newest = max((p.stat().st_mtime for p in beats or [folder, *folder.iterdir()]), default=0.0)
            notes = []
            for p in beats:
                with contextlib.suppress(ValueError):
                    notes.append(json.loads(p.read_text()))
        except OSError:
            continue  # it went while we looked: its own run tidied it up
        ended = bool(notes) and len(notes) == len(beats) and all(_gone(n) for n in notes)
        if ended or time.time() - newest > silent_after:
            found.append(folder)
    return found


def _process_identity() -> dict:
    """What tells this process apart on a cluster: host, pid namespace, pid and the pid's start time."""
    identity: dict = {"host": socket.gethostname(), "pid": os.getpid(), "pidns": None, "start": None}
    with contextlib.suppress(OSError):
        identity["pidns"] = os.readlink("/proc/self/ns/pid")
        identity["start"] = _start_time(os.getpid())
    return identity


def _start_time(pid: int) -> str | None:
    """Process `pid`'s start time (in clock ticks since boot) and state, from /proc; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie has died already


class Heartbeat:
    """This process's heartbeat file, rewritten every `HEARTBEAT_S` seconds by a thread while in the `with`
    block; `advance()` counts steps of work (batches, outputs), so that waiting processes see progress.

    The file is rewritten in place rather than renamed into place: on NFS a renamed file can stay hidden
    behind a cached directory entry for up to a minute, an in-place rewrite is seen on the next open.
    """

    def __init__(self, work: Path, rank: int) -> None:
        self.path = beat_path(work, rank)
        self.rank = rank
        self.progress = 0
        self._identity = _process_identity()
        self._started = time.monotonic()
        self._progressed = 0.0  # seconds of work until the last step
        self._beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="eoscale-heartbeat")

    def __enter__(self) -> Heartbeat:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(done=False)
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self._write(done=exc_type is None)

    def advance(self, steps: int = 1) -> None:
        self.progress += steps
        self._progressed = time.monotonic() - self._started

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):  # a full or flaky disk: the next beat tries again
                self._write(done=False)

    def _write(self, *, done: bool) -> None:
        self._beats += 1
        note = {**self._identity, "rank": self.rank, "beat": self._beats, "progress": self.progress,
                "worked_s": self._progressed, "done": done}
        with open(self.path, "w") as f:
            f.write(json.dumps(note))


@dataclass
class _Seen:
    text: str
    at: float  # when this process saw the text change (its own monotonic clock: no skew between hosts)
    progress: int
    progress_at: float


class Peers:
    """The other processes of a run as their heartbeats show them, to a process that waits for them."""

    def __init__(self, work: Path, ranks: list[int], *, silent_after: float = SILENT_AFTER_S,
                 start_within: float = START_WITHIN_S, stall_min: float = STALL_MIN_S) -> None:
        self.work = Path(work)
        self.ranks = ranks
        self.silent_after, self.start_within, self.stall_min = silent_after, start_within, stall_min
        self._here = _process_identity()
        self._began = time.monotonic()
        self._seen: dict[int, _Seen] = {}
        self._done: dict[int, tuple[float, str]] = {}  # rank: (when this process first saw it done, who)

    def lost(self) -> str | None:
        """A description of the first process found dead or hung, None if all look well."""
        now = time.monotonic()
        for rank in self.ranks:
            try:
                text = beat_path(self.work, rank).read_text()
                note = json.loads(text)
            except FileNotFoundError:
                if now - self._began > self.start_within:
                    return f"process {rank} never started (no heartbeat in {self.start_within:.0f} s)"
                continue
            except (OSError, ValueError):  # caught mid-rewrite: look again next time
                continue
            if note.get("done"):
                self._done.setdefault(rank, (now, f"process {rank} (pid {note.get('pid')} on {note.get('host')})"))
                continue
            seen = self._seen.get(rank)
            if seen is None or seen.text != text:
                moved = seen is None or seen.progress != note["progress"]
                self._seen[rank] = seen = _Seen(text, now, note["progress"],
                                                now if moved else seen.progress_at)
            where = f"process {rank} (pid {note['pid']} on {note['host']})"
            if self._same_machine(note):
                if _start_time(note["pid"]) != note["start"]:
                    return f"{where} died"
            elif now - seen.at > self.silent_after:  # elsewhere, silence is all there is to go by
                return f"{where} has been silent for {now - seen.at:.0f} s: it died or its machine is lost"
            stall = max(self.stall_min, float(note.get("worked_s", 0.0)))
            if now - seen.progress_at > stall:
                return f"{where} is alive but its work has not advanced for {now - seen.progress_at:.0f} s"
        # every process waited for has finished, and what they were to write is still not here after the time a
        # shared file system may take to show it: nobody will write it (processes that dealt the work otherwise)
        if self.ranks and all(r in self._done for r in self.ranks):
            last = max(at for at, _ in self._done.values())
            if now - last > self.silent_after:
                return f"{self._done[self.ranks[0]][1]} finished {now - last:.0f} s ago without writing its share"
        return None

    def _same_machine(self, note: dict) -> bool:
        """Whether this process can see `note`'s process in /proc (same host, same pid namespace)."""
        here = self._here
        return here["start"] is not None and note.get("start") is not None and (
            note["host"], note.get("pidns")) == (here["host"], here["pidns"])
