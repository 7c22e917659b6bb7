"""Class paths in use before `eoscale/train/` was split by concern (issue 31) name the same classes as the new ones.

The list is every class path the YAML under `configs/` named at the time (`git show main:configs/...`), plus
the ones the README, docs and tests name for a user's own YAML (`RegisterModel`). Each resolves, through
importlib and through jsonargparse (as LightningCLI reads a config), to the very class of its new home, so a
user's config keeps working and a new checkpoint's logged config names the new path. That every config under
`configs/` still parses and builds is `test_configs.py`'s.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

# old class path -> its home since the split
OLD_PATHS = {
    "eoscale.train.task.SegmentationTask": "eoscale.train.tasks.segmentation.SegmentationTask",
    "eoscale.train.mae.MAETask": "eoscale.train.tasks.mae.MAETask",
    "eoscale.train.dino.DINOTask": "eoscale.train.tasks.dino.DINOTask",
    "eoscale.train.zero.ZeroStrategy": "eoscale.train.strategies.zero.ZeroStrategy",
    "eoscale.train.fsdp.FSDP2Strategy": "eoscale.train.strategies.fsdp.FSDP2Strategy",
    "eoscale.train.tp.TensorParallelStrategy": "eoscale.train.strategies.tp.TensorParallelStrategy",
    "eoscale.train.pipeline.PipelineStrategy": "eoscale.train.strategies.pipeline.PipelineStrategy",
    "eoscale.train.register.RegisterModel": "eoscale.train.callbacks.register.RegisterModel",
    "eoscale.train.profiling.Profiling": "eoscale.train.callbacks.profiling.Profiling",
    "eoscale.train.steptime.StepTimer": "eoscale.train.callbacks.steptime.StepTimer",
    "eoscale.train.monitor.TrainingMonitor": "eoscale.train.callbacks.monitor.TrainingMonitor",
    "eoscale.train.last_checkpoint.LatestCheckpoint": "eoscale.train.callbacks.last_checkpoint.LatestCheckpoint",
    "eoscale.train.requeue.SlurmRequeue": "eoscale.train.launch.requeue.SlurmRequeue",
    "eoscale.train.task.BaseTask": "eoscale.train.tasks.base.BaseTask",
}
# class paths of other packages the configs name (unchanged, listed so that the check below sees every path)
OTHER_PATHS = {"eoscale.data.datamodule.TileDataModule", "eoscale.track.logger.MLflowLogger",
               "lightning.pytorch.strategies.DDPStrategy",
               "eoscale.train.tasks.regression.RegressionTask",  # new since the layout: no old path to keep
               "eoscale.train.tasks.change.ChangeTask",
               "eoscale.train.tasks.temporal.TemporalSegmentationTask",  # new with time series: no old path
               "eoscale.train.tasks.temporal_mae.TemporalMAETask",  # new with time series: no old path
               "eoscale.train.tasks.forest.ForestTask"}
# old module paths that commands, notebooks and scripts import (`python -m`, `from … import`)
OLD_MODULES = ["task", "mae", "dino", "zero", "fsdp", "tp", "pipeline", "checkpoint", "cli", "command", "launcher",
               "ray_launcher", "ray_worker", "requeue", "last_checkpoint", "register", "steptime", "profiling",
               "monitor", "params", "figures", "plan", "model_facts", "state"]


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_class_path_in_configs_is_listed():
    used = set()
    for config in CONFIGS.rglob("*.yaml"):
        used |= set(re.findall(r"class_path:\s*([\w.]+)", config.read_text()))
    assert used <= set(OLD_PATHS) | set(OLD_PATHS.values()) | OTHER_PATHS, used - set(OLD_PATHS) - OTHER_PATHS


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_class_path_is_the_new_class(old: str):
    assert _resolve(old) is _resolve(OLD_PATHS[old])


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_jsonargparse_reads_the_old_class_path_as_the_new_class(old: str):
    from jsonargparse import ArgumentParser

    new = _resolve(OLD_PATHS[old])
    base = next(b for b in new.__mro__[1:] if b.__module__.split(".")[0] in ("lightning", "torch"))
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--part", type=base)
    config = parser.parse_args(["--part", json.dumps({"class_path": old})])
    assert _resolve(config.part.class_path) is new


@pytest.mark.parametrize("name", OLD_MODULES)
def test_old_module_imports(name: str):
    importlib.import_module(f"eoscale.train.{name}")


def test_the_commands_live_in_their_new_homes():
    from eoscale.cli import COMMANDS

    homes = {name: module for name, (module, _) in COMMANDS.items() if module.startswith("eoscale.train")}
    assert homes == {"pretrain": "eoscale.train.launch.pretrain", "fit": "eoscale.train.launch.command",
                     "validate": "eoscale.train.launch.command", "test": "eoscale.train.launch.command",
                     "plan": "eoscale.train.planning.plan", "consolidate": "eoscale.train.strategies.consolidate"}
    for module in homes.values():
        loaded = importlib.import_module(module)
        assert callable(loaded.configure) and callable(loaded.run)
