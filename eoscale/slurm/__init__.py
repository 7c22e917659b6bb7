"""Slurm glue: job templates, submission, chained pipelines (profiles and Dask workers: `eoscale.cluster`).

    eoscale slurm render juwels-booster fit --account PROJECT --nodes 2 --config configs/vit_s16_seg.yaml
    eoscale slurm submit local run --set command='eoscale info runs/tiles.zarr'
    eoscale slurm submit pipelines/quickstart.yaml --profile local

A profile (`slurm/profiles/*.yaml`) says what a machine is: partition, GPUs per node, CPUs per task,
modules to load, the network interface and the offline settings of its compute nodes. A template
(`slurm/*.sbatch.j2`) says what a job does. Every value a user gives is validated and shell-quoted
before it reaches a script; only the profile's own shell text (its preamble and environment) is
rendered as it is written.
"""

from eoscale.cluster.profiles import Profile, load_profile, profile_names
from eoscale.slurm.render import render, template_names

__all__ = ["Profile", "load_profile", "profile_names", "render", "template_names"]
