"""The fit template on the local Slurm cluster: two gloo DDP ranks as two srun tasks, and Lightning's
auto-requeue as eoscale does it (`eoscale.train.launch.requeue`): SIGUSR1 → every rank saves the hpc checkpoint at one
step → `scontrol requeue` → the requeued job resumes from it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from eoscale.cli import main
from eoscale.slurm.render import render_job
from eoscale.slurm.submit import job_state, submit_job, wait
from tests.processes import ROOT, VENV
from tests.rasters import CLASSES_CSV, write_labels, write_scene

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
# the signal comes before the first steps are done (an epoch is 4 steps), so the resumed job trains most of them
STEPS = 12


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fit-store")
    for i in range(2):
        scene = root / f"scene{i}.tif"
        classes = write_scene(scene, seed=i, origin=(310_000.0 + 4_000 * i, 5_650_000.0))
        write_labels(root / f"labels{i}.tif", scene, classes)
    (root / "classes.csv").write_text(CLASSES_CSV)
    out = root / "tiles.zarr"
    assert main(["ingest", "--scenes", str(root / "scene*.tif"), "--labels", str(root / "labels*.tif"), "--classes",
                 str(root / "classes.csv"), "--output", str(out), "--tile-size", "32", "--shard-tiles", "16",
                 "--workers", "1", "--quiet"]) == 0
    return out


def fit_job(store: Path, run_dir: Path, name: str, max_steps: int):
    run_dir.mkdir(parents=True, exist_ok=True)
    # one MLflow store made before the job: two ranks creating a fresh SQLite store at once can collide
    # (reported to eoscale.train; the subject here is Slurm, not MLflow)
    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    subprocess.run([str(VENV / "bin" / "python"), "-c", f"import mlflow; mlflow.MlflowClient({uri!r}).search_experiments()"],
                   check=True, capture_output=True)
    return render_job("local", "fit", {
        "venv": str(VENV), "workdir": str(ROOT), "log_dir": str(run_dir / "logs"), "job_name": name,
        "tasks_per_node": 2, "config": ["configs/smoke.yaml"], "mlflow_uri": uri,
        # batch 8: each rank's 33 training tiles would end in a batch of one, which ResNet's BatchNorm cannot train
        # on at 32 px (1×1 feature maps); the loader drops that tile (eoscale.data.partition.rank_length)
        "args": ["--data.init_args.store", str(store), "--data.init_args.batch_size", "8",
                 "--trainer.default_root_dir", str(run_dir),
                 "--trainer.max_steps", str(max_steps), "--trainer.val_check_interval", str(max_steps // 2)],
    })


def test_two_rank_ddp_fit_job_checkpoints_on_sigusr1_requeues_and_resumes(local_slurm, store, tmp_path):
    """Two gloo DDP ranks train; SIGUSR1 (sent as soon as both ranks handle it) makes them checkpoint at one step
    and requeue the job, which resumes from that checkpoint and trains to max_steps."""
    started = time.perf_counter()
    job_id = submit_job(fit_job(store, tmp_path, "requeue", STEPS))
    log_file = tmp_path / "logs" / f"requeue-{job_id}.out"
    deadline = time.monotonic() + 600
    # both ranks past Trainer._run's handler set-up, so after eoscale's SIGUSR1 handler (set in the callback's
    # setup): from here on the signal is only noted, and acted upon after a training step
    while (log_file.read_text() if log_file.exists() else "").count("Setting signal handlers") < 2:
        assert time.monotonic() < deadline and job_state(job_id) in ("PENDING", "RUNNING", "CONFIGURING"), \
            log_file.read_text()[-3000:] if log_file.exists() else job_state(job_id)
        time.sleep(0.2)
    # what Slurm does at --signal=SIGUSR1@N before the time limit, now
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    state = wait([job_id], timeout=600)[job_id]
    log = log_file.read_text()  # --open-mode=append: both runs of the job
    assert state == "COMPLETED", log[-3000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in log
    print(f"2-rank DDP fit job, SIGUSR1, requeue, resume: {time.perf_counter() - started:.0f} s")
    assert "Slurm's time-limit signal (SIGUSR1): every rank saves" in log
    assert f"eoscale: requeued Slurm job {job_id}; it resumes from hpc_ckpt_1.ckpt" in log
    assert "Handling auto-requeue signal" not in log  # Lightning's handler, which saves inside the signal, never ran
    # the ranks are requeued once the fit has ended on each: no rank is killed inside a collective (a gloo abort and
    # a traceback from each rank), nor logs Lightning's SIGTERM handler or its checkpoint default
    # nor Lightning's "dataloader is not resumable" (TileLoader resumes an epoch after the batches it trained)
    for noise in ("Traceback", "EnforceNotMet", "Bypassing SIGTERM", "`weights_only` was not set", "not resumable"):
        assert noise not in log, noise
    assert f"eoscale: job {job_id} (restart 1)" in log
    assert f"Restored all states from the checkpoint at {tmp_path}/hpc_ckpt_1.ckpt" in log
    assert f"`Trainer.fit` stopped: `max_steps={STEPS}` reached." in log
    # the requeued job logs on into the MLflow run the first one started
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["run/slurm_job_id"] == job_id
