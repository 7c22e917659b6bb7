"""Every benchmark record carries what ties it to the code and the command that made it (issue 45, item 4):
argv and the `eoscale bench …` command, the git commit and whether the tree was dirty, library versions, the
machine and the benchmark's seeds; outside a git checkout the record is still written, with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eoscale.bench import record as record_module
from eoscale.bench.record import git_state, record
from eoscale.cli import main
from tests.processes import ROOT


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _check_provenance(run: dict, command: str, seeds: dict) -> None:
    provenance = run["provenance"]
    assert provenance["command"] == command
    assert provenance["commit"] == _head() and isinstance(provenance["dirty"], bool)
    versions = provenance["versions"]
    for name in ("python", "eoscale", "torch", "timm", "lightning", "numpy"):
        assert versions[name], name
    assert provenance["seeds"] == seeds
    assert run["machine"]["cpu_count"] >= 1 and run["machine"]["platform"]


def test_a_record_written_through_eoscale_bench_carries_its_provenance(tmp_path, monkeypatch):
    # guards: records with no command, commit, versions or seeds (eoscale.bench.record before issue 45); the
    # measurement is stubbed, the command path (eoscale bench → the benchmark's run → record) is the real one
    import eoscale.bench.loader as loader

    monkeypatch.setattr(loader, "bench_loader", lambda store, **kw: {"store": store, "tiles_per_s": 1.0})
    monkeypatch.setattr(sys, "argv", ["pytest-was-here"])  # in-process: the command comes from eoscale bench
    folder = tmp_path / "records"
    assert main(["bench", "loader", "some store.zarr", "--seed", "3", "--record", str(folder)]) == 0
    (run,) = json.loads((folder / "loader.json").read_text())
    _check_provenance(run, f"eoscale bench loader 'some store.zarr' --seed 3 --record {folder}",
                      {"loader and samplers": 3})
    assert run["provenance"]["argv"] == ["pytest-was-here"]
    assert run["tiles_per_s"] == 1.0


@pytest.mark.slow
def test_the_cheapest_real_benchmark_records_its_command_line(tmp_path):
    # guards the same as above end to end: a real `python -m eoscale bench loader` process on a tiny store
    from tests.stores import make_store

    store = make_store(tmp_path / "store", size=160)
    folder = tmp_path / "records"
    argv = ["bench", "loader", str(store), "--workers", "1", "--seconds", "0.2", "--repeats", "1", "--no-torchgeo",
            "--seed", "5", "--record", str(folder)]
    done = subprocess.run([sys.executable, "-m", "eoscale", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads((folder / "loader.json").read_text())
    _check_provenance(run, "eoscale " + " ".join(argv), {"loader and samplers": 5})
    assert run["provenance"]["argv"][1:] == argv and run["provenance"]["argv"][0].endswith("__main__.py")
    assert run["loader"]["tiles_per_s"] > 0


def test_outside_a_git_checkout_the_record_says_why(tmp_path, monkeypatch):
    # guards: a crash (or a made-up commit) when eoscale runs from an installed copy with no git checkout
    monkeypatch.setattr(record_module, "source_tree", lambda: tmp_path)
    path = record("nothing", {"figure": 1}, directory=tmp_path / "records")
    provenance = json.loads(path.read_text())[0]["provenance"]
    assert provenance["commit"] is None and provenance["dirty"] is None
    assert "not a git repository" in provenance["git_unavailable"]


def _git(repo: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *argv], check=True,
                   capture_output=True)


def test_dirty_means_the_code_changed_not_the_records(tmp_path):
    # guards: a tree reported clean with edited code, or dirty only because an earlier run appended a record;
    # and a package inside some other checkout (a venv's site-packages) taken for that checkout's code
    repo = tmp_path / "checkout"
    (repo / "eoscale").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "eoscale" / "__init__.py").write_text("")
    (repo / "benchmarks" / "x.json").write_text("[]\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    state = git_state(repo)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (repo / "benchmarks" / "x.json").write_text("[{}]\n")
    assert git_state(repo)["dirty"] is False
    (repo / "eoscale" / "__init__.py").write_text("x = 1\n")
    state = git_state(repo)
    assert state["dirty"] is True and state["dirty_paths"] == ["eoscale/__init__.py"]
    inner = repo / "venv" / "site-packages"
    inner.mkdir(parents=True)
    assert git_state(inner)["commit"] is None


def test_figures_cannot_overwrite_the_records_own_keys(tmp_path):
    # guards: a benchmark's figure named `provenance` or `machine` silently replacing what record() wrote
    with pytest.raises(ValueError, match="provenance"):
        record("clash", {"provenance": "mine"}, directory=tmp_path)
    assert not (tmp_path / "clash.json").exists()
