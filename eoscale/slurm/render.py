"""Job scripts from a profile, a template and the user's settings.

Templates are Jinja2 files `slurm/<name>.sbatch.j2` (or any path). Every `{{ value }}` a template prints is
shell-quoted on the way out (`shlex.quote`), unless it is `Shell` text: the profile's own preamble and
environment, or fixed snippets of this module. So a user's value, whatever it holds (`$(rm -rf /)`,
`; echo pwned`), reaches the script as one inert word.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from eoscale.cluster import settings
from eoscale.cluster.profiles import PROFILE_DIR, Profile, load_profile
from eoscale.errors import InputError, InputNotFoundError

TEMPLATE_DIR = PROFILE_DIR.parent
SUFFIX = ".sbatch.j2"


class Shell(str):
    """Trusted shell text, rendered as written (never a user's value)."""


def template_names() -> list[str]:
    return sorted(p.name.removesuffix(SUFFIX) for p in TEMPLATE_DIR.glob(f"*{SUFFIX}"))


def template_path(name_or_path: str) -> tuple[str, Path]:
    """(name, file) of a template given by name (`fit`) or path; a custom template is named by its stem."""
    if name_or_path.endswith(".j2") or "/" in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise InputNotFoundError(f"no template file at {name_or_path!r}")
        return path.name.removesuffix(SUFFIX).removesuffix(".j2"), path
    path = TEMPLATE_DIR / f"{name_or_path}{SUFFIX}"
    if not path.is_file():
        raise InputError(f"unknown template {name_or_path!r}: choose one of {', '.join(template_names())}, "
                         f"or give the path of a .j2 file")
    return name_or_path, path


def _finalize(value: Any) -> str:
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    raise TypeError(f"a template printed {type(value).__name__} {value!r}: print its items instead")


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader([str(TEMPLATE_DIR), "/"]),  # partials first, then any path
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def job_settings(profile: Profile, template: str, values: dict[str, Any]) -> dict[str, Any]:
    """Defaults ← profile ← user values, each checked; the required ones must be there."""
    known = template in settings.ALL
    merged: dict[str, Any] = {k: s.default for k, s in settings.KEYS.items() if not known or template in s.templates}
    merged.update({k: v for k, v in profile.defaults.items() if k in merged})
    for key, value in values.items():
        merged[key] = settings.parse_value(key, value, template=template)
    missing = [k for k in settings.REQUIRED.get(template, ()) if merged.get(k) in (None, [])]
    if missing:
        flags = " ".join(f"--set {k}=…" if k != "config" else "--config FILE" for k in missing)
        raise InputError(f"template {template!r} needs {', '.join(missing)}: pass {flags}")
    if profile.account_required and not merged.get("account"):
        raise InputError(f"profile {profile.name!r} needs a compute project: pass --account PROJECT")
    for key in ("partition", "tasks_per_node", "cpus_per_task", "gpus_per_node", "time"):
        if merged.get(key) is None and key in merged:
            raise InputError(f"profile {profile.name!r} sets no {key}: add it to {str(profile.path)!r} or --set it")
    return merged


@dataclass(frozen=True)
class Job:
    """A rendered job script and what submitting it needs."""

    template: str
    script: str
    job_name: str
    log_dir: str
    workdir: str | None


def render_job(profile: str | Profile, template: str, values: dict[str, Any] | None = None) -> Job:
    """The job script for `template` on `profile` with `values` (keys of `settings.KEYS`)."""
    profile = profile if isinstance(profile, Profile) else load_profile(profile)
    name, path = template_path(template)
    job = job_settings(profile, name, dict(values or {}))
    context: dict[str, Any] = {**job}
    context["template"] = name
    context["profile_name"] = profile.name
    # a built-in profile by name (the job may run in another checkout), any other by its path
    context["profile_path"] = profile.name if profile.path.parent == PROFILE_DIR else str(profile.path.resolve())
    context["job_name"] = job.get("job_name") or f"eoscale-{name}"
    context["accelerator"] = profile.accelerator
    context["setup"] = [Shell(line) for line in profile.shell_setup()]
    context["workdir"] = job.get("workdir") or Shell('"$SLURM_SUBMIT_DIR"')
    if "mlflow_uri" in job and job["mlflow_uri"] is None and profile.mlflow_uri:
        context["mlflow_uri"] = Shell(f'"{profile.mlflow_uri}"')
    if "master_port" in job and job["master_port"] is None:
        context["master_port"] = Shell("$((20000 + SLURM_JOB_ID % 20000))")  # distinct per job on shared nodes
    if name in settings.TRAIN:
        context["strategy_config"] = f"configs/strategy/{job['strategy']}.yaml"
    if name == "ray" and job["strategy"] not in settings.RAY_STRATEGIES:
        raise InputError(f"strategy={job['strategy']} does not run under Ray Train (it runs "
                         f"{' or '.join(settings.RAY_STRATEGIES)}): submit it with the fit or pretrain template")
    if name == "predict":
        context.update(_scene_array(job))
    try:
        script = _ENV.get_template(str(path.resolve())).render(context)
    except jinja2.UndefinedError as err:
        raise InputError(f"template {str(path)!r} uses a value that is not set ({err.message})") from None
    except jinja2.TemplateSyntaxError as err:
        raise InputError(f"template {str(path)!r} line {err.lineno}: {err.message}") from None
    return Job(template=name, script=script, job_name=context["job_name"], log_dir=job.get("log_dir") or "logs",
               workdir=job.get("workdir"))


def render(profile: str | Profile, template: str, values: dict[str, Any] | None = None) -> str:
    """The job script for `template` on `profile` with `values` (keys of `settings.KEYS`)."""
    return render_job(profile, template, values).script


def _scene_array(job: dict[str, Any]) -> dict[str, Any]:
    """The array range of a predict job: one array task per `scenes_per_task` lines of the scene list."""
    listing = Path(job.get("workdir") or ".") / job["scenes"]
    if not listing.is_file():
        raise InputNotFoundError(f"no scene list at {str(listing)!r}: write one scene path per line")
    count = sum(1 for line in listing.read_text().splitlines() if line.strip())
    if count == 0:
        raise InputError(f"the scene list {str(listing)!r} is empty")
    per_task = job.get("scenes_per_task") or job["tasks_per_node"]
    return {"scene_count": count, "scenes_per_task": per_task, "array_last": math.ceil(count / per_task) - 1}
