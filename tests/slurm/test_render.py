"""Job scripts for every profile × template: the right #SBATCH lines, and user values that stay inert words.

The scripts are also executed here, without Slurm, with `srun`, `scontrol` and `module` replaced by
stubs that record what they were given: that shows what the shell really makes of a hostile value.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from eoscale.errors import InputError, InputNotFoundError
from eoscale.slurm import load_profile, profile_names, render, template_names
from eoscale.slurm.render import render_job
from tests.processes import VENV

HOSTILE = ["$(touch PWNED)", "; touch PWNED", "`touch PWNED`", "a' ; touch PWNED ; '", '"; touch PWNED; "',
           "x && touch PWNED", "|| touch PWNED", "$((1+1))", "${HOME}", "*"]


def required(template: str, tmp_path: Path) -> dict:
    scenes = tmp_path / "scenes.txt"
    scenes.write_text("a.tif\nb.tif\n\nc d.tif\n")
    return {
        "fit": {"config": ["configs/smoke.yaml"]},
        "pretrain": {"config": ["configs/smoke.yaml"]},
        "predict": {"checkpoint": "model.ckpt", "scenes": str(scenes), "output": "maps"},
        "ingest": {"scenes": "data/*.tif", "output": "tiles.zarr"},
        "run": {"command": "eoscale info tiles.zarr"},
    }[template]


def sbatch_lines(script: str) -> dict[str, str]:
    """The #SBATCH options of a script, as sbatch reads them (up to the first command)."""
    options = {}
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            options[key] = value
        elif line.strip() and not line.startswith("#"):
            break
    return options


def test_the_profiles_and_templates_that_ship():
    assert profile_names() == ["jureca-dc", "juwels-booster", "local"]
    assert template_names() == ["fit", "ingest", "predict", "pretrain", "ray", "run", "serve"]
    for name in profile_names():
        profile = load_profile(name)
        assert profile.description and profile.defaults["partition"] and profile.dask


@pytest.mark.parametrize("template", ["fit", "pretrain", "predict", "ingest", "run"])
@pytest.mark.parametrize("profile", ["juwels-booster", "jureca-dc", "local"])
def test_every_profile_renders_every_template(profile, template, tmp_path):
    values = {**required(template, tmp_path), "account": "proj42", "time": "01:30:00"}
    script = render(profile, template, values)
    assert script.startswith("#!/usr/bin/env bash\n")
    options = sbatch_lines(script)
    assert options["--account"] == "proj42" and options["--time"] == "01:30:00"
    assert options["--partition"] == load_profile(profile).defaults["partition"]
    assert options["--job-name"] == f"eoscale-{template}"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell
    gpus = load_profile(profile).defaults["gpus_per_node"]
    if template in ("fit", "pretrain"):
        assert options["--ntasks-per-node"] == str(load_profile(profile).defaults["tasks_per_node"])
        assert options["--signal"] == "SIGUSR1@300" and "--requeue" in options
        assert "srun" in script and f"eoscale {template} " in script
        assert "--trainer.num_nodes=1" in script and "--config configs/strategy/ddp.yaml" in script
        assert ("--gres" in options) == bool(gpus)
    if template == "predict":
        per_task = load_profile(profile).defaults["tasks_per_node"]
        assert options["--array"] == f"0-{(3 + per_task - 1) // per_task - 1}"  # 3 scenes, blank line skipped
    if template == "ingest":
        assert f"--slurm-profile {profile}" in script and "--slurm-workers 4" in script
        assert "'data/*.tif'" in script  # eoscale expands the glob, not the shell


def test_juwels_booster_fit_is_four_gpus_per_node_over_infiniband(tmp_path):
    script = render("juwels-booster", "fit", {"account": "proj42", "nodes": 8, "strategy": "fsdp",
                                              "config": ["configs/vit_s16_seg.yaml"]})
    options = sbatch_lines(script)
    assert options["--gres"] == "gpu:4"
    assert options["--nodes"] == "8" and options["--ntasks-per-node"] == "4" and options["--cpus-per-task"] == "12"
    assert options["--partition"] == "booster"
    assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"i' in script
    assert "export NCCL_SOCKET_IFNAME=ib0" in script and "export GLOO_SOCKET_IFNAME=ib0" in script
    assert "module load Stages/2025 GCC OpenMPI CUDA Python" in script
    assert "source .venv/bin/activate" in script
    assert 'export HF_HUB_OFFLINE="1"' in script and 'export TRANSFORMERS_OFFLINE="1"' in script
    assert 'MLFLOW_TRACKING_URI="sqlite:///${PROJECT:-$SLURM_SUBMIT_DIR}/' in script
    assert "srun --cpu-bind=cores eoscale fit" in script
    assert "--config configs/vit_s16_seg.yaml \\\n    --config configs/strategy/fsdp.yaml" in script
    assert "--trainer.num_nodes=8" in script and "--trainer.devices=4" in script
    assert "--trainer.accelerator=gpu" in script
    assert "export PYTHONUNBUFFERED=1" in script and options["--open-mode"] == "append"


def test_the_local_profile_is_cpu_and_gloo_without_suffix():
    script = render("local", "fit", {"config": ["configs/smoke.yaml"], "tasks_per_node": 2})
    options = sbatch_lines(script)
    assert "--gres" not in options and "--account" not in options
    assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"\n' in script
    assert "--trainer.accelerator=cpu" in script and "--trainer.devices=2" in script
    assert "GLOO_SOCKET_IFNAME=lo" in script and "--cpu-bind" not in script


def test_no_requeue_when_asked():
    options = sbatch_lines(render("local", "fit", {"config": "a.yaml", "requeue": "false"}))
    assert "--no-requeue" in options and "--signal" not in options


@pytest.fixture
def stubs(tmp_path):
    """A bin folder with `srun`, `scontrol` and `module` that record their arguments and environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "calls.jsonl"
    for name in ("srun", "module"):
        (bin_dir / name).write_text(
            "#!/usr/bin/env python3\nimport json, os, sys\n"
            f"open({str(record)!r}, 'a').write(json.dumps({{'cmd': {name!r}, 'argv': sys.argv[1:], "
            "'env': {k: v for k, v in os.environ.items() if k.startswith(('MASTER_', 'NCCL_', 'GLOO_', 'MLFLOW_', "
            "'HF_', 'EOSCALE_', 'CUDA_'))}}) + '\\n')\n"
        )
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'jwb0007\\njwb0008\\n'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir, record


def run_script(script: str, tmp_path: Path, bin_dir: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **extra, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "jwb[0007-0008]", "SLURM_CPUS_PER_TASK": "12",
           "USER": "tester", "PROJECT": str(tmp_path / "project")}
    env.pop("SLURM_CONF", None)
    return subprocess.run(["bash"], input=script, text=True, capture_output=True, env=env, cwd=tmp_path, timeout=60)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_reach_srun_as_one_word_and_do_nothing(value, stubs, tmp_path):
    bin_dir, record = stubs
    script = render("juwels-booster", "fit", {"account": "p", "config": [value], "args": [value], "mlflow_uri": value,
                                              "venv": str(VENV)})
    done = run_script(script, tmp_path, bin_dir)
    assert done.returncode == 0, done.stderr
    srun = json.loads(record.read_text().splitlines()[-1])
    assert srun["argv"][3:5] == ["--config", value] and srun["argv"][-1] == value
    assert srun["env"]["MLFLOW_TRACKING_URI"] == value
    assert not list(tmp_path.rglob("PWNED"))


def test_a_hostile_workdir_is_a_folder_that_does_not_exist(stubs, tmp_path):
    bin_dir, record = stubs
    done = run_script(render("local", "run", {"command": "true", "workdir": "$(touch PWNED)"}), tmp_path, bin_dir)
    assert done.returncode != 0 and "No such file or directory" in done.stderr
    assert not record.exists() and not list(tmp_path.rglob("PWNED"))


def test_a_rendered_fit_job_runs_srun_with_exactly_the_words_given(stubs, tmp_path):
    bin_dir, record = stubs
    hostile = "--trainer.max_epochs=3 '$(touch PWNED)' '; touch PWNED' '`touch PWNED`'"
    script = render("juwels-booster", "fit", {"account": "p", "nodes": 2, "config": ["my cfg.yaml"],
                                              "args": hostile, "venv": str(VENV)})
    done = run_script(script, tmp_path, bin_dir)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["cmd"] for c in calls] == ["module", "module", "srun"]
    srun = calls[-1]
    assert srun["argv"] == ["--cpu-bind=cores", "eoscale", "fit", "--config", "my cfg.yaml", "--config",
                            "configs/strategy/ddp.yaml", "--trainer.accelerator=gpu", "--trainer.num_nodes=2",
                            "--trainer.devices=4", "--trainer.max_epochs=3", "$(touch PWNED)", "; touch PWNED",
                            "`touch PWNED`"]
    assert srun["env"]["MASTER_ADDR"] == "jwb0007i"  # the first node, InfiniBand address
    assert srun["env"]["MASTER_PORT"] == str(20000 + 1234 % 20000)
    assert srun["env"]["NCCL_SOCKET_IFNAME"] == "ib0" and srun["env"]["HF_HUB_OFFLINE"] == "1"
    assert srun["env"]["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path}/project/tester/eoscale/mlflow.db"
    assert (tmp_path / "project" / "tester" / "eoscale").is_dir()  # made for SQLite
    assert not list(tmp_path.rglob("PWNED"))


def test_a_rendered_predict_task_picks_its_scenes(stubs, tmp_path):
    bin_dir, record = stubs
    scenes = tmp_path / "scenes.txt"
    scenes.write_text("s0.tif\ns1.tif\n\ns2 $(touch PWNED).tif\ns3.tif\ns4.tif\n")
    job = render_job("juwels-booster", "predict", {"account": "p", "checkpoint": "m.ckpt", "scenes": str(scenes),
                                                   "output": "maps; touch PWNED", "venv": str(VENV)})
    assert sbatch_lines(job.script)["--array"] == "0-1"  # 5 scenes, 4 per array task (one per GPU)
    # run predict_one as srun would: array task 1, task 0 → the 5th scene; task 1 → none
    script = job.script.replace("srun --cpu-bind=cores bash -c predict_one",
                                "for p in 0 1; do SLURM_PROCID=$p SLURM_LOCALID=$p bash -c predict_one; done")
    script = script.replace('exec eoscale predict', 'exec srun eoscale predict')
    done = run_script(script, tmp_path, bin_dir, SLURM_ARRAY_TASK_ID="1")
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines() if '"srun"' in line]
    assert [c["argv"] for c in calls] == [["eoscale", "predict", "--checkpoint", "m.ckpt", "--output",
                                           "maps; touch PWNED", "--input", "s4.tif"]]
    assert calls[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0"  # its own GPU
    assert not list(tmp_path.rglob("PWNED"))


def test_a_predict_task_reads_scene_names_verbatim(stubs, tmp_path):
    bin_dir, record = stubs
    scenes = tmp_path / "scenes.txt"
    scenes.write_text("s0.tif\ns1 $(touch PWNED).tif\n")
    script = render("local", "predict", {"checkpoint": "m.ckpt", "scenes": str(scenes), "output": "maps",
                                         "venv": str(VENV)})
    script = script.replace("srun bash -c predict_one", "SLURM_PROCID=0 SLURM_LOCALID=0 bash -c predict_one")
    script = script.replace("exec eoscale predict", "exec srun eoscale predict")
    done = run_script(script, tmp_path, bin_dir, SLURM_ARRAY_TASK_ID="1")
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls[-1]["argv"][-1] == "s1 $(touch PWNED).tif"
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize(("values", "message"), [
    ({"nodes": "0"}, "bad value for nodes: expected an integer from 1 to 4096, got '0'"),
    ({"nodes": "2; rm -rf /"}, "bad value for nodes"),
    ({"time": "90"}, "expected a time limit HH:MM:SS or D-HH:MM:SS"),
    ({"time": "01:60:00"}, "expected a time limit"),
    ({"account": "$(id)"}, "bad value for account: expected a name of letters, digits and _.+-"),
    ({"partition": "booster\n#SBATCH --nodes=999"}, "control characters"),
    ({"strategy": "deepspeed"}, "expected one of ddp, fsdp, zero2, zero3, zero3_offload, fsdp2_tp"),
    ({"requeue": "maybe"}, "expected true or false"),
    ({"colour": "red"}, "unknown setting 'colour': choose one of account, adapters, args,"),
    ({"checkpoint": "m.ckpt"}, "setting 'checkpoint' does not apply to template 'fit': it takes account, args,"),
    ({"config": []}, "template 'fit' needs config: pass --config FILE"),
    ({"args": "'unclosed"}, "No closing quotation"),
])
def test_bad_values_are_one_line_errors_naming_what_is_allowed(values, message):
    with pytest.raises(InputError) as err:
        render("local", "fit", {"config": "a.yaml", **values})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_profiles_and_templates(tmp_path):
    with pytest.raises(InputError, match="unknown profile 'jewels': choose one of jureca-dc, juwels-booster, local"):
        render("jewels", "fit", {})
    with pytest.raises(InputError, match="unknown template 'train': choose one of fit, ingest, predict, pretrain, ray, run, serve"):
        render("local", "train", {})
    with pytest.raises(InputError, match="needs a compute project: pass --account PROJECT"):
        render("juwels-booster", "run", {"command": "true"})
    with pytest.raises(InputNotFoundError, match="no scene list"):
        render("local", "predict", {"checkpoint": "m", "scenes": str(tmp_path / "none.txt"), "output": "o"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("partition: booster\ngpus_per_node: many\n")
    with pytest.raises(InputError, match=r"bad value for gpus_per_node in profile '.*bad.yaml': expected an integer"):
        render(str(bad), "run", {"command": "true"})
    bad.write_text("partition: p\ntasks_per_node: 1\ncpus_per_task: 1\ngpus_per_node: 0\ntime: '00:10:00'\n"
                   "env: {X: 'a\"; rm -rf /; \"'}\n")
    with pytest.raises(InputError, match="without double quotes"):
        render(str(bad), "run", {"command": "true"})


def test_a_profile_file_and_a_template_file_of_ones_own(tmp_path):
    profile = tmp_path / "mycluster.yaml"
    profile.write_text("partition: gpu\ntasks_per_node: 2\ncpus_per_task: 8\ngpus_per_node: 2\ntime: '04:00:00'\n"
                       "modules: [CUDA/12]\nenv: {HF_HUB_OFFLINE: '1'}\n")
    template = tmp_path / "hello.sbatch.j2"
    template.write_text('#!/usr/bin/env bash\n{% include "_sbatch.j2" %}\necho {{ args[0] }}\n')
    script = render(str(profile), str(template), {"args": "$(hostname)"})
    assert "#SBATCH --partition=gpu" in script and "#SBATCH --time=04:00:00" in script
    assert "echo '$(hostname)'" in script
    assert re.search(r"job-name=eoscale-hello$", script, re.M)


def test_every_strategy_fragment_can_be_named_by_a_job():
    from eoscale.cluster import settings

    fragments = {p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "strategy").glob("*.yaml")}
    assert set(settings.STRATEGIES) == fragments
    for strategy in settings.STRATEGIES:
        script = render("juwels-booster", "pretrain", {"account": "proj42", "nodes": 2, "strategy": strategy,
                                                        "config": "configs/mae_vit_h14_pretrain.yaml"})
        assert f"--config configs/mae_vit_h14_pretrain.yaml \\\n    --config configs/strategy/{strategy}.yaml" in script
    with pytest.raises(InputError, match="strategy=zero3 does not run under Ray Train"):
        render("local", "ray", {"config": "configs/smoke.yaml", "strategy": "zero3"})
