"""Where the flat modules of `eoscale/train/` went when it was split by concern (issue 31), in one table.

The old paths stay as modules (`eoscale/train/task.py`, `fsdp.py`, …) so that users' YAML, notebooks and imports
keep working; each warns once a process when it is imported (`warn_moved`: a `MovedPathWarning`, which is a
`FutureWarning` and so shown by default), naming the old path, the new one and what to change.

A checkpoint records the class path of the config it was fitted with (Lightning's `_class_path`), which its user
cannot edit: `fit/validate/test --ckpt_path FILE` read it `quietly()` and name the model's class at its new home
(`new_path`, which imports nothing) from then on (`eoscale.train.launch.cli`), so a checkpoint never warns and the
checkpoints and configs a run writes name the new paths; only what a user writes (a config, an import) warns.
`predict` never reads a class path: it rebuilds the network from the checkpoint's model arguments.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# old module -> its home since the split (for the three modules whose names went to several homes, the home of
# their main names; `ELSEWHERE` has the others)
MOVED: dict[str, str] = {
    "eoscale.train.checkpoint": "eoscale.train.strategies.consolidate",
    "eoscale.train.cli": "eoscale.train.launch.cli",
    "eoscale.train.command": "eoscale.train.launch.command",
    "eoscale.train.dino": "eoscale.train.tasks.dino",
    "eoscale.train.figures": "eoscale.train.callbacks.figures",
    "eoscale.train.fsdp": "eoscale.train.strategies.fsdp",
    "eoscale.train.last_checkpoint": "eoscale.train.callbacks.last_checkpoint",
    "eoscale.train.launcher": "eoscale.train.launch.options",
    "eoscale.train.mae": "eoscale.train.tasks.mae",
    "eoscale.train.model_facts": "eoscale.train.planning.model_facts",
    "eoscale.train.monitor": "eoscale.train.callbacks.monitor",
    "eoscale.train.params": "eoscale.train.callbacks.params",
    "eoscale.train.pipeline": "eoscale.train.strategies.pipeline",
    "eoscale.train.plan": "eoscale.train.planning.plan",
    "eoscale.train.profiling": "eoscale.train.callbacks.profiling",
    "eoscale.train.ray_launcher": "eoscale.train.launch.ray_launcher",
    "eoscale.train.ray_worker": "eoscale.train.launch.ray_worker",
    "eoscale.train.register": "eoscale.train.callbacks.register",
    "eoscale.train.requeue": "eoscale.train.launch.requeue",
    "eoscale.train.state": "eoscale.train.planning.state",
    "eoscale.train.steptime": "eoscale.train.callbacks.steptime",
    "eoscale.train.task": "eoscale.train.tasks.segmentation",
    "eoscale.train.tp": "eoscale.train.strategies.tp",
    "eoscale.train.zero": "eoscale.train.strategies.zero",
}
# old path of a name -> its new path, where it is not in its old module's `MOVED` home
ELSEWHERE: dict[str, str] = {
    "eoscale.train.task.BaseTask": "eoscale.train.tasks.base.BaseTask",
    "eoscale.train.task.warmup_cosine": "eoscale.train.tasks.base.warmup_cosine",
    "eoscale.train.mae.EXPORT_NAME": "eoscale.train.tasks.pretraining.EXPORT_NAME",
    "eoscale.train.mae.export_backbone": "eoscale.train.tasks.pretraining.export_backbone",
    "eoscale.train.mae.PRETRAIN_DEFAULTS": "eoscale.train.launch.pretrain.PRETRAIN_DEFAULTS",
    "eoscale.train.mae.configure": "eoscale.train.launch.pretrain.configure",
    "eoscale.train.mae.run": "eoscale.train.launch.pretrain.run",
    "eoscale.train.cli.main": "eoscale.train.launch.main.main",
}


class MovedPathWarning(FutureWarning):
    """An old module path of eoscale was used; it still works, and the message says what to write instead."""


def new_path(path: str) -> str:
    """`path` (a module, or a module's name such as a config's class path) at its home since the split; any
    other path unchanged. Imports nothing, so it never warns."""
    if path in MOVED:
        return MOVED[path]
    if path in ELSEWHERE:
        return ELSEWHERE[path]
    module, _, name = path.rpartition(".")
    return f"{MOVED[module]}.{name}" if module in MOVED else path


def message(old: str) -> str:
    """The one line `warn_moved(old)` says: the new path, and what to change in configs and in code."""
    new = MOVED[old]
    others: dict[str, list[str]] = {}
    for was, now in ELSEWHERE.items():
        if was.rpartition(".")[0] == old:
            others.setdefault(now.rpartition(".")[0], []).append(was.rpartition(".")[2])
    also = "".join(f"; {', '.join(names)} from {home}" for home, names in others.items())
    return (f"{old} has moved to {new}{also}: in configs replace class_path {old}.<Name> with {new}.<Name>, "
            f"in code import from {new}; the old path still works but will be removed")


_WARNED: set[str] = set()
_QUIET = [0]  # how many `quietly()` blocks are open


@contextmanager
def quietly() -> Iterator[None]:
    """Old modules imported inside do not warn: for reading what a checkpoint recorded, which no user can edit.
    (Such a module is then imported; a later import of it in this process does not warn either.)"""
    _QUIET[0] += 1
    try:
        yield
    finally:
        _QUIET[0] -= 1


def warn_moved(old: str) -> None:
    """Warn that module `old` (a key of `MOVED`) was imported, the first time in this process. Called by the old
    module as it is imported; the warning points at the line that imported it."""
    if old in _WARNED or _QUIET[0]:
        return
    _WARNED.add(old)
    warnings.warn(message(old), MovedPathWarning, stacklevel=_importer_level())


def _importer_level() -> int:
    """`warnings.warn`'s stacklevel of the first frame above the old module and the import machinery: the user's
    `import` line, or jsonargparse's, which resolves a config's class path."""
    frame, level = sys._getframe(3), 3  # 0 this function, 1 warn_moved, 2 the old module, 3 what imported it
    while frame is not None:
        filename, name = frame.f_code.co_filename, frame.f_globals.get("__name__", "")
        if "importlib" in filename and "_bootstrap" in filename:
            frame = frame.f_back  # `warnings` skips these frames itself: not counted
            continue
        if name != "runpy" and not name.startswith("importlib"):  # importlib.import_module, `python -m`
            return level
        frame, level = frame.f_back, level + 1
    return 2
