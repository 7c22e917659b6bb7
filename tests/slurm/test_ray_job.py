"""The ray template on the local Slurm cluster: a Ray head and a Ray node as two srun tasks, Ray Train's two
workers on them running the smoke config, the cluster stopped at the end."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import torch

from eoscale.slurm.render import render_job
from eoscale.slurm.submit import submit_job, wait
from tests.processes import ROOT, VENV
from tests.stores import make_store

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_two_task_ray_job_trains_on_its_own_ray_cluster(local_slurm, tmp_path_factory):
    store = make_store(tmp_path_factory.mktemp("ray-store"))
    run_dir = tmp_path_factory.mktemp("ray-job")
    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    job = render_job("local", "ray", {
        "venv": str(VENV), "workdir": str(ROOT), "log_dir": str(run_dir / "logs"), "job_name": "ray",
        "tasks_per_node": 2, "config": ["configs/smoke.yaml"], "mlflow_uri": uri,
        "args": ["--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
                 "--trainer.default_root_dir", str(run_dir), "--trainer.max_steps", "4",
                 "--trainer.val_check_interval", "2"],
    })
    started = time.perf_counter()
    job_id = submit_job(job)
    state = wait([job_id], timeout=600)[job_id]
    log = (run_dir / "logs" / f"ray-{job_id}.out").read_text()
    assert state == "COMPLETED", log[-3000:]
    print(f"2-task Ray job: {time.perf_counter() - started:.0f} s")
    assert "eoscale: Ray cluster up: 2 node(s)" in log
    assert "on 2 Ray Train worker(s) on" in log
    assert "eoscale: fit finished on 2 Ray Train worker(s)" in log
    (last,) = run_dir.rglob("last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == 4
    assert not Path(f"/tmp/eoscale-ray-{job_id}").exists()  # the job's Ray cluster is gone with it
    left = subprocess.run(["pgrep", "-f", f"eoscale-ray-{job_id}"], capture_output=True, text=True).stdout
    assert not left.strip(), left
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["run/launcher"] == "ray"
