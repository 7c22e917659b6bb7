"""Pipelines: the stages as a list of steps in a YAML file, run here in order or submitted as chained jobs.

    eoscale pipeline run pipelines/quickstart.yaml                   # one step after the other, here
    eoscale slurm submit pipelines/quickstart.yaml --profile local   # one job per step, each afterok the last

A step is a job template (`run` unless it says `template: fit`, …) and its settings, the keys of
`eoscale.cluster.settings.KEYS`, written flat:

    steps:
      - name: ingest
        command: eoscale ingest --scenes 'data/*.tif' --output tiles.zarr
        cpus_per_task: 2
      - name: fit
        template: fit
        config: configs/smoke.yaml

On Slurm every job waits for the one before with `--dependency=afterok:ID` and `--kill-on-invalid-dep=yes`,
so a failing step cancels the rest instead of leaving them pending forever. Here, a step runs as the
command its template would run on one machine (no shell: the same words the job would get).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eoscale.cluster import settings
from eoscale.errors import InputError, InputNotFoundError

_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Step:
    name: str
    template: str
    values: dict[str, Any]


@dataclass(frozen=True)
class Pipeline:
    name: str
    path: Path
    steps: list[Step]
    profile: str | None = None
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and check a pipeline file: step names, templates and every setting's type and range."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"no pipeline file at {str(path)!r}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"pipeline {str(path)!r} is not valid YAML: {str(err).splitlines()[0]}") from None
    where = f"pipeline {str(path)!r}"
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise InputError(f"{where} needs a list of steps: steps: [{{name: …, command: …}}, …]")
    unknown = set(data) - {"name", "description", "profile", "defaults", "steps"}
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}: "
                         f"use name, description, profile, defaults, steps")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise InputError(f"{where}: defaults must be a mapping of settings for every step")
    for key in defaults:
        settings.parse_value(key, defaults[key], origin=f"{where}, defaults")
    steps, seen = [], set()
    for i, raw in enumerate(data["steps"]):
        if not isinstance(raw, dict) or "name" not in raw:
            raise InputError(f"{where}: step {i + 1} must be a mapping with a name")
        name = str(raw["name"])
        if not _STEP_NAME.match(name) or name in seen:
            raise InputError(f"{where}: step name {name!r} must be unique, letters, digits and _.-")
        seen.add(name)
        template = str(raw.get("template", "run"))
        if template not in settings.ALL:
            raise InputError(f"{where}: step {name!r}: unknown template {template!r}: "
                             f"choose one of {', '.join(settings.ALL)}")
        values = {k: v for k, v in defaults.items() if settings.applies(k, template)}
        values.update({k: v for k, v in raw.items() if k not in ("name", "template")})
        for key, value in values.items():
            settings.parse_value(key, value, template=template, origin=f"{where}, step {name!r}")
        steps.append(Step(name=name, template=template, values=values))
    return Pipeline(name=str(data.get("name", path.stem)), path=path, steps=steps, profile=data.get("profile"),
                    description=str(data.get("description", "")), defaults=defaults)


def local_commands(step: Step) -> list[list[str]]:
    """The command(s) the step's template would run, for one machine (predict: one per scene)."""
    v = {k: settings.parse_value(k, val, template=step.template) for k, val in step.values.items()}
    args = v.get("args", [])
    if step.template == "run":
        return [v["command"] + args]
    if step.template in settings.TRAIN:
        configs = [w for c in v["config"] for w in ("--config", c)]
        if "strategy" in step.values:
            configs += ["--config", f"configs/strategy/{v['strategy']}.yaml"]
        return [["eoscale", step.template, *configs, *args]]
    if step.template == "ingest":
        command = ["eoscale", "ingest", "--scenes", v["scenes"]]
        if v.get("labels"):
            command += ["--labels", v["labels"]]
        if v.get("classes"):
            command += ["--classes", v["classes"]]
        return [command + ["--output", v["output"], *args]]
    scenes = [ln.strip() for ln in Path(v["scenes"]).read_text().splitlines() if ln.strip()]
    return [["eoscale", "predict", "--checkpoint", v["checkpoint"], "--output", v["output"], "--input", s, *args]
            for s in scenes]


def run_pipeline(pipeline: Pipeline, *, dry_run: bool = False) -> int:
    """Run the steps here, in order; stop at the first that fails. Returns 0, or that step's exit code."""
    for i, step in enumerate(pipeline.steps, 1):
        for command in local_commands(step):
            print(f"== {i}/{len(pipeline.steps)} {step.name}: {shlex.join(command)}", file=sys.stderr, flush=True)
            if dry_run:
                continue
            if command[0] == "eoscale":  # this eoscale, whether or not its venv is on PATH
                command = [sys.executable, "-m", "eoscale", *command[1:]]
            code = subprocess.run(command).returncode
            if code != 0:
                rest = [s.name for s in pipeline.steps[i:]]
                print(f"eoscale pipeline: step {step.name!r} failed (exit code {code})"
                      + (f"; not run: {', '.join(rest)}" if rest else ""), file=sys.stderr)
                return code
    return 0


def submit_pipeline(pipeline: Pipeline, *, profile: str | None = None, extra: dict[str, Any] | None = None
                    ) -> dict[str, str]:
    """Submit one job per step, each `afterok` the one before; returns {step: job id}.

    `extra` settings (from the command line: account, time, …) apply to every step whose template takes
    them, over the pipeline's own. A step that sbatch refuses cancels the jobs already submitted.
    """
    from eoscale.cluster.profiles import load_profile
    from eoscale.slurm.render import render_job
    from eoscale.slurm.submit import cancel, submit_job

    name = profile or pipeline.profile
    if not name:
        raise InputError(f"pipeline {str(pipeline.path)!r} names no profile: pass --profile PROFILE")
    cluster = load_profile(name)
    extra = dict(extra or {})
    for key in extra:
        if not any(settings.applies(key, step.template) for step in pipeline.steps):
            settings.parse_value(key, extra[key], template=pipeline.steps[0].template)  # names the allowed keys
    # render all first: a mistake in step 3 should not leave steps 1 and 2 queued
    jobs = []
    for step in pipeline.steps:
        values = {**step.values, **{k: v for k, v in extra.items() if settings.applies(k, step.template)}}
        values.setdefault("job_name", f"{pipeline.name}-{step.name}")
        jobs.append((step, render_job(cluster, step.template, values)))
    submitted: dict[str, str] = {}
    previous = None
    try:
        for step, job in jobs:
            options = ["--kill-on-invalid-dep=yes"]
            submitted[step.name] = submit_job(job, dependency=f"afterok:{previous}" if previous else None,
                                              options=options)
            previous = submitted[step.name]
    except BaseException:
        cancel(submitted.values())
        raise
    return submitted
