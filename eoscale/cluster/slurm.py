"""Dask workers as Slurm jobs: `slurm_cluster()` for bulk array work bigger than one machine.

    with slurm_cluster(8, profile="juwels-booster") as cluster:
        ingest(scenes, output, scheduler=cluster.scheduler_address)

dask-jobqueue's `SLURMCluster` runs the scheduler in this process (TLS only, with a temporary certificate
that the worker jobs get in their job scripts) and submits one Slurm job per worker group; the workers connect back and tasks flow as soon as the first one joins (the others may wait in
the queue). A profile's `dask` section gives a worker job's partition, cores, processes, memory, wall
time and network interface; its modules, preamble and environment become the job's prologue. Without a
profile, dask-jobqueue's own configuration (`~/.config/dask/jobqueue.yaml`, `DASK_JOBQUEUE__SLURM__*`)
applies. The worker jobs are charged to the account of the job this runs in (`$SLURM_JOB_ACCOUNT`)
unless the profile or the caller names one.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eoscale.cluster.profiles import Profile, load_profile
from eoscale.errors import InputError

log = logging.getLogger(__name__)


@contextmanager
def slurm_cluster(
    workers: int,
    *,
    profile: str | Profile | None = None,
    log_directory: str | os.PathLike | None = "logs",
    check: bool = True,
    **options: Any,
) -> Iterator[Any]:
    """A `dask_jobqueue.SLURMCluster` scaled to `workers` worker processes, closed (jobs cancelled) on exit.

    `options` go to `SLURMCluster` and win over the profile (`cores=1, memory="2GB", processes=1`, …).
    With `check`, the worker job script is first tried with `sbatch --test-only`, so that a bad partition
    or account is one clear error instead of workers that never come.
    """
    from dask_jobqueue import SLURMCluster

    if workers < 1:
        raise InputError(f"--slurm-workers must be at least 1, got {workers}")
    if shutil.which("sbatch") is None:
        raise InputError("sbatch is not on PATH: run this on a Slurm cluster, or start the local one with "
                         "'bash scripts/local-slurm.sh start' and export SLURM_CONF as it prints")
    kwargs = _options(load_profile(profile) if isinstance(profile, str) else profile, log_directory)
    kwargs.update(options)
    if log_directory is not None:
        Path(log_directory).mkdir(parents=True, exist_ok=True)
    cluster = SLURMCluster(**kwargs)
    try:
        if check:
            _test_submit(cluster.job_script())
        cluster.scale(n=workers)
        log.info("submitted Dask worker jobs for %d workers: %s", workers, cluster.job_name)
        yield cluster
    finally:
        cluster.close()
        # dask-jobqueue keeps the run's TLS key and certificates in temporary files for as long as the cluster
        # object lives (its `_job_<name>` attributes): close them now, which deletes them, not at interpreter exit
        for value in list(vars(cluster).values()):
            if Path(str(getattr(value, "name", ""))).name.startswith(".dask-jobqueue.") and hasattr(value, "close"):
                value.close()


def _options(profile: Profile | None, log_directory: str | os.PathLike | None) -> dict[str, Any]:
    from distributed.security import Security

    kwargs: dict[str, Any] = {
        # TLS with a certificate made for this run: the scheduler runs tasks for whoever connects, and on a shared
        # cluster network anyone could; only this process and the worker jobs it submits hold the key
        "security": Security.temporary(),
        "python": sys.executable,  # the venv's interpreter, by absolute path: no activation needed on the worker
        "scheduler_options": {"dashboard": False, "dashboard_address": ":0"},  # no fixed port to collide on
        "log_directory": None if log_directory is None else str(log_directory),
        # where the worker jobs read the run's TLS key and certificate (files only the user can read, removed when
        # the cluster closes): the log folder, which the worker jobs write to, so a file system they share. Left
        # unset, dask-jobqueue warns and writes them into the working directory
        "shared_temp_directory": str(Path(log_directory or ".").resolve()),
        "job_name": "eoscale-dask",
    }
    account = os.environ.get("SLURM_JOB_ACCOUNT")
    if account:
        kwargs["account"] = account
    if profile is None:
        return kwargs
    dask = profile.dask
    queue = dask.get("partition") or profile.defaults.get("partition")
    if queue:
        kwargs["queue"] = queue
    if dask.get("account") or (not account and profile.defaults.get("account")):
        kwargs["account"] = dask.get("account") or profile.defaults["account"]
    for key in ("cores", "processes", "memory", "walltime", "interface", "local_directory"):
        if key in dask:
            kwargs[key] = dask[key]
    if "interface" in dask:
        kwargs["scheduler_options"]["interface"] = dask["interface"]
    kwargs["job_script_prologue"] = profile.shell_setup()
    return kwargs


def _test_submit(script: str) -> None:
    """`sbatch --test-only` the worker job: Slurm says at once whether it would ever run."""
    done = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise InputError(f"Slurm refuses the Dask worker job ({reason}): check the profile's dask section "
                         f"(partition, cores, memory, walltime) and the account")
