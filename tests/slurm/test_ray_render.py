"""The ray template for every profile: one Ray node per srun task, the head at the fast-network address, the
eoscale command with --launcher ray, and user values that stay inert words."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from eoscale.errors import InputError
from eoscale.slurm import render
from tests.slurm.test_render import HOSTILE, sbatch_lines


@pytest.mark.parametrize("profile", ["juwels-booster", "jureca-dc", "local"])
def test_every_profile_renders_the_ray_template(profile):
    script = render(profile, "ray", {"config": ["configs/smoke.yaml"], "account": "proj42", "nodes": 2,
                                     "tasks_per_node": 1})
    assert script.startswith("#!/usr/bin/env bash\n")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    options = sbatch_lines(script)
    assert options["--nodes"] == "2" and options["--ntasks-per-node"] == "1"
    assert "ray_node head" in script and "ray_node worker" in script and "trap stop_ray EXIT" in script
    assert 'eoscale fit --launcher ray --address "${EOSCALE_RAY_ADDRESS}"' in script
    assert "--config configs/smoke.yaml \\\n    --config configs/strategy/ddp.yaml" in script
    assert "export RAY_AUTH_MODE=token" in script and 'export HF_HUB_OFFLINE="1"' in script


def test_juwels_booster_ray_job_is_one_worker_per_gpu_over_infiniband():
    script = render("juwels-booster", "ray", {"account": "p", "nodes": 4, "tasks_per_node": 1, "cpus_per_task": 48,
                                              "config": ["configs/vit_s16_seg.yaml"], "max_failures": 2,
                                              "ray_command": "pretrain"})
    options = sbatch_lines(script)
    assert options["--gres"] == "gpu:4" and options["--cpus-per-task"] == "48"
    assert 'getent ahostsv4 "${head_node}"i' in script  # the head's InfiniBand address
    assert "--gpus-per-task=4" in script and "export NCCL_SOCKET_IFNAME=ib0" in script
    assert "eoscale pretrain --launcher ray" in script
    assert "--workers 16 \\\n    --cpus-per-worker 12 --gpus-per-worker 1 --max-failures 2" in script


def test_hostile_values_stay_words_in_the_ray_job():
    for value in HOSTILE:
        script = render("local", "ray", {"config": [value], "args": [value]})
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)
        assert f"--config {shlex.quote(value)} " in script  # quoted: one inert word, never shell text


def test_a_ray_setting_on_another_template_is_refused():
    with pytest.raises(InputError, match="setting 'workers' does not apply to template 'fit'"):
        render("local", "fit", {"config": ["a.yaml"], "workers": 2})
