"""Submitting job scripts with `sbatch --parsable`, and asking Slurm how they went.

The script goes to sbatch on stdin, so the job's `$SLURM_SUBMIT_DIR` is the folder sbatch runs in
(`workdir`); a copy is kept beside the job's output as `<log_dir>/<job name>-<job id>.sbatch`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from eoscale.errors import InputError
from eoscale.slurm.render import Job

_DEPENDENCY = re.compile(r"^(singleton|[a-z_]+(:\d+(\+\d+)?)+)([,?](singleton|[a-z_]+(:\d+(\+\d+)?)+))*$")

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


def _need(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise InputError(f"{command} is not on PATH: run this on a Slurm login node, or start the local cluster "
                         f"with 'bash scripts/local-slurm.sh start' and export SLURM_CONF as it prints")
    return path


def sbatch(
    script: str,
    *,
    options: Sequence[str] = (),
    workdir: str | Path | None = None,
    log_dir: str | Path | None = "logs",
    job_name: str | None = None,
) -> str:
    """Submit `script` (extra sbatch `options` such as `--dependency=afterok:12`) and return the job id."""
    cwd = Path(workdir or ".")
    if log_dir is not None:
        (cwd / log_dir).mkdir(parents=True, exist_ok=True)  # Slurm does not create the folder of --output
    done = subprocess.run([_need("sbatch"), "--parsable", *options], input=script, capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    if done.returncode != 0:
        lines = [ln.strip().removeprefix("sbatch: error: ") for ln in done.stderr.splitlines() if ln.strip()]
        reason = "; ".join(lines) or f"exit code {done.returncode}"
        raise InputError(f"sbatch refused the job: {reason}")
    job_id = done.stdout.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"
    if not re.fullmatch(r"\d+", job_id):
        raise RuntimeError(f"sbatch --parsable printed {done.stdout!r}, not a job id")
    if log_dir is not None:
        (cwd / log_dir / f"{job_name or 'job'}-{job_id}.sbatch").write_text(script)
    return job_id


def submit_job(job: Job, *, dependency: str | None = None, options: Sequence[str] = ()) -> str:
    """Submit a rendered job (after the jobs of `dependency`, e.g. `afterok:12:13`); returns its id."""
    extra = list(options)
    if dependency:
        if not _DEPENDENCY.match(dependency):
            raise InputError(f"bad --dependency {dependency!r}: expected TYPE:JOBID[:JOBID…], e.g. afterok:1234")
        extra.append(f"--dependency={dependency}")
    return sbatch(job.script, options=extra, workdir=job.workdir, log_dir=job.log_dir, job_name=job.job_name)


def job_state(job_id: str) -> str:
    """The state of a job (of its first array task) as `scontrol` reports it, e.g. PENDING or COMPLETED.

    The local cluster keeps no accounting database: finished jobs are known to scontrol for MinJobAge
    (300 s) after they end.
    """
    done = subprocess.run([_need("scontrol"), "show", "job", "-o", job_id], capture_output=True, text=True, timeout=60)
    states = re.findall(r"\bJobState=(\S+)", done.stdout)
    if done.returncode != 0 or not states:
        return "UNKNOWN"
    unfinished = [s for s in states if s not in FINISHED]
    if unfinished:
        return unfinished[0]
    failed = [s for s in states if s != "COMPLETED"]
    return failed[0] if failed else "COMPLETED"


def wait(job_ids: Iterable[str], *, timeout: float = 600, poll: float = 1.0) -> dict[str, str]:
    """Wait until every job has finished (or `timeout` seconds passed); returns their states."""
    pending = list(job_ids)
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for job_id in list(pending):
            state = job_state(job_id)
            states[job_id] = state
            if state in FINISHED or state == "UNKNOWN":
                pending.remove(job_id)
        if pending and time.monotonic() > deadline:
            break
        if pending:
            time.sleep(poll)
    return states


def cancel(job_ids: Iterable[str]) -> None:
    ids = list(job_ids)
    if ids:
        subprocess.run([_need("scancel"), *ids], capture_output=True, timeout=60)
