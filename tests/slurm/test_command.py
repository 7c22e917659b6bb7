"""`eoscale slurm` as a user types it: render prints, list lists, mistakes are one line and exit code 2."""

from __future__ import annotations

import pytest

from eoscale.cli import main


def test_render_prints_the_script(capsys):
    assert main(["slurm", "render", "juwels-booster", "fit", "--account", "proj42", "--nodes", "2",
                 "--time", "00:30:00", "--config", "configs/resnet18_seg.yaml", "--set", "strategy=fsdp"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --account=proj42\n" in out and "#SBATCH --nodes=2\n" in out and "#SBATCH --time=00:30:00\n" in out
    assert "--config configs/strategy/fsdp.yaml" in out


def test_render_to_a_file(tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    assert main(["slurm", "render", "local", "run", "--set", "command=hostname", "-o", str(out)]) == 0
    assert out.read_text().rstrip().endswith("srun hostname")


def test_list_names_profiles_templates_and_keys(capsys):
    assert main(["slurm", "list"]) == 0
    out = capsys.readouterr().out
    for word in ("juwels-booster", "jureca-dc", "local", "fit", "pretrain", "predict", "ingest", "dask_workers"):
        assert word in out


@pytest.mark.parametrize(("argv", "message"), [
    (["render", "local", "fit", "--config", "a.yaml", "--nodes", "two"], "bad value for nodes: expected an integer"),
    (["render", "local", "fit", "--config", "a.yaml", "--set", "nodes"], "--set takes key=value, got 'nodes'"),
    (["render", "nowhere", "fit"], "unknown profile 'nowhere': choose one of jureca-dc, juwels-booster, local"),
    (["render", "local", "nothing"], "unknown template 'nothing': choose one of fit, ingest, predict, pretrain, ray, run, serve"),
    (["render", "jureca-dc", "run", "--set", "command=true"], "needs a compute project: pass --account PROJECT"),
    (["submit", "local"], "submit takes PROFILE TEMPLATE, or a pipeline YAML file"),
    (["submit", "local", "run", "--set", "command=true", "--dependency", "afterok:1;rm"], "bad --dependency"),
])
def test_mistakes_are_one_line_and_exit_code_2(argv, message, capsys):
    assert main(["slurm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eoscale slurm: error: ") and message in err and err.count("\n") == 1
