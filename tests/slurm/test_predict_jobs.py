"""The predict template on the local Slurm cluster: an array job over a scene list, two scenes per array task
(two independent srun tasks, the documented JUWELS path), each task writing its scene's land-cover map."""

from __future__ import annotations

import subprocess
import time

import pytest

from eoscale.cli import main
from tests.checkpoints import make_checkpoint
from tests.processes import VENV
from tests.rasters import write_scene

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def wait_gone(job_id: str, timeout: float) -> None:
    """Poll `squeue -j ID` until no task of the (array) job is left: sacct is off with accounting none."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True, text=True)
        # once the job has left the controller's memory squeue says 'Invalid job id specified' (rc 1)
        if not done.stdout.strip():
            return
        assert time.monotonic() < deadline, f"job {job_id} still queued after {timeout} s:\n{done.stdout}"
        time.sleep(1)


def test_a_predict_array_job_maps_every_scene(local_slurm, tmp_path, capsys, monkeypatch):
    import rasterio

    monkeypatch.chdir(tmp_path)
    scenes = []
    for i in range(3):
        scene = tmp_path / "scenes" / f"scene{i}.tif"
        scene.parent.mkdir(exist_ok=True)
        write_scene(scene, height=160, width=190, seed=i, origin=(310_000.0 + 4_000 * i, 5_650_000.0))
        scenes.append(scene)
    (tmp_path / "scenes.txt").write_text("".join(f"{s}\n" for s in scenes))
    checkpoint = make_checkpoint(tmp_path / "ckpt" / "best.ckpt")
    out = tmp_path / "maps"
    # one MLflow store made before the job: two array tasks creating a fresh SQLite store at once can collide
    uri = f"sqlite:///{out / 'mlflow.db'}"
    out.mkdir()
    subprocess.run([str(VENV / "bin" / "python"), "-c", f"import mlflow; mlflow.MlflowClient({uri!r}).search_experiments()"],
                   check=True, capture_output=True)

    started = time.perf_counter()
    assert main(["slurm", "submit", "local", "predict", "--set", f"venv={VENV}", "--set", "scenes=scenes.txt",
                 "--set", f"checkpoint={checkpoint}", "--set", f"output={out}", "--set", "scenes_per_task=2", "--set", "tasks_per_node=2",
                 "--set", f"mlflow_uri={uri}", "--set", "args=--no-progress", "--job-name", "predict"]) == 0
    job_id = capsys.readouterr().out.strip()
    assert job_id.isdigit()
    script = (tmp_path / "logs" / f"predict-{job_id}.sbatch").read_text()
    assert "#SBATCH --array=0-1\n" in script and "#SBATCH --ntasks=2\n" in script

    wait_gone(job_id, timeout=180)
    print(f"predict array job, 3 scenes: {time.perf_counter() - started:.1f} s from sbatch to done")
    logs = {i: tmp_path / "logs" / f"predict-{job_id}_{i}.out" for i in range(2)}
    assert all(p.exists() for p in logs.values()), sorted(p.name for p in (tmp_path / "logs").iterdir())
    text = {i: p.read_text() for i, p in logs.items()}
    for n, scene in enumerate(scenes):
        array_task, task = divmod(n, 2)
        i = array_task
        assert f"eoscale: array task {array_task}, task {task}: scene {n + 1}: {scene}" in text[i], text[i][-3000:]
        landcover = out / f"{scene.stem}_landcover.tif"
        assert landcover.exists(), text[i][-3000:]
        with rasterio.open(scene) as src, rasterio.open(landcover) as lc:
            assert lc.crs == src.crs
            assert (lc.height, lc.width) == (src.height, src.width)
            assert lc.count == 1
