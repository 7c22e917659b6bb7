"""The map does not depend on the batch size or on the number of processes: byte-identical COGs."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoscale.infer.run import PredictConfig, predict
from tests.rasters import write_scene


def _run(checkpoint: Path, inputs: list[Path], out: Path, **options) -> Path:
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(p) for p in inputs], output=str(out),
                          confidence=True, progress=False, **options))
    return out


def _same_files(a: Path, b: Path, scene_ids: list[str]) -> None:
    for scene_id in scene_ids:
        for name in (f"{scene_id}_landcover.tif", f"{scene_id}_confidence.tif", f"{scene_id}_areas.csv"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(checkpoint, scene, tmp_path_factory) -> Path:
    """The map of the default settings, which each variant below must equal byte for byte: batches of 16 windows,
    one reading thread beside a CPU model, one process, one full-width sweep (the 4,096-column tile holds all 347)."""
    from eoscale.infer.config import COLUMN_TILE

    assert PredictConfig.__dataclass_fields__["batch_size"].default == 16 and COLUMN_TILE > 347
    return _run(checkpoint, [scene], tmp_path_factory.mktemp("reference"))


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_batch_size_does_not_change_the_map(checkpoint, scene, reference, tmp_path):
    for batch_size in (1, 5):
        _same_files(reference, _run(checkpoint, [scene], tmp_path / f"b{batch_size}", batch_size=batch_size), ["odd"])


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_reading_threads_do_not_change_the_map(checkpoint, scene, reference, tmp_path):
    _same_files(reference, _run(checkpoint, [scene], tmp_path / "r3", readers=3, column_tile=200), ["odd"])


@pytest.mark.slow  # tens of seconds: out of the fast tier (scripts/test.sh --fast), still in the full suite
def test_column_tiles_do_not_change_the_map(checkpoint, scene, reference, tmp_path):
    """Sweeping the 347-column scene in tiles (each with its halo) gives the bytes of one full-width sweep."""
    from eoscale.infer.windows import WindowGrid

    for pixels in (100, 33):  # several tiles; and tiles narrower than a window: one column block each
        tiles = WindowGrid.make(301, 347, window=32, overlap=0.25).column_tiles(pixels)
        assert len(tiles) > 2
        _same_files(reference, _run(checkpoint, [scene], tmp_path / f"t{pixels}", column_tile=pixels, batch_size=5),
                    ["odd"])


@pytest.mark.slow
def test_two_processes_with_column_tiles_give_the_same_bytes_as_one(checkpoint, scene, reference, tmp_path):
    two = _run(checkpoint, [scene], tmp_path / "two", devices=2, column_tile=120)
    _same_files(reference, two, ["odd"])


@pytest.mark.slow
def test_two_processes_give_the_same_bytes_as_one(checkpoint, scene, tmp_path):
    """One scene, two processes: each predicts half of the rows (plus halo), process 0 assembles the COG."""
    one = _run(checkpoint, [scene], tmp_path / "one", overlap=0.5)
    two = _run(checkpoint, [scene], tmp_path / "two", overlap=0.5, devices=2, batch_size=7)
    _same_files(one, two, ["odd"])
    assert not (two / ".eoscale-predict").exists()


@pytest.mark.slow
def test_scenes_dealt_to_processes_give_the_same_bytes(checkpoint, scene, tmp_path):
    """Two scenes, two processes: each process maps a whole scene."""
    other = tmp_path / "other.tif"
    write_scene(other, height=120, width=95, seed=5, origin=(320_000.0, 5_640_000.0))
    one = _run(checkpoint, [scene, other], tmp_path / "one")
    two = _run(checkpoint, [scene, other], tmp_path / "two", devices=2)
    _same_files(one, two, ["odd", "other"])


@pytest.mark.slow
def test_torchrun_ranks_give_the_same_bytes(checkpoint, scene, reference, tmp_path, tracking_uri):
    """Ranks from the environment (torchrun): rank 0 draws the run's name and shares it over gloo."""
    import shutil
    import subprocess
    import sys

    from tests.processes import ROOT

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore", "HOME": str(tmp_path)}
    done = subprocess.run([torchrun, "--nproc-per-node", "2", "-m", "eoscale", "predict", "--checkpoint",
                           str(checkpoint), "--input", str(scene), "--output", str(tmp_path / "two"), "--confidence",
                           "--no-progress", "--tracking-uri", tracking_uri], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("301×347") == 1  # one summary, from rank 0
    _same_files(reference, tmp_path / "two", ["odd"])


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.usefixtures("local_slurm")
def test_srun_tasks_give_the_same_bytes(checkpoint, scene, reference, tmp_path, tracking_uri):
    """Ranks from Slurm (`srun -n 2`): the job and step ids name the run; the same bytes as one process."""
    import subprocess
    import sys

    from tests.processes import ROOT

    done = subprocess.run(
        ["srun", "-n", "2", "--cpus-per-task", "1", "--export", f"ALL,PYTHONPATH={ROOT},OMP_NUM_THREADS=1",
         sys.executable, "-m", "eoscale", "predict", "--checkpoint", str(checkpoint), "--input", str(scene),
         "--output", str(tmp_path / "two"), "--confidence", "--no-progress", "--tracking-uri", tracking_uri],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("301×347") == 1
    _same_files(reference, tmp_path / "two", ["odd"])
