"""The old module paths of `eoscale/train/` (issue 47): each still gives the same objects and warns once a process,
saying what to write instead; nothing of eoscale's own names them any more; a user's old YAML still fits.

The table of old paths is `eoscale.train.moved`; that each old class path resolves to its new class, through
importlib and jsonargparse, is `tests/train/test_old_paths.py`'s.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from eoscale.train import moved
from eoscale.train.moved import ELSEWHERE, MOVED, MovedPathWarning, new_path

ROOT = Path(__file__).resolve().parents[2]


def _resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _import_fresh(old: str, monkeypatch) -> list[warnings.WarningMessage]:
    """Import `old` as a process that never imported it would (and a second time, as a later import would, which
    must not warn again); the warnings of eoscale's moved paths this gave."""
    monkeypatch.setattr(moved, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # Python's own once-per-place filter must not be what hides a repeat
        for _ in range(2):
            monkeypatch.delitem(sys.modules, old, raising=False)  # the module's code runs again
            importlib.import_module(old)
    return [w for w in caught if issubclass(w.category, MovedPathWarning)]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_warns_once_and_gives_the_same_objects(old: str, monkeypatch):
    # guards: an old path that stopped working, warned at every import (or never), pointed the warning into the
    # import machinery instead of the importing line, or gave copies instead of the moved module's own objects
    (warning,) = _import_fresh(old, monkeypatch)
    text = str(warning.message)
    assert f"{old} has moved to {MOVED[old]}" in text and f"replace class_path {old}." in text, text
    assert issubclass(warning.category, FutureWarning) and "\n" not in text
    assert warning.filename == __file__, warning.filename  # the importing line, not importlib's or eoscale's
    module = sys.modules[old]
    if module is importlib.import_module(MOVED[old]):
        return  # the old path is the new module itself
    names = [n for n in module.__all__ if not n.startswith("_")]
    assert names and all(getattr(module, n) is _resolve(new_path(f"{old}.{n}")) for n in names), old


def test_the_warning_points_at_the_line_that_imported():
    # guards: a warning attributed to eoscale's own alias module or to importlib, which tells a user nothing
    code = "import warnings; warnings.simplefilter('always')\nimport eoscale.train.launcher\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    lines = [line for line in done.stderr.splitlines() if "MovedPathWarning" in line]
    assert done.returncode == 0 and len(lines) == 1 and lines[0].startswith("<string>:2: MovedPathWarning"), done.stderr


def test_new_path_maps_every_old_name_without_importing(monkeypatch):
    # guards: a checkpoint's class path mapped by importing (and so warning about) the old module
    for old in MOVED:
        monkeypatch.delitem(sys.modules, old, raising=False)
    assert new_path("eoscale.train.task.SegmentationTask") == "eoscale.train.tasks.segmentation.SegmentationTask"
    assert new_path("eoscale.train.task.BaseTask") == "eoscale.train.tasks.base.BaseTask"
    assert new_path("eoscale.train.fsdp.FSDP2Strategy") == "eoscale.train.strategies.fsdp.FSDP2Strategy"
    assert new_path("eoscale.train.tasks.mae.MAETask") == "eoscale.train.tasks.mae.MAETask"
    assert new_path("lightning.pytorch.strategies.DDPStrategy") == "lightning.pytorch.strategies.DDPStrategy"
    assert not set(MOVED) & set(sys.modules)
    for old, new in ELSEWHERE.items():
        assert old.rpartition(".")[0] in MOVED and _resolve(new) is not None


# where eoscale's code, configs, templates, docs and tests live; the old paths may appear only in the modules that
# keep them, the table and the tests of them
SEARCHED = ("eoscale", "configs", "tests", "docs", "pipelines", "notebooks", "scripts", "slurm", "benchmarks",
            "README.md", "ARCHITECTURE.md", "pyproject.toml", "mkdocs.yml", ".ci")
TEXT = {".py", ".yaml", ".yml", ".md", ".ipynb", ".j2", ".sh", ".toml", ".txt", ".cfg", ".json", ""}
KEEPERS = {f"{m.replace('.', '/')}.py" for m in MOVED} | {
    "eoscale/train/moved.py", "eoscale/train/__init__.py", "tests/train/test_old_paths.py", "tests/train/test_train_aliases.py"}
OLD = re.compile(r"eoscale[./]train[./](" + "|".join(m.rpartition(".")[2] for m in MOVED) + r")\b")


def _files():
    for top in SEARCHED:
        path = ROOT / top
        for file in [path] if path.is_file() else path.rglob("*") if path.is_dir() else []:
            relative = file.relative_to(ROOT).as_posix()
            if file.is_file() and file.suffix in TEXT and "__pycache__" not in relative and relative not in KEEPERS:
                yield relative, file


def test_nothing_of_eoscale_names_an_old_path():
    # guards: a new import, class_path, docstring or command of an old path creeping back, which would warn a user
    # for what eoscale wrote
    found = []
    for relative, file in _files():
        try:
            text = file.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{relative}:{n}: {m.group(0)}" for n, line in enumerate(text.splitlines(), 1)
                  for m in OLD.finditer(line)]
    assert not found, "old eoscale.train paths (use eoscale.train.moved.new_path's):\n" + "\n".join(found)


def test_the_search_sees_the_configs_and_would_find_an_old_path():
    # guards: a search that silently reads nothing (a renamed folder, a suffix missed) and so always passes
    seen = {relative for relative, _ in _files()}
    assert "configs/smoke.yaml" in seen and "eoscale/train/launch/cli.py" in seen and "slurm/_train.j2" in seen
    assert OLD.search("class_path: eoscale.train.task.SegmentationTask")
    assert not OLD.search("class_path: eoscale.train.tasks.segmentation.SegmentationTask")
    assert not OLD.search("eoscale.train.planning.plan") and OLD.search("eoscale/train/plan.py")


def test_the_pipeline_check_reads_old_class_paths():
    # guards: a user's old `model.class_path` refused (or accepted) by the pipeline strategy's check, unlike its class
    from eoscale.errors import InputError
    from eoscale.train.strategies.pipeline import refuse_task

    refuse_task("eoscale.train.mae.MAETask")  # an old class path names the same class
    with pytest.raises(InputError, match="pipelines MAE pretraining only, not DINOTask"):
        refuse_task("eoscale.train.dino.DINOTask")


def _fit(subcommand: str, config: Path, store: Path, root: Path, *more: str) -> list[str]:
    """`eoscale <subcommand>` of one step in this process; the messages of the moved-path warnings it gave."""
    from eoscale.train.launch.main import main

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # Python's own once-per-place filter must not be what hides a repeat
        main([subcommand, "--config", str(config), "--data.init_args.store", str(store),
              "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "4",
              "--trainer.default_root_dir", str(root), "--trainer.logger", "false", "--trainer.max_steps", "1",
              "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "1", *more])
    return [str(w.message) for w in caught if issubclass(w.category, MovedPathWarning)]


def _first_import_in_this_process(monkeypatch) -> None:
    monkeypatch.setattr(moved, "_WARNED", set())
    monkeypatch.delitem(sys.modules, "eoscale.train.task", raising=False)


def test_an_old_yaml_fits_and_warns_once(store: Path, tmp_path: Path, monkeypatch, one_thread):
    # guards: a user's config naming `eoscale.train.task.SegmentationTask` that stops fitting, warns at each of the
    # several times LightningCLI resolves the class path, or passes the old path on to the checkpoints it writes
    old = tmp_path / "old.yaml"
    old.write_text((ROOT / "configs" / "smoke.yaml").read_text().replace(
        "eoscale.train.tasks.segmentation.SegmentationTask", "eoscale.train.task.SegmentationTask"))
    assert "class_path: eoscale.train.task.SegmentationTask" in old.read_text()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _first_import_in_this_process(monkeypatch)
    warned = _fit("fit", old, store, tmp_path, "--checkpoint.dirpath", str(tmp_path / "checkpoints"))
    assert len(warned) == 1 and warned[0].startswith("eoscale.train.task has moved to "), warned
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 1 and saved["state_dict"]
    assert saved["hyper_parameters"]["_class_path"] == "eoscale.train.tasks.segmentation.SegmentationTask"


def test_an_old_checkpoint_validates_without_a_warning(store: Path, tmp_path: Path, monkeypatch, one_thread):
    # guards: a checkpoint that records an old class path (every fit from the configs of before did) warning its user,
    # who cannot edit it, when `--ckpt_path` reads its hyperparameters into the config
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    smoke = ROOT / "configs" / "smoke.yaml"
    _first_import_in_this_process(monkeypatch)
    assert _fit("fit", smoke, store, tmp_path, "--checkpoint.dirpath", str(tmp_path / "checkpoints")) == []  # ours
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    saved["hyper_parameters"]["_class_path"] = "eoscale.train.task.SegmentationTask"  # as fits of before wrote it
    assert saved["hyper_parameters"]["_instantiator"] == "lightning.pytorch.cli.instantiate_module"
    torch.save(saved, tmp_path / "old.ckpt")
    _first_import_in_this_process(monkeypatch)
    assert _fit("validate", smoke, store, tmp_path, "--ckpt_path", str(tmp_path / "old.ckpt")) == []
    assert "eoscale.train.task" in sys.modules  # it was read (and validated), quietly
