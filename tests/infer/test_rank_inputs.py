"""The processes of one srun step agree on their arguments before any work, and none waits forever for another
(issue 32, fault 1): ranks given different inputs all stop in one line naming EOSCALE_INDEPENDENT_TASKS; a rank
that does not come is named after a timeout; a rank that finished without writing its share is named too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoscale.errors import InputError
from eoscale.infer.distributed import (
    INDEPENDENT,
    PeerLostError,
    Peers,
    arguments_path,
    beat_path,
    rendezvous,
    wait_for,
)
from tests.processes import INHERITED_NOT, ROOT


def _note(work: Path, rank: int, arguments: dict) -> None:
    """Process `rank`'s arrival, as `rendezvous` leaves it (its digest differs from any real one's)."""
    work.mkdir(parents=True, exist_ok=True)
    arguments_path(work, rank).write_text(json.dumps({"digest": f"of rank {rank}", "arguments": arguments}))


def test_ranks_with_the_same_arguments_meet(tmp_path):
    import threading

    arguments = {"--input": ["a.tif"], "--output": "maps"}
    outcome = []  # process 1's: an error raised in its thread failed nothing before (threads swallow them)

    def process_1():
        try:
            rendezvous(tmp_path, 1, 2, arguments, timeout=10)
            outcome.append("met")
        except Exception as err:  # reported to the test below
            outcome.append(err)

    other = threading.Thread(target=process_1)
    other.start()
    rendezvous(tmp_path, 0, 2, arguments, timeout=10)
    other.join(timeout=30)
    assert outcome == ["met"], outcome


def test_ranks_with_other_inputs_refuse_in_one_line(tmp_path):
    _note(tmp_path, 1, {"--input": ["b.tif"], "--output": "maps"})
    with pytest.raises(InputError) as err:
        rendezvous(tmp_path, 0, 2, {"--input": ["a.tif"], "--output": "maps"}, timeout=5)
    message = str(err.value)
    assert "\n" not in message and INDEPENDENT in message
    assert '--input: process 0 ["a.tif"], process 1 ["b.tif"]' in message


def test_a_rank_that_never_comes_is_named_after_the_timeout(tmp_path):
    _note(tmp_path, 1, {})
    started = time.monotonic()
    with pytest.raises(PeerLostError, match=r"^process 2 of the 3 did not reach the start of the run in 0 s"):
        rendezvous(tmp_path, 0, 3, {}, timeout=0.3)
    assert time.monotonic() - started < 5


def test_a_finished_peer_that_wrote_nothing_ends_the_wait(tmp_path, monkeypatch):
    """A peer whose heartbeat says it finished, while what it was to write never appears: named, not waited for."""
    monkeypatch.setattr("eoscale.infer.distributed.PEER_CHECK_S", 0.0)
    tmp_path.mkdir(exist_ok=True)
    beat_path(tmp_path, 1).write_text(json.dumps({"host": "elsewhere", "pid": 7, "pidns": None, "start": None,
                                                  "rank": 1, "beat": 3, "progress": 2, "worked_s": 1.0, "done": True}))
    started = time.monotonic()
    with pytest.raises(PeerLostError, match=r"process 1 \(pid 7 on elsewhere\) finished .* without writing its "
                                            r"share while this process waited for the parts"):
        wait_for(lambda: False, tmp_path, what="the parts", peers=Peers(tmp_path, [1], silent_after=0.3))
    assert time.monotonic() - started < 5


# -- real processes, as srun starts them -----------------------------------------------------------------------
def _srun(command_of, tmp_path: Path, *, timeout_s: str = "60", wait: float = 240) -> list[tuple[int, str, str]]:
    """Two `eoscale predict` processes as the two tasks of one srun step (no EOSCALE_INDEPENDENT_TASKS);
    `command_of(rank)` gives each its arguments. (code, stdout, stderr) of each, both ended within `wait` s."""
    base = {k: v for k, v in os.environ.items() if k not in (*INHERITED_NOT, INDEPENDENT)}
    base.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
                 "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "5151", "SLURM_STEP_ID": "0",
                 "EOSCALE_RENDEZVOUS_TIMEOUT": timeout_s})
    ranks = [subprocess.Popen([sys.executable, "-m", "eoscale", "predict", *command_of(r)],
                              env={**base, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    results = []
    try:
        deadline = time.monotonic() + wait
        for rank in ranks:
            out, err = rank.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((rank.returncode, out, err))
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.communicate()
    return results


@pytest.mark.slow
def test_srun_tasks_given_other_scenes_both_refuse(checkpoint, tmp_path):
    """The user's own srun line giving each task its scene (issue 32): before, rank 1 exited 0 with no map and
    rank 0 waited until killed; now both exit 2 with one line naming the variable, and no map is written."""
    from tests.rasters import write_scene

    scenes = [tmp_path / "a.tif", tmp_path / "b.tif"]
    for i, scene in enumerate(scenes):
        write_scene(scene, height=64, width=64, seed=i)
    out = tmp_path / "maps"
    results = _srun(lambda r: ["--checkpoint", str(checkpoint), "--input", str(scenes[r]), "--output", str(out),
                               "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"], tmp_path)
    for rank, (code, _, err) in enumerate(results):
        lines = err.strip().splitlines()
        assert code == 2, (rank, err[-3000:])
        assert len(lines) == 1 and lines[0].startswith("eoscale predict: error: the 2 processes"), (rank, lines)
        assert f"{INDEPENDENT}=1" in lines[0] and "--input: process 0" in lines[0] and "b.tif" in lines[0]
    assert not list(out.glob("*.tif"))


@pytest.mark.slow
def test_srun_tasks_given_other_outputs_name_each_other_after_the_timeout(checkpoint, scene, tmp_path):
    """Their notes go to different folders, so neither sees the other: each names the other within the timeout."""
    results = _srun(lambda r: ["--checkpoint", str(checkpoint), "--input", str(scene), "--output",
                               str(tmp_path / f"maps{r}"), "--no-progress"], tmp_path, timeout_s="3")
    for rank, (code, _, err) in enumerate(results):
        lines = err.strip().splitlines()
        assert code == 1, (rank, err[-3000:])
        assert len(lines) == 1 and f"error: process {1 - rank} of the 2 did not reach the start" in lines[0], lines
        assert INDEPENDENT in lines[0]


@pytest.mark.slow
def test_a_rank_that_fails_before_the_rendezvous_stops_the_other_at_once(checkpoint, scene, tmp_path):
    """Process 1 cannot find its scene (not on its node): it leaves a note, and process 0 stops with its error,
    not after the rendezvous's timeout."""
    out = tmp_path / "maps"
    started = time.monotonic()
    results = _srun(lambda r: ["--checkpoint", str(checkpoint), "--input", str(scene if r == 0 else tmp_path / "no.tif"),
                               "--output", str(out), "--no-progress"], tmp_path, timeout_s="600")
    assert time.monotonic() - started < 200  # not the rendezvous's 600 s
    (code0, _, err0), (code1, _, err1) = results
    assert code1 == 2 and "no.tif" in err1, err1[-3000:]
    assert code0 == 2 and err0.strip().splitlines() == [f"eoscale predict: error: process 1 stopped: "
                                                        f"{err1.strip().removeprefix('eoscale predict: error: ')}"]
