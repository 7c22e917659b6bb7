"""Real jobs on the local Slurm cluster (scripts/local-slurm.sh): rendered scripts run, and an ingest whose
Dask workers are Slurm jobs writes the same bytes as a local one."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest

from eoscale.cli import main
from eoscale.slurm import render
from eoscale.slurm.render import render_job
from eoscale.slurm.submit import submit_job, wait
from tests.processes import VENV
from tests.rasters import CLASSES_CSV, write_labels, write_scene

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_rendered_job_runs_to_completion(local_slurm, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hostile = "$(touch PWNED); touch PWNED `touch PWNED`"
    started = time.perf_counter()
    assert main(["slurm", "submit", "local", "run", "--set", f"venv={VENV}", "--set", "ntasks=2",
                 "--set", "command=python -c 'import os, sys; print(os.environ[\"SLURM_PROCID\"], sys.argv[1:])'",
                 "--set", f"args={hostile!r}", "--job-name", "hello"]) == 0
    job_id = capsys.readouterr().out.strip()
    assert job_id.isdigit()
    assert wait([job_id], timeout=120) == {job_id: "COMPLETED"}
    print(f"run job: {time.perf_counter() - started:.1f} s from sbatch to COMPLETED")
    log = (tmp_path / "logs" / f"hello-{job_id}.out").read_text()
    assert f"0 ['{hostile}']" in log and f"1 ['{hostile}']" in log  # two tasks, the value as one argument
    assert (tmp_path / "logs" / f"hello-{job_id}.sbatch").read_text().startswith("#!/usr/bin/env bash")
    assert not list(tmp_path.rglob("PWNED"))


def test_a_failing_job_is_reported_failed(local_slurm, tmp_path):
    job = render_job("local", "run", {"venv": str(VENV), "command": "false", "workdir": str(tmp_path)})
    job_id = submit_job(job)
    assert wait([job_id], timeout=120)[job_id] == "FAILED"


def test_sbatch_refusals_are_one_line(local_slurm, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "submit", "local", "run", "--set", "command=true", "--partition", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eoscale slurm: error: sbatch refused the job: invalid partition specified: nosuch")
    assert err.count("\n") == 1


@pytest.fixture(scope="module")
def tiny_rasters(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slurm-rasters")
    (root / "scenes").mkdir()
    (root / "labels").mkdir()
    for i in range(2):
        scene = root / "scenes" / f"scene{i}.tif"
        classes = write_scene(scene, height=96, width=110, seed=i, origin=(310_000.0 + 2_000 * i, 5_650_000.0))
        write_labels(root / "labels" / f"scene{i}_lc.tif", scene, classes)
    (root / "classes.csv").write_text(CLASSES_CSV)
    return root


def ingest_args(rasters: Path, out: Path, *extra: str) -> list[str]:
    return ["ingest", "--scenes", str(rasters / "scenes" / "*.tif"), "--labels", str(rasters / "labels" / "*.tif"),
            "--classes", str(rasters / "classes.csv"), "--output", str(out), "--tile-size", "32",
            "--shard-tiles", "4", "--quiet", *extra]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_ingest_on_dask_workers_that_are_slurm_jobs_matches_a_local_ingest(local_slurm, tiny_rasters, tmp_path):
    assert main(ingest_args(tiny_rasters, tmp_path / "local.zarr", "--workers", "1")) == 0
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main(ingest_args(tiny_rasters, tmp_path / "slurm.zarr", "--slurm-workers", "2", "--slurm-profile",
                                "local", "--slurm-log-dir", str(tmp_path / "logs"))) == 0
    print(f"ingest on 2 Slurm worker jobs: {time.perf_counter() - started:.1f} s")
    # the run's TLS key went to the log folder, not to the working directory with dask-jobqueue's warning, and is
    # gone once the cluster closed
    assert not [w for w in said if "shared_temp_directory" in str(w.message)]
    assert not list((tmp_path / "logs").glob(".dask-jobqueue.*")) and not list(Path.cwd().glob(".dask-jobqueue.*"))
    script = next((tmp_path / "logs").glob("*.err")).parent  # the workers connected over TLS (issue 13, item 13)
    worker_logs = "".join(p.read_text() for p in script.glob("eoscale-dask-*.err"))
    assert "tls://" in worker_logs and "tcp://" not in worker_logs, worker_logs[-2000:]
    logs = sorted((tmp_path / "logs").glob("eoscale-dask-*.err"))
    # two worker jobs were submitted (processes=1, cores=1, 2GB each: the profile's dask section); on a busy
    # machine the work can be done before the second one has started (seen in the full suite)
    assert 1 <= len(logs) <= 2
    local, slurm = tree(tmp_path / "local.zarr"), tree(tmp_path / "slurm.zarr")
    assert len(local) > 10 and slurm == local
    job_ids = [p.stem.removeprefix("eoscale-dask-") for p in logs]
    states = wait(job_ids, timeout=60)  # the cluster let its worker jobs go: they end on their own
    assert all(s in ("CANCELLED", "COMPLETED", "UNKNOWN") for s in states.values()), states


def test_the_ingest_template_runs_as_a_job_whose_workers_are_jobs(local_slurm, tiny_rasters, tmp_path):
    started = time.perf_counter()
    job = render_job("local", "ingest", {
        "venv": str(VENV), "workdir": str(tmp_path), "scenes": str(tiny_rasters / "scenes" / "*.tif"),
        "labels": str(tiny_rasters / "labels" / "*.tif"), "classes": str(tiny_rasters / "classes.csv"),
        "output": "tiles.zarr", "dask_workers": 1, "args": "--tile-size 32 --shard-tiles 4",
    })
    job_id = submit_job(job)
    assert wait([job_id], timeout=300)[job_id] == "COMPLETED", (tmp_path / "logs" / f"eoscale-ingest-{job_id}.out").read_text()
    print(f"ingest job with 1 worker job: {time.perf_counter() - started:.1f} s")
    assert (tmp_path / "tiles.zarr" / "zarr.json").exists()
    assert len(list((tmp_path / "logs").glob("eoscale-dask-*.out"))) == 1


def test_an_unusable_worker_job_is_one_line_at_once(local_slurm, tiny_rasters, tmp_path, capsys):
    profile = tmp_path / "bad.yaml"
    profile.write_text("partition: debug\ndask: {partition: debug, cores: 64, processes: 1, memory: 2GB}\n")
    assert main(ingest_args(tiny_rasters, tmp_path / "x.zarr", "--slurm-workers", "1", "--slurm-profile",
                            str(profile), "--slurm-log-dir", str(tmp_path / "logs"))) == 2
    err = capsys.readouterr().err
    assert "Slurm refuses the Dask worker job" in err and err.count("\n") == 1


def test_render_of_a_job_is_what_submit_sends(tmp_path):
    assert render("local", "run", {"command": "true"}) == render_job("local", "run", {"command": "true"}).script
