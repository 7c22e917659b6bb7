"""Cluster profiles: what a machine is, in one YAML file under `slurm/profiles/` (or any path).

A profile gives the defaults of the job settings (partition, GPUs per node, tasks per node, CPUs per task,
time, the network interface, …: every key of `eoscale.cluster.settings.KEYS`) plus what only its author
may write, because it is shell text rendered as written: `modules` to load, a `preamble`, `env`
variables (the offline flags of compute nodes, for instance) and `mlflow_uri`, which may refer to
variables such as `$PROJECT`. The `dask` section describes one Dask worker job of `eoscale ingest
--slurm-workers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eoscale.cluster import settings
from eoscale.errors import InputError, InputNotFoundError

PROFILE_DIR = Path(__file__).resolve().parents[2] / "slurm" / "profiles"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMORY = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B)$")
_OWN = ("description", "account_required", "accelerator", "modules", "preamble", "env", "mlflow_uri", "dask")
_DASK = {
    "partition": settings.name,
    "account": settings.name,
    "cores": settings.integer(1, 1024),
    "processes": settings.integer(1, 1024),
    "memory": lambda v: _memory(v),
    "walltime": settings.time_limit,
    "interface": settings.ifname,
    "local_directory": settings.path,
}


def _memory(value: Any) -> str:
    text = str(value)
    if not _MEMORY.match(text):
        raise ValueError("expected an amount like 2GB or 500GiB")
    return text


@dataclass(frozen=True)
class Profile:
    """A machine. `defaults` holds validated job settings; the rest is trusted shell text or Dask options."""

    name: str
    path: Path
    description: str
    defaults: dict[str, Any]
    accelerator: str = "cpu"
    account_required: bool = False
    modules: tuple[str, ...] = ()
    preamble: str = ""
    env: dict[str, str] = field(default_factory=dict)
    mlflow_uri: str | None = None
    dask: dict[str, Any] = field(default_factory=dict)

    def shell_setup(self, venv: str | None = None) -> list[str]:
        """The lines that prepare a shell on a compute node: modules, preamble, environment, venv."""
        import shlex

        lines = []
        if self.modules:
            lines += ["module --force purge", "module load " + " ".join(self.modules)]
        lines += [ln for ln in self.preamble.splitlines() if ln.strip()]
        lines += [f'export {k}="{v}"' for k, v in self.env.items()]
        if venv:
            lines.append(f"source {shlex.quote(venv)}/bin/activate")
        return lines


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by name (`juwels-booster`) or by the path of a YAML file; errors name the allowed values."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.is_file()):
        path = PROFILE_DIR / f"{text}.yaml"
        if not path.is_file():
            raise InputError(f"unknown profile {text!r}: choose one of {', '.join(profile_names())}, "
                             f"or give the path of a profile YAML file")
    elif not path.is_file():
        raise InputNotFoundError(f"no profile file at {text!r}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise InputError(f"profile {str(path)!r} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"profile {str(path)!r} must be a mapping of settings")
    return _from_dict(path.stem, path, data)


def _from_dict(name: str, path: Path, data: dict) -> Profile:
    where = f"profile {str(path)!r}"
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if key in _OWN or value is None:
            continue
        defaults[key] = settings.parse_value(key, value, origin=where)
    accelerator = data.get("accelerator", "gpu" if defaults.get("gpus_per_node") else "cpu")
    if accelerator not in ("cpu", "gpu"):
        raise InputError(f"{where}: accelerator must be cpu or gpu, got {accelerator!r}")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise InputError(f"{where}: env must be a mapping of NAME: value")
    for k, v in env.items():
        if not _ENV_NAME.match(str(k)) or _unsafe_in_quotes(str(v)):
            raise InputError(f"{where}: env {k}={v!r}: names are letters, digits and _; values one line without "
                             f"double quotes or backslashes")
    mlflow_uri = data.get("mlflow_uri")
    if mlflow_uri is not None and _unsafe_in_quotes(str(mlflow_uri)):
        raise InputError(f"{where}: mlflow_uri must be one line without double quotes or backslashes")
    dask = data.get("dask") or {}
    if not isinstance(dask, dict):
        raise InputError(f"{where}: dask must be a mapping")
    parsed_dask = {}
    for key, value in dask.items():
        if key not in _DASK:
            raise InputError(f"{where}: unknown dask setting {key!r}: choose one of {', '.join(_DASK)}")
        try:
            parsed_dask[key] = _DASK[key](value)
        except ValueError as err:
            raise InputError(f"{where}: bad dask {key}: {err}, got {value!r}") from None
    modules = data.get("modules") or []
    if isinstance(modules, str):
        modules = modules.split()
    if not all(isinstance(m, str) and re.match(r"^[A-Za-z0-9_.+/-]+$", m) for m in modules):
        raise InputError(f"{where}: modules must be a list of module names like Stages/2025 or CUDA")
    return Profile(
        name=name,
        path=path,
        description=str(data.get("description", "")),
        defaults=defaults,
        accelerator=accelerator,
        account_required=bool(data.get("account_required", False)),
        modules=tuple(modules),
        preamble=str(data.get("preamble") or ""),
        env={str(k): str(v) for k, v in env.items()},
        mlflow_uri=None if mlflow_uri is None else str(mlflow_uri),
        dask=parsed_dask,
    )


def _unsafe_in_quotes(text: str) -> bool:
    """Profile text goes inside double quotes (so `$PROJECT` expands): it must not end them."""
    return any(c in text for c in '"\\\n\r`')
