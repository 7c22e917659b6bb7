"""Pipelines: the shipped ones load and render; steps run in order here and as chained Slurm jobs, and a
failing step stops the rest (here) or cancels them (Slurm, --kill-on-invalid-dep=yes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eoscale.cli import main
from eoscale.errors import InputError
from eoscale.slurm.pipeline import load_pipeline, local_commands, run_pipeline
from eoscale.slurm.render import render_job
from eoscale.slurm.submit import wait
from tests.processes import ROOT, VENV

PIPELINES = sorted((ROOT / "pipelines").glob("*.yaml"))


def trivial(tmp_path: Path, first: str = "echo one >> order.txt") -> Path:
    path = tmp_path / "three.yaml"
    path.write_text(f"""
name: three
profile: local
defaults: {{workdir: {str(tmp_path)!r}, venv: {str(VENV)!r}, time: "00:05:00"}}
steps:
  - name: one
    command: sh -c '{first}'
  - name: two
    command: sh -c 'sleep 1; echo two >> order.txt'
  - name: three
    command: sh -c 'echo three >> order.txt'
""")
    return path


@pytest.mark.parametrize("path", PIPELINES, ids=[p.name for p in PIPELINES])
@pytest.mark.parametrize("profile", ["local", "juwels-booster"])
def test_every_shipped_pipeline_loads_and_renders_on_every_profile(path, profile):
    pipeline = load_pipeline(path)
    assert pipeline.steps
    for step in pipeline.steps:
        assert local_commands(step)
        script = render_job(profile, step.template, {**step.values, "account": "proj42"}).script
        assert script.startswith("#!/usr/bin/env bash\n")


def test_the_quickstart_pipeline_dry_run(capsys):
    assert main(["pipeline", "run", str(ROOT / "pipelines" / "quickstart.yaml"), "--dry-run"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["== 1/6 synth", "== 2/6 ingest", "== 3/6 fit", "== 4/6 predict",
                                                  "== 5/6 assess", "== 6/6 compare"]
    assert "eoscale fit --config configs/resnet18_seg.yaml --config configs/quickstart/fit.yaml" in lines[2]
    # predict maps the held-out scene, which ingest left out, with the checkpoint the fit step wrote
    assert "--checkpoint runs/quickstart/fit/checkpoints/last.ckpt" in lines[3]
    assert "--input runs/quickstart/data/scenes/scene_004.tif" in lines[3]
    assert "--reference runs/quickstart/data/labels/scene_004_landcover.tif" in lines[4]  # against its truth


def test_steps_run_here_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["pipeline", "run", str(trivial(tmp_path))]) == 0
    assert (tmp_path / "order.txt").read_text().split() == ["one", "two", "three"]


def test_a_failing_step_stops_the_rest_here(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_pipeline(load_pipeline(trivial(tmp_path, first="exit 3"))) == 3
    assert "step 'one' failed (exit code 3); not run: two, three" in capsys.readouterr().err
    assert not (tmp_path / "order.txt").exists()


@pytest.mark.parametrize(("text", "message"), [
    ("steps: []", "needs a list of steps"),
    ("steps: [{name: a, command: x}, {name: a, command: y}]", "step name 'a' must be unique"),
    ("steps: [{name: a, template: train}]", "unknown template 'train': choose one of fit, pretrain"),
    ("steps: [{name: a, command: x, nodes: 0}]", "bad value for nodes in pipeline"),
    ("steps: [{name: a, command: x, colour: red}]", "unknown setting 'colour'"),
    ("stages: [{name: a, command: x}]", "needs a list of steps"),
    ("defaults: {time: soon}\nsteps: [{name: a, command: x}]", "expected a time limit"),
])
def test_bad_pipelines_are_one_line(text, message, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_pipeline(path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slurm
@pytest.mark.slow
def test_chained_jobs_run_in_order_on_slurm(local_slurm, tmp_path, capsys):
    started = time.perf_counter()
    assert main(["slurm", "submit", str(trivial(tmp_path))]) == 0
    jobs = dict(line.split("\t")[::-1] for line in capsys.readouterr().out.splitlines())
    assert list(jobs) == ["one", "two", "three"]
    assert wait(jobs.values(), timeout=180) == {j: "COMPLETED" for j in jobs.values()}
    print(f"3 chained jobs: {time.perf_counter() - started:.1f} s")
    assert (tmp_path / "order.txt").read_text().split() == ["one", "two", "three"]
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.out")) == sorted(
        f"three-{step}-{job}.out" for step, job in jobs.items())


@pytest.mark.slurm
@pytest.mark.slow
def test_a_failing_first_job_cancels_the_rest_on_slurm(local_slurm, tmp_path, capsys):
    assert main(["slurm", "submit", str(trivial(tmp_path, first="exit 3"))]) == 0
    jobs = dict(line.split("\t")[::-1] for line in capsys.readouterr().out.splitlines())
    states = wait(jobs.values(), timeout=180)
    assert [states[jobs[s]] for s in ("one", "two", "three")] == ["FAILED", "CANCELLED", "CANCELLED"]
    assert not (tmp_path / "order.txt").exists()
