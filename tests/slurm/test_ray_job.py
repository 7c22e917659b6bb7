"""The ray template on the local Slurm cluster: a Ray head and a Ray node as two srun tasks, Ray Train's two
workers on them running the smoke config with `max_failures: 1`; a worker SIGKILLed mid-run is replaced from the
last checkpoint; the cluster stopped at the end. (One job holds both, as each Ray cluster and fit costs tens of
seconds on 2 cores; the killed worker without retries is in tests/train/test_ray.py.)"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch

from eoscale.slurm.render import render_job
from eoscale.slurm.submit import submit_job, wait
from tests.processes import ROOT, VENV
from tests.stores import make_store
from tests.train.ray_helpers import per_rank, rank_reports

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
WORLD, BATCH = 2, 4


def test_two_task_ray_job_trains_on_its_own_ray_cluster_and_replaces_a_killed_worker(local_slurm, tmp_path_factory):
    """Rank 1 SIGKILLs itself at step 3 (right after the step-2 checkpoint report): with --max-failures 1 Ray
    starts both workers again from the checkpoint of step 2, and the run ends at the planned step, in one MLflow
    run. (Before the workers waited for Ray to take their reports, a loaded machine's controller had not polled
    them yet and Ray restarted from step 0.)"""
    store = make_store(tmp_path_factory.mktemp("ray-store"))
    run_dir = tmp_path_factory.mktemp("ray-job")
    start, stop, tiles = per_rank(store, WORLD, BATCH)
    epoch = -(-tiles // BATCH)  # steps an epoch
    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    job = render_job("local", "ray", {
        "venv": str(VENV), "workdir": str(ROOT), "log_dir": str(run_dir / "logs"), "job_name": "ray",
        "tasks_per_node": 2, "config": ["configs/smoke.yaml"], "mlflow_uri": uri, "max_failures": 1,
        "args": ["--data.init_args.store", str(store), "--data.init_args.batch_size", str(BATCH),
                 "--trainer.default_root_dir", str(run_dir), "--trainer.max_steps", str(2 * epoch),
                 "--trainer.val_check_interval", "2",
                 "--trainer.callbacks+=tests.train.helpers.RankReport", f"--trainer.callbacks.folder={run_dir / 'report'}",
                 "--trainer.callbacks+=tests.train.ray_helpers.KillOnce", f"--trainer.callbacks.folder={run_dir}",
                 "--trainer.callbacks.step=3", "--trainer.callbacks+=tests.train.ray_helpers.TileLog",
                 f"--trainer.callbacks.folder={run_dir / 'tiles'}"],
    })
    started = time.perf_counter()
    job_id = submit_job(job)
    state = wait([job_id], timeout=600)[job_id]
    log = (run_dir / "logs" / f"ray-{job_id}.out").read_text()
    assert state == "COMPLETED", log[-3000:]
    print(f"2-task Ray job with a killed worker: {time.perf_counter() - started:.0f} s")
    assert "eoscale: Ray cluster up: 2 node(s)" in log
    assert "on 2 Ray Train worker(s) on" in log
    assert "eoscale: fit finished on 2 Ray Train worker(s)" in log
    assert (run_dir / "killed").exists()  # rank 1 did SIGKILL itself
    # (the workers' own "Ray restarted the workers: resuming from …" line is forwarded by Ray and may not reach the
    # driver before Ray stops, so the restart is judged by where training started again)
    ranks = rank_reports(run_dir / "report", WORLD)  # the second attempt's
    assert ranks["start0"]["step"] == ranks["start1"]["step"] == 2  # from the last checkpoint, not from 0
    assert ranks["0"]["world_size"] == WORLD and ranks["0"]["step"] == ranks["1"]["step"] == 2 * epoch
    for name, value in ranks["0"]["local"].items():  # DDP over Ray's process group keeps the workers equal
        torch.testing.assert_close(value, ranks["1"]["local"][name], rtol=0, atol=0, msg=name)
    (last,) = run_dir.rglob("last.ckpt")
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == 2 * epoch and saved["eoscale"]["tile_size"] == 32
    assert saved["eoscale"]["bands"][0] == "B02"  # the band contract
    assert not Path(f"/tmp/eoscale-ray-{job_id}").exists()  # the job's Ray cluster is gone with it
    left = subprocess.run(["pgrep", "-f", f"eoscale-ray-{job_id}"], capture_output=True, text=True).stdout
    assert not left.strip(), left

    from mlflow import MlflowClient

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])  # one over both attempts
    assert run.info.status == "FINISHED", run.info.status
    assert run.data.params["run/launcher"] == "ray" and run.data.params["run/world_size"] == str(WORLD)
    assert run.data.params["run/strategy"] == "RayDDPStrategy"
    history = client.get_metric_history(run.info.run_id, "val_miou")
    assert {1, 2 * epoch - 1} <= {m.step for m in history}  # before the kill and after the restart (MLflow: step - 1)

    # each rank streamed its own shards: the second epoch's training tiles each on one rank once, as under torchrun
    logs = [json.loads((run_dir / "tiles" / f"tiles{r}.json").read_text())["1"] for r in range(WORLD)]
    seen = [t for tiles_of_rank in logs for t in tiles_of_rank]
    assert len(seen) == len(set(seen)) == WORLD * tiles and set(seen) <= set(range(start, stop))
    assert len(logs[0]) == len(logs[1]) == tiles
