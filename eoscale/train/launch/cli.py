"""`EoscaleCLI`: LightningCLI over eoscale's tasks and a tile-store DataModule (`eoscale fit | validate | test`).

One machine, one device (CPU or GPU)::

    eoscale fit --config configs/resnet18_seg.yaml --data.init_args.store runs/tiles.zarr

Several GPUs of one machine (Lightning starts one process per device)::

    eoscale fit --config configs/resnet18_seg.yaml --config configs/strategy/ddp.yaml --trainer.devices 4

Several nodes under Slurm (one task per GPU; Lightning's SLURMEnvironment reads the ranks from srun;
`eoscale.train.launch.requeue` checkpoints and requeues on the time-limit signal)::

    srun --ntasks-per-node 4 --gpus-per-node 4 eoscale fit --config configs/vit_s16_seg.yaml \\
        --config configs/strategy/fsdp.yaml --trainer.num_nodes 2 --trainer.devices 4

or with `torchrun --nnodes 2 --nproc-per-node 4 -m eoscale fit ...` (TorchElasticEnvironment).
A fit stops early once the best checkpoint's metric (val mIoU, a regression's val RMSE) has not improved for 10
validations (`--early_stopping.patience N`, `--early_stopping.enabled false`: `eoscale.train.callbacks.early_stopping`).
Resume with `--ckpt_path last` or a checkpoint path; `eoscale consolidate` makes one file of an FSDP or
DeepSpeed checkpoint folder. Every run logs to MLflow (`eoscale.track.logger`, `eoscale.train.callbacks.monitor`).
`eoscale.train.launch.main` picks the launcher (this CLI in each rank, or Ray Train's workers running it).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from lightning import LightningDataModule, Trainer
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.plugins.environments import SLURMEnvironment

from eoscale.errors import InputError, UserError
from eoscale.train.callbacks.calibration import TemperatureScaling
from eoscale.train.callbacks.early_stopping import BestMetricStopping
from eoscale.train.callbacks.last_checkpoint import LatestCheckpoint
from eoscale.train.callbacks.monitor import TrainingMonitor, mlflow_loggers, resume_run_id
from eoscale.train.callbacks.profiling import Profiling
from eoscale.train.callbacks.steptime import StepTimer
from eoscale.train.launch.requeue import SlurmRequeue, hpc_checkpoints
from eoscale.train.moved import new_path, quietly
from eoscale.train.quiet import silence_known_noise
from eoscale.train.tasks.base import BaseTask

LOGGER = "eoscale.track.logger.MLflowLogger"


def default_precision() -> str:
    """bf16 mixed precision where the GPU has it, fp32 elsewhere (CPUs: bf16 is slow there)."""
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


class ShortErrorParser(LightningArgumentParser):
    """Parse errors as one line (`eoscale fit: error: ...`) and exit code 2, like every eoscale command; `fit`'s
    help ends with the launcher's options, which are taken out before this parser sees the arguments."""

    def format_help(self) -> str:
        text = super().format_help()
        if self.prog.split()[-1:] == ["fit"]:  # `eoscale fit --help`, and `eoscale pretrain --help` (it is fit)
            from eoscale.train.launch.options import help_section

            text = text.rstrip("\n") + "\n\n" + help_section()
        return text

    def error(self, message: str, ex: Exception | None = None) -> None:  # type: ignore[override]
        lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
        # jsonargparse nests the cause ("Does not validate against any of the types ... - Problem with ...");
        # the innermost line names the key and the value, the one worth reading
        detail = next((ln.lstrip("- ") for ln in reversed(lines) if "Key" in ln or "key" in ln), None)
        text = lines[0] if lines else "invalid arguments"
        if detail and detail not in text:
            text = f"{text} ({detail})"
        if "offload" in text and "not accepted" in text:  # an offload option on DDP or FSDP
            text += ": offloading is DeepSpeed ZeRO's (--config configs/strategy/zero3_offload.yaml)"
        words = self.prog.split()
        prog = f"eoscale {words[-1]}" if words and words[-1] in ("fit", "validate", "test") else "eoscale"
        sys.stderr.write(f"{prog}: error: {text}\n")
        sys.exit(2)


class SaveConfigToMLflow(SaveConfigCallback):
    """The resolved config as MLflow params (flattened) and as the artifact `config.yaml`."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        # rank 0 only (Lightning's rule): no collectives here, not even `trainer.log_dir` (it broadcasts)
        loggers = mlflow_loggers(trainer)
        if not loggers:
            return
        from eoscale.train.callbacks.params import config_params

        try:
            defaults = self.parser.dump(self.parser.get_defaults(), skip_none=True, format="json", skip_check=True)
        except Exception:  # noqa: BLE001 - without the defaults every option is logged: more, not wrong
            defaults = None
        params = config_params(self.parser.dump(self.config, skip_none=True, format="json"), defaults)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, self.config_filename)
            with open(path, "w") as f:
                f.write(self.parser.dump(self.config, skip_none=False))
            for logger in loggers:
                logger.log_hyperparams(params)
                if hasattr(logger, "log_artifact"):
                    logger.log_artifact(path)


class EoscaleCLI(LightningCLI):
    """LightningCLI with eoscale's defaults: MLflow logging, the training monitor, a best-mIoU
    checkpoint and early stopping on it, precision by hardware, a fixed seed, and one-line errors."""

    def __init__(self, args: list[str] | None = None, *, run: bool = True, **kwargs: Any) -> None:
        # under `eoscale fit`, args are sys.argv[1:] as well (Lightning's launcher reruns sys.argv per rank)
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        silence_known_noise()
        kwargs.setdefault("save_config_callback", SaveConfigToMLflow)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(
            model_class=BaseTask,
            datamodule_class=LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            seed_everything_default=0,
            parser_class=ShortErrorParser,
            parser_kwargs={"prog": "eoscale"},
            args=args,
            run=run,
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(TrainingMonitor, "monitor")
        parser.add_lightning_class_args(StepTimer, "steptime")
        parser.add_lightning_class_args(Profiling, "profile")
        parser.add_lightning_class_args(LatestCheckpoint, "checkpoint")  # last.ckpt: the newest state, always
        parser.add_lightning_class_args(TemperatureScaling, "calibration")  # a class model's temperature, each val
        # stop once the checkpoint's metric has not improved for `patience` validations (`--early_stopping.enabled false`)
        parser.add_lightning_class_args(BestMetricStopping, "early_stopping")
        parser.set_defaults(
            {
                "checkpoint.monitor": BaseTask.CHECKPOINT_MONITOR[0],
                "checkpoint.mode": BaseTask.CHECKPOINT_MONITOR[1],
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": BaseTask.CHECKPOINT_MONITOR[2],
                "checkpoint.auto_insert_metric_name": False,
                "trainer.logger": {"class_path": LOGGER},
                "trainer.precision": default_precision(),
                "trainer.accelerator": "auto",
            }
        )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, with eoscale's quieter model summary and progress bar unless the config turns them off or
        names its own (`eoscale.train.quiet`)."""
        from lightning.pytorch.callbacks import ModelSummary as AnySummary
        from lightning.pytorch.callbacks import ProgressBar as AnyBar

        from eoscale.train.quiet import ModelSummary, progress_bar

        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer = config.get("trainer", {})
        given = kwargs.pop("callbacks", None) or trainer.get("callbacks") or []
        callbacks = list(given) if isinstance(given, list | tuple) else [given]  # a config may name just one
        if trainer.get("enable_progress_bar") is not False and not any(isinstance(c, AnyBar) for c in callbacks):
            callbacks.append(progress_bar())  # whole lines where stdout is not a terminal
        if trainer.get("enable_model_summary") is not False and not any(isinstance(c, AnySummary) for c in callbacks):
            callbacks.append(ModelSummary())
        if SLURMEnvironment.detect() and not any(isinstance(c, SlurmRequeue) for c in callbacks):
            callbacks.append(SlurmRequeue())
        return super().instantiate_trainer(callbacks=callbacks, **kwargs)

    def instantiate_classes(self) -> None:
        # the Trainer and strategies check their options only when built: a bad value there is the user's
        try:
            super().instantiate_classes()
        except (ValueError, MisconfigurationException) as err:
            if isinstance(err, UserError):
                raise
            raise InputError(str(err).strip().splitlines()[0]) from err
        last = getattr(self, "_last_checkpoint", None)
        if last is not None:
            # the same file on every rank: Lightning's own "last" looks in <experiment>/<run>/checkpoints as each
            # rank's MLflow logger names them, and only rank 0's knows its experiment (measured: rank 1 started
            # afresh while rank 0 resumed, and the two hung in different collectives). The logged config keeps "last"
            self.config_init[self.subcommand].ckpt_path = last
        # the config's `model.*` and `data.*` params say it once (eoscale.train.callbacks.params); Lightning's copy of the
        # same hparams, unprefixed and with LightningCLI's internals, would say it twice more
        for part in (getattr(self, "model", None), getattr(self, "datamodule", None)):
            if part is not None:
                part._log_hyperparams = False

    def _parse_ckpt_path(self) -> None:
        # Lightning's private hook (eoscale._compat.lightning) that reads `--ckpt_path FILE`'s hyperparameters into
        # the config: a checkpoint fitted from an old config names an old class path, which its user cannot edit
        with quietly():
            super()._parse_ckpt_path()

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if isinstance(config.get("model"), Namespace) and config.model.get("class_path"):
            config.model.class_path = new_path(config.model.class_path)  # what this run's checkpoints record
        root = config.trainer.get("default_root_dir") or os.getcwd()
        loggers = config.trainer.logger
        run_id = None
        from eoscale.train.strategies.zero import check_strategy_choice

        check_strategy_choice(config.trainer.get("strategy"))  # Lightning's own DeepSpeed strategies: ours instead
        from eoscale.train.strategies.pipeline import check_pipeline_config

        check_pipeline_config(config)  # pipeline stages: an MAE, enough blocks, microbatches that divide the batch
        _task_monitor(config)
        if self.subcommand == "fit":
            resumed = _resume_checkpoint(config.get("ckpt_path"), Path(root), config.get("checkpoint.dirpath"))
            run_id = resume_run_id(resumed)
            if config.get("ckpt_path") == "last" and resumed is not None:
                self._last_checkpoint = str(resumed)  # fit resumes from it (instantiate_classes)
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            # MLflow's SQLite store and artifacts live in the run directory, beside the checkpoints
            if isinstance(logger, Namespace) and logger.get("class_path") == LOGGER:
                if logger.init_args.get("root_dir") is None:
                    logger.init_args.root_dir = str(root)
                # a resumed training (a requeued job, --ckpt_path) goes on logging into the run it started
                if run_id and logger.init_args.get("run_id") is None:
                    logger.init_args.run_id = run_id


def _task_monitor(config: Namespace) -> None:
    """A task that logs other metrics than mIoU (a regression's val_rmse) says which checkpoint is best
    (`BaseTask.CHECKPOINT_MONITOR`): it replaces the defaults, never what a config or the command line set."""
    model = config.get("model")
    path = model.get("class_path") if isinstance(model, Namespace) else None
    if not path:
        return
    try:
        module, _, name = path.rpartition(".")
        task = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return  # LightningCLI names the bad class_path itself
    wanted = getattr(task, "CHECKPOINT_MONITOR", BaseTask.CHECKPOINT_MONITOR)
    if wanted == BaseTask.CHECKPOINT_MONITOR:
        return
    for key, default, value in zip(("monitor", "mode", "filename"), BaseTask.CHECKPOINT_MONITOR, wanted, strict=True):
        if config.get(f"checkpoint.{key}") == default:
            config[f"checkpoint.{key}"] = value


def _resume_checkpoint(ckpt_path: str | None, root: Path, dirpath: str | None) -> Path | None:
    """The checkpoint file `fit` will resume from, as Lightning picks it: `ckpt_path` itself, `hpc` (and, under
    Slurm with no ckpt_path, any) `<root>/hpc_ckpt_N.ckpt` of the highest N, `last` the newest `last.ckpt` of
    the checkpoint folder (or of any run under `root`). None when it starts afresh."""
    if ckpt_path is None and not SLURMEnvironment.detect():
        return None
    if ckpt_path in (None, "hpc"):
        numbered = hpc_checkpoints(root)
        return numbered[-1][1] if numbered else None
    if ckpt_path == "last":
        found = list(Path(dirpath).glob("last*.ckpt")) if dirpath else list(root.glob("*/*/checkpoints/last*.ckpt"))
        return max(found, key=lambda p: p.stat().st_mtime) if found else None
    if ckpt_path == "best":
        return None  # the best of this run's own callback: nothing from before to resume
    return Path(ckpt_path)
