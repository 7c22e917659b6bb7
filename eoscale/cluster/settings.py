"""The values a user may set on a job (`--set key=value`, `--nodes`, …): their types, ranges and defaults.

Every value is parsed and checked here before a template sees it, and rendered shell-quoted there, so a
value can be wrong (one line that names the key and what it accepts) but never shell code. Values that
go into `#SBATCH` lines (names, times, numbers) are restricted further: Slurm reads those lines itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from eoscale.errors import InputError

ALL = ("fit", "pretrain", "predict", "ingest", "run", "ray", "serve")
TRAIN = ("fit", "pretrain")
RAY = ("ray",)  # fit/pretrain with Ray Train on a Ray cluster the job starts (slurm/ray.sbatch.j2)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
_TIME = re.compile(r"^(?:(\d{1,3})-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.,:^-]{1,64}$")
_BIND = re.compile(r"^[a-z0-9_,]{1,64}$")


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected text, got {value!r}")
    text = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("control characters (newlines, tabs, …) are not allowed")
    if not text:
        raise ValueError("empty")
    return text


def name(value: Any) -> str:
    """A Slurm name: account, partition, QoS, reservation, job name."""
    text = _text(value)
    if not _NAME.match(text):
        raise ValueError("expected a name of letters, digits and _.+- (at most 128)")
    return text


def path(value: Any) -> str:
    """A file or folder (or glob pattern): any printable text, quoted in the script."""
    return _text(value)


def plain_path(value: Any) -> str:
    """A path that Slurm itself reads from an #SBATCH line (the log folder): no quotes, backslashes or %."""
    text = _text(value)
    if any(c in text for c in "'\"\\%"):
        raise ValueError("quotes, backslashes and % are not allowed here")
    return text


def time_limit(value: Any) -> str:
    """A Slurm time limit, HH:MM:SS or D-HH:MM:SS."""
    text = _text(value)
    if not _TIME.match(text):
        raise ValueError("expected a time limit HH:MM:SS or D-HH:MM:SS, like 02:00:00 or 1-12:00:00")
    return text


def seconds(text: str) -> int:
    days, h, m, s = _TIME.match(text).groups()  # type: ignore[union-attr]
    return ((int(days or 0) * 24 + int(h)) * 60 + int(m)) * 60 + int(s)


def integer(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer from {low} to {high}")
        try:
            number = int(value) if isinstance(value, int) else int(str(value).strip(), 10)
        except ValueError:
            raise ValueError(f"expected an integer from {low} to {high}") from None
        if not low <= number <= high:
            raise ValueError(f"expected an integer from {low} to {high}")
        return number

    parse.__doc__ = f"an integer from {low} to {high}"
    return parse


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


STRATEGIES = ("ddp", "fsdp", "zero2", "zero3", "zero3_offload", "fsdp2_tp", "pipeline")
"""The training strategies a job can name: one config fragment each in configs/strategy/ (a test keeps the two equal)."""
RAY_STRATEGIES = ("ddp", "fsdp")
"""Those Ray Train runs (eoscale.train.launch.ray_launcher has Ray's DDP and FSDP2 strategies, no DeepSpeed or TP)."""


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return value

    return parse


def words(value: Any) -> list[str]:
    """Command-line words: a list, or one string split like a shell would (each word is quoted again)."""
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    try:
        return [_text(w) for w in shlex.split(_text(value))]
    except ValueError as err:  # an unclosed quote
        raise ValueError(str(err)) from None


def paths(value: Any) -> list[str]:
    """One path or several (a list, or `--config` given more than once)."""
    if isinstance(value, list | tuple):
        return [path(v) for v in value]
    return [path(value)]


def ifname(value: Any) -> str:
    text = _text(value)
    if not _IFNAME.match(text):
        raise ValueError("expected a network interface name like ib0, or a list like ib0,ib1")
    return text


def cpu_bind(value: Any) -> str:
    text = _text(value)
    if not _BIND.match(text):
        raise ValueError("expected an srun --cpu-bind value like none, cores, threads or v,cores")
    return text


def suffix(value: Any) -> str:
    text = "" if value is None else str(value)
    if not re.match(r"^[A-Za-z0-9.-]{0,32}$", text):
        raise ValueError("expected a short host name suffix like i")
    return text


@dataclass(frozen=True)
class Key:
    parse: Callable[[Any], Any]
    help: str
    templates: tuple[str, ...] = ALL
    default: Any = None


KEYS: dict[str, Key] = {
    # where and how long (all templates; the profile gives the defaults)
    "account": Key(name, "the compute project to charge (sbatch --account)"),
    "partition": Key(name, "the partition (sbatch --partition)"),
    "qos": Key(name, "quality of service (sbatch --qos)"),
    "reservation": Key(name, "a reservation (sbatch --reservation)"),
    "job_name": Key(name, "the job's name (default: eoscale-TEMPLATE)"),
    "time": Key(time_limit, "time limit HH:MM:SS or D-HH:MM:SS"),
    "nodes": Key(integer(1, 4096), "nodes (data-parallel training across nodes)", TRAIN + ("run",) + RAY, 1),
    "tasks_per_node": Key(integer(1, 256), "tasks per node: one per GPU (default: the profile's); ray: Ray nodes per node",
                          TRAIN + ("predict",) + RAY),
    "cpus_per_task": Key(integer(1, 1024), "CPU cores per task (default: the profile's)"),
    "gpus_per_node": Key(integer(0, 16), "GPUs per node, 0 for none (default: the profile's)", TRAIN + ("predict", "run", "serve") + RAY),
    "cpu_bind": Key(cpu_bind, "srun --cpu-bind (default: the profile's)", TRAIN + ("predict", "run")),
    "workdir": Key(path, "folder the job runs in (default: the folder sbatch was called from)"),
    "log_dir": Key(plain_path, "folder of the job's output files, relative to workdir", ALL, "logs"),
    "venv": Key(path, "the Python environment to activate, relative to workdir", ALL, ".venv"),
    "mlflow_uri": Key(path, "MLflow tracking URI (default: the profile's, a SQLite store on the shared file system)",
                      TRAIN + ("predict", "serve") + RAY),
    "args": Key(words, "more arguments for the eoscale command, e.g. --set args='--trainer.max_epochs 3'", ALL, []),
    # training
    "config": Key(paths, "LightningCLI config file(s), in order (--config, repeatable)", TRAIN + RAY, []),
    "strategy": Key(choice(*STRATEGIES), "parallel strategy: the fragment configs/strategy/NAME.yaml (ddp, fsdp, zero2, "
                    "zero3, zero3_offload, fsdp2_tp, pipeline (MAE pretraining); ray: ddp or fsdp)", TRAIN + RAY, "ddp"),
    "master_port": Key(integer(1024, 65535), "rendezvous port on the first node (default: 20000 + job id % 20000); ray: the head's port",
                         TRAIN + RAY),
    "master_addr_suffix": Key(suffix, "appended to the first node's name to pick its fast network (JSC: i)", TRAIN + RAY + ("serve",)),
    "socket_ifname": Key(ifname, "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (JSC: ib0)", TRAIN + RAY),
    "signal_seconds": Key(integer(30, 7200), "send SIGUSR1 this long before the time limit: checkpoint and requeue",
                          TRAIN, 300),
    "requeue": Key(boolean, "requeue at the time limit and resume from the checkpoint (true/false)", TRAIN, True),
    "nsys": Key(boolean, "wrap each rank in Nsight Systems' 'nsys profile': a report per rank in <log_dir>/nsys/, "
                "captured over training steps nsys_start … nsys_start+nsys_steps-1 (true/false)", TRAIN, False),
    "nsys_start": Key(integer(0, 10**9), "with nsys=true: the first training step captured", TRAIN, 10),
    "nsys_steps": Key(integer(1, 100000), "with nsys=true: how many training steps are captured", TRAIN, 5),
    # Ray Train on a Ray cluster of the job's tasks (slurm/ray.sbatch.j2)
    "ray_command": Key(choice(*TRAIN), "the eoscale command the Ray workers run: fit or pretrain", RAY, "fit"),
    "workers": Key(integer(1, 100000), "Ray Train workers (default: one per GPU, or one per task without GPUs)", RAY),
    "max_failures": Key(integer(-1, 1000), "times Ray restarts the workers from the last checkpoint after a lost "
                        "worker (-1: always)", RAY, 0),
    # prediction: an array job over a scene list
    "checkpoint": Key(path, "the checkpoint to predict with or serve (a file or models:/NAME@ALIAS)", ("predict", "serve")),
    "scenes": Key(path, "predict: a file with one scene path per line; ingest: scene files or a glob",
                  ("predict", "ingest")),
    "output": Key(path, "predict: the folder of the maps; ingest: the tile store to write", ("predict", "ingest")),
    "scenes_per_task": Key(integer(1, 256), "scenes per array task, one per task of a node (default: tasks_per_node)",
                           ("predict",)),
    "max_parallel": Key(integer(1, 100000), "at most this many array tasks at once (--array=…%N)", ("predict",)),
    # serving: Triton Inference Server on one node (slurm/serve.sbatch.j2)
    "adapters": Key(words, "serve: LoRA adapters to serve beside the checkpoint, e.g. --set adapters='alps forest'",
                    ("serve",), []),
    "http_port": Key(integer(1024, 65535), "serve: Triton's HTTP port", ("serve",), 8000),
    "grpc_port": Key(integer(1024, 65535), "serve: Triton's gRPC port", ("serve",), 8001),
    "metrics_port": Key(integer(1024, 65535), "serve: Triton's metrics port", ("serve",), 8002),
    "max_batch": Key(integer(1, 4096), "serve: most windows in one forward pass of the dynamic batcher", ("serve",), 64),
    # ingest: Dask workers as Slurm jobs
    "labels": Key(path, "label rasters (files or a glob)", ("ingest",)),
    "classes": Key(path, "class table CSV", ("ingest",)),
    "dask_workers": Key(integer(1, 10000), "Dask worker jobs to submit (each one Slurm job)", ("ingest",), 4),
    # any command
    "command": Key(words, "the command to run, e.g. --set command='eoscale info runs/tiles.zarr'", ("run",)),
    "ntasks": Key(integer(1, 100000), "tasks of the job step (srun -n)", ("run",), 1),
}

REQUIRED: dict[str, tuple[str, ...]] = {
    "fit": ("config",),
    "pretrain": ("config",),
    "predict": ("checkpoint", "scenes", "output"),
    "ingest": ("scenes", "output"),
    "run": ("command",),
    "ray": ("config",),
    "serve": ("checkpoint",),
}


def parse_value(key: str, value: Any, *, template: str | None = None, origin: str | None = None) -> Any:
    """Check one value; an unknown key or a bad value is an InputError that names the allowed ones."""
    where = f" in {origin}" if origin else ""
    if key not in KEYS:
        raise InputError(f"unknown setting {key!r}{where}: choose one of {', '.join(sorted(KEYS))}")
    spec = KEYS[key]
    if template is not None and template in ALL and template not in spec.templates:
        allowed = sorted(k for k, s in KEYS.items() if template in s.templates)
        raise InputError(f"setting {key!r} does not apply to template {template!r}: it takes {', '.join(allowed)}")
    try:
        return spec.parse(value)
    except ValueError as err:
        raise InputError(f"bad value for {key}{where}: {err}, got {value!r}") from None


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """`key=value` strings (from `--set`) into a dict; a key given twice keeps the last value."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise InputError(f"--set takes key=value, got {item!r}")
        values[key] = value
    return values


def applies(key: str, template: str) -> bool:
    """Whether `key` is a setting of `template` (every key is one of a custom template)."""
    return key in KEYS and (template not in ALL or template in KEYS[key].templates)


def keys_for(template: str) -> list[str]:
    return sorted(k for k, s in KEYS.items() if template not in ALL or template in s.templates)
