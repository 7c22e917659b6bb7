"""A process of a run that dies (or hangs) fails the processes waiting for it within a bounded time, with one
line that names it, and leaves no map that looks finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoscale.infer.distributed import Heartbeat, PeerLostError, Peers, beat_path, left_over_runs, wait_for
from tests.processes import ROOT


def _beat(work: Path, rank: int, **note) -> None:
    work.mkdir(parents=True, exist_ok=True)
    beat_path(work, rank).write_text(json.dumps({"host": "elsewhere", "pid": 1, "pidns": None, "start": None,
                                                 "rank": rank, "beat": 1, "progress": 0, "worked_s": 0.0,
                                                 "done": False, **note}))


def test_a_process_gone_from_this_machine_is_lost_at_once(tmp_path):
    with Heartbeat(tmp_path, 1):  # this process's identity: host, pid namespace
        assert json.loads(beat_path(tmp_path, 1).read_text())["done"] is False
    note = json.loads(beat_path(tmp_path, 1).read_text())
    assert note["done"] is True
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from eoscale.infer.distributed import _start_time

        note.update(pid=gone.pid, start=_start_time(gone.pid), done=False)
        beat_path(tmp_path, 1).write_text(json.dumps(note))
        peers = Peers(tmp_path, [1])
        assert peers.lost() is None  # running
    finally:
        gone.kill()
        gone.wait()
    assert "process 1" in peers.lost() and "died" in peers.lost()


def test_a_silent_process_elsewhere_is_lost_after_the_bound(tmp_path):
    _beat(tmp_path, 1)
    peers = Peers(tmp_path, [1], silent_after=0.3)
    assert peers.lost() is None
    time.sleep(0.4)
    assert "has been silent" in peers.lost()
    _beat(tmp_path, 1, beat=2, progress=1)  # it beats again: alive
    assert peers.lost() is None


def test_finished_never_started_and_stuck_processes(tmp_path):
    _beat(tmp_path, 1, done=True)
    assert Peers(tmp_path, [1], silent_after=0.0).lost() is None  # finished: nothing to wait for
    peers = Peers(tmp_path, [2], start_within=0.2)
    assert peers.lost() is None
    time.sleep(0.3)
    assert "never started" in peers.lost()
    peers = Peers(tmp_path, [3], stall_min=0.2)
    for beat in range(4):  # beats, but its work does not advance
        _beat(tmp_path, 3, beat=beat)
        result = peers.lost()
        time.sleep(0.1)
    assert "has not advanced" in result


def test_wait_for_fails_in_one_line_when_a_peer_is_lost(tmp_path, monkeypatch):
    monkeypatch.setattr("eoscale.infer.distributed.PEER_CHECK_S", 0.0)
    _beat(tmp_path, 1)
    started = time.monotonic()
    with pytest.raises(PeerLostError, match=r"process 1 \(pid 1 on elsewhere\) has been silent .* while this "
                       r"process waited for the parts"):
        wait_for(lambda: False, tmp_path, what="the parts", peers=Peers(tmp_path, [1], silent_after=0.5))
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_a_killed_rank_fails_the_other_within_the_bound(checkpoint, tmp_path, capsys):
    """Two ranks as srun starts them (without --kill-on-bad-exit): rank 1 is killed while rank 0 will wait for
    its part; rank 0 exits with one line, code 1, soon, and no map is published."""
    from tests.rasters import write_scene

    scene = tmp_path / "big.tif"
    write_scene(scene, height=600, width=500, seed=4)
    out = tmp_path / "maps"
    base = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}
    command = [sys.executable, "-m", "eoscale", "predict", "--checkpoint", str(checkpoint), "--input", str(scene),
               "--output", str(out), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    ranks = [subprocess.Popen(command, env={**base, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        beat = beat_path(out / ".eoscale-predict" / "slurm-4242.0", 1)
        deadline = time.monotonic() + 300
        while not beat.exists() and ranks[1].poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert beat.exists(), ranks[1].communicate()[1][-3000:]
        ranks[1].send_signal(signal.SIGKILL)  # no note, no goodbye: as the OOM killer would
        killed = time.monotonic()
        _, err = ranks[0].communicate(timeout=300)
        waited = time.monotonic() - killed
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
            rank.communicate()
    lines = err.strip().splitlines()
    assert ranks[0].returncode == 1, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("eoscale predict: error: process 1 (pid "), lines
    assert "died while this process waited for the parts of scene 'big'" in lines[0]
    # rank 0's own half (and its start-up) plus about a second to notice; far below any wait for a silent peer
    assert waited < 120, waited
    assert not (out / "big_landcover.tif").exists()
    assert not list(out.glob("big_*")) and not list(out.glob(".big_*"))
    # the next run into the same folder removes what the killed run left (its processes have ended), and says so
    left = out / ".eoscale-predict" / "slurm-4242.0"
    assert left.is_dir()
    from eoscale.cli import main

    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(scene), "--output", str(out),
                 "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    assert f"removed {left}, left by an interrupted run" in capsys.readouterr().err
    assert not (out / ".eoscale-predict").exists() and (out / "big_landcover.tif").is_file()


def test_only_folders_of_ended_or_silent_runs_are_left_over(tmp_path):
    root = tmp_path / ".eoscale-predict"
    _beat(root / "elsewhere-beating", 0)  # another node, beating now
    _beat(root / "elsewhere-silent", 0)
    old = time.time() - 120
    os.utime(beat_path(root / "elsewhere-silent", 0), (old, old))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with Heartbeat(root / "here-ended", 0) as beat:
        pass
    note = json.loads(beat.path.read_text())
    beat.path.write_text(json.dumps({**note, "pid": gone.pid, "start": "0"}))  # a pid of this machine, ended
    with Heartbeat(root / "here-running", 0):
        (root / "old-no-beats").mkdir()
        (root / "old-no-beats" / "part.tif").write_bytes(b"x")
        os.utime(root / "old-no-beats" / "part.tif", (old, old))
        os.utime(root / "old-no-beats", (old, old))
        (root / "mine").mkdir()
        found = left_over_runs(root, keep="mine")
    assert [p.name for p in found] == ["elsewhere-silent", "here-ended", "old-no-beats"]


def test_independent_srun_tasks_are_not_ranks_of_one_run(monkeypatch):
    """The predict array template runs one independent predict per srun task (issue 13, fault 1)."""
    from eoscale.infer.distributed import INDEPENDENT, ranks_from_environment

    for name in ("WORLD_SIZE", "RANK", INDEPENDENT):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
                        "SLURM_PROCID": "1"}.items():
        monkeypatch.setenv(name, value)
    ranks = ranks_from_environment()
    assert ranks is not None and (ranks.rank, ranks.world, ranks.run_id) == (1, 2, "slurm-42.0")
    monkeypatch.setenv(INDEPENDENT, "1")
    assert ranks_from_environment() is None


def test_the_predict_template_marks_its_tasks_independent(tmp_path):
    from eoscale.slurm import render

    (tmp_path / "s.txt").write_text("a.tif\nb.tif\n")
    script = render("local", "predict", {"scenes": str(tmp_path / "s.txt"), "checkpoint": "c.ckpt", "output": "maps",
                                         "scenes_per_task": "2"})
    assert "export EOSCALE_INDEPENDENT_TASKS=1" in script.rsplit("\nsrun", 1)[0]
