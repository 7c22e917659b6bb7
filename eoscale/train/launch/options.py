"""`--launcher`: who starts the ranks of `eoscale fit` and `eoscale pretrain`.

- `lightning` (the default): Lightning starts one process per device itself, or `torchrun` / `srun` started
  them and Lightning reads the ranks from their environment (`eoscale.train.launch.cli`).
- `ray`: a Ray Train `TorchTrainer` starts `--workers N` processes on a Ray cluster, each running the same
  LightningCLI config (`eoscale.train.launch.ray_launcher`, `eoscale.train.launch.ray_worker`)::

      eoscale fit --launcher ray --workers 2 --config configs/smoke.yaml          # a local Ray cluster
      eoscale fit --launcher ray --workers 8 --gpus-per-worker 1 --address 10.0.0.1:6379 --config …

The launcher's flags are taken out of the command line here, before LightningCLI parses the rest; this module
imports nothing heavy, because every `eoscale fit` passes through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eoscale.errors import InputError

LAUNCHERS = ("lightning", "ray")


@dataclass(frozen=True)
class LauncherOptions:
    """The launcher and its resources (the Ray flags mean nothing to the `lightning` launcher)."""

    launcher: str = "lightning"
    workers: int = 1
    address: str | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_failures: int = 0
    given: tuple[str, ...] = field(default=(), compare=False)  # the Ray flags given, for the error below


def _count(flag: str, text: str, *, low: float, integer: bool) -> float:
    try:
        value = int(text, 10) if integer else float(text)
    except ValueError:
        value = None
    if value is None or value < low:
        kind = "an integer" if integer else "a number"
        raise InputError(f"{flag}={text!r}: give {kind} of at least {low:g}")
    return value


def _max_failures(text: str) -> int:
    if text.strip() == "-1":
        return -1
    return int(_count("--max-failures", text, low=0, integer=True))


# flag -> (field, parse)
FLAGS = {
    "--launcher": ("launcher", lambda v: v),
    "--workers": ("workers", lambda v: int(_count("--workers", v, low=1, integer=True))),
    "--address": ("address", lambda v: v),
    "--cpus-per-worker": ("cpus_per_worker", lambda v: _count("--cpus-per-worker", v, low=0, integer=False)),
    "--gpus-per-worker": ("gpus_per_worker", lambda v: _count("--gpus-per-worker", v, low=0, integer=False)),
    "--max-failures": ("max_failures", _max_failures),
}


# flag -> (metavar, one line of help); `eoscale fit --help` and `eoscale pretrain --help` list them (`help_section`)
HELP = {
    "--launcher": ("{lightning,ray}", "who starts the ranks: Lightning, torchrun or srun (lightning, the default), "
                                      "or Ray Train workers (ray)"),
    "--workers": ("N", "Ray Train workers (one process each) to start (default 1)"),
    "--address": ("HOST:PORT", "a running Ray cluster's head (default: a Ray cluster for this run on this machine)"),
    "--cpus-per-worker": ("N", "CPUs each Ray worker reserves (default 1)"),
    "--gpus-per-worker": ("N", "GPUs each Ray worker reserves (default 0: CPU workers)"),
    "--max-failures": ("K", "times Ray restarts the workers from the last checkpoint after losing one "
                            "(default 0; -1: no limit)"),
}


def help_section() -> str:
    """The launcher options as a section of `--help` (they are taken out before LightningCLI parses the rest)."""
    width = max(len(f"{flag} {metavar}") for flag, (metavar, _) in HELP.items()) + 2
    lines = ["launcher options (eoscale's own; the Ray options need --launcher ray):"]
    lines += [f"  {f'{flag} {metavar}':<{width}}{text}" for flag, (metavar, text) in HELP.items()]
    return "\n".join(lines) + "\n"


def split_launcher_args(args: list[str]) -> tuple[LauncherOptions, list[str]]:
    """The launcher flags (`--flag value` or `--flag=value`) out of `args`, and the rest, in order."""
    values: dict[str, object] = {}
    given: list[str] = []
    rest: list[str] = []
    words = iter(args)
    for word in words:
        flag, eq, value = word.partition("=")
        if flag not in FLAGS:
            rest.append(word)
            continue
        if not eq:
            value = next(words, None)
            if value is None or value.startswith("--"):
                raise InputError(f"{flag} needs a value")
        name, parse = FLAGS[flag]
        values[name] = parse(value)
        if flag != "--launcher":
            given.append(flag)
    options = LauncherOptions(**values, given=tuple(given))  # type: ignore[arg-type]
    if options.launcher not in LAUNCHERS:
        raise InputError(f"--launcher={options.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if options.launcher != "ray" and given:
        raise InputError(f"{given[0]} is a flag of the Ray launcher: add --launcher ray, or leave it out")
    return options, rest
