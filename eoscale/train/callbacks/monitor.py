"""`TrainingMonitor`: the callback that logs what a LightningModule does not.

The run's facts (strategy, world size, nodes, devices, precision, global batch, git commit, Slurm job),
throughput per device and in total, epoch time, peak memory, the confusion matrix and a few
image/label/prediction panels as PNGs, and the path of the best checkpoint, into every MLflow logger
(`eoscale.track.logger.MLflowLogger`). Everything is logged from rank 0 only; the reductions that feed it
run on every rank. The MLflow run travels with each checkpoint (`RUN_KEY`), so a resumed training continues it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import MLFlowLogger

from eoscale.contract import RUN_KEY, load_checkpoint
from eoscale.data.datamodule import data_parallel
from eoscale.track.logger import detect_launcher


def mlflow_loggers(trainer: Trainer) -> list[MLFlowLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]




def resume_run_id(checkpoint: str | os.PathLike | None) -> str | None:
    """The MLflow run a checkpoint file or sharded folder (FSDP, DeepSpeed: its metadata) was written by (None: not
    known, or no checkpoint)."""
    if checkpoint is None or not Path(checkpoint).exists():
        return None
    try:
        if Path(checkpoint).is_dir():
            saved = load_checkpoint(checkpoint)  # the folder's metadata, plain data
        else:
            saved = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)  # plain data: never runs code
    except Exception:  # not ours to judge here: Lightning reports an unreadable checkpoint when it loads it
        return None
    value = saved.get(RUN_KEY) if isinstance(saved, dict) else None
    return str(value) if value else None


def run_lineage(trainer: Trainer) -> dict[str, Any] | None:
    """`{run_id, tracking_uri, experiment_id}` of this training's MLflow run (its first MLflow logger that has not
    failed), or None where there is none: what a checkpoint records for `eoscale lineage`."""
    for logger in mlflow_loggers(trainer):
        if getattr(logger, "failed", False) or not logger._run_id:
            continue
        return {"run_id": str(logger._run_id), "tracking_uri": getattr(logger, "_tracking_uri", None),
                "experiment_id": getattr(logger, "_experiment_id", None)}
    return None


def store_lineage(datamodule: Any) -> dict[str, Any] | None:
    """`{path, fingerprint, scenes}` of the tile store a datamodule reads (None: not a tile-store datamodule).
    The fingerprint comes from the store's STAC Collection and the input files' sha256s from its attributes;
    a store ingested before they were recorded gives None for the fingerprint and the paths without digests."""
    from eoscale import schema
    from eoscale.catalog.stac import read_store_fingerprint

    store = getattr(datamodule, "store", None)
    attrs = getattr(datamodule, "attrs", None) if store is not None else None
    if not isinstance(attrs, Mapping):
        return None
    path = Path(store).resolve()
    scenes = attrs.get(schema.ATTR_INPUTS) or [
        {"scene": s.get("id"), "role": "scene", "path": p, "size": None, "sha256": None}
        for s in attrs.get(schema.ATTR_SCENES, []) for p in s.get("paths", [])]
    return {"path": str(path), "fingerprint": read_store_fingerprint(path), "scenes": [dict(s) for s in scenes]}


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """The commit of the eoscale source tree (with `+dirty` if it has changes), or None outside git."""
    where = Path(path or Path(__file__).parent)
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def run_facts(trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
    """Where and how this run runs: what `eoscale compare` needs to put runs side by side."""
    strategy = trainer.strategy
    datamodule = getattr(trainer, "datamodule", None)
    batch = getattr(datamodule, "batch_size", None)
    hp = getattr(pl_module, "hparams", {})
    _, replicas = data_parallel(trainer)  # tensor-parallel groups and pipeline stages share their batches
    facts = {
        "run/model": type(pl_module).__name__,
        "run/backbone": hp.get("backbone"),
        "run/strategy": type(strategy).__name__,
        "run/world_size": trainer.world_size,
        "run/data_parallel_size": replicas,
        "run/num_nodes": trainer.num_nodes,
        "run/devices_per_node": trainer.num_devices,
        "run/accelerator": type(trainer.accelerator).__name__,
        "run/precision": trainer.precision,
        "run/batch_size_per_device": batch,
        "run/accumulate_grad_batches": trainer.accumulate_grad_batches,
        "run/global_batch_size": batch * replicas * trainer.accumulate_grad_batches if batch else None,
        "run/git_commit": git_commit(),
        "run/torch": torch.__version__,
        "run/slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "run/device_name": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "run/launcher": detect_launcher(),
    }
    contract = getattr(pl_module, "contract", None)
    if contract is not None:
        facts["data/bands"] = ",".join(contract.bands)
        facts["data/tile_size"] = contract.tile_size
        facts["data/classes"] = ",".join(c["name"] for c in contract.classes)
    # the datamodule's own arguments are the config's `data.*` params already (eoscale.train.callbacks.params)
    return {k: v for k, v in facts.items() if v is not None}


class TrainingMonitor(Callback):
    """Throughput, epoch time, peak memory, figures and run facts into every MLflow logger.

    Args:
        panels: how many tiles of the first validation batch to draw as image/label/prediction panels.
        rgb_bands: band names shown as red, green, blue (the first three bands if these are absent).
    """

    def __init__(self, panels: int = 4, rgb_bands: tuple[str, str, str] = ("B04", "B03", "B02")) -> None:
        self.panels = panels
        self.rgb_bands = rgb_bands
        self._samples = 0
        self._sharing = 1
        self.epoch_samples = 0.0  # the last epoch's samples trained, each batch once (what its throughput counts)
        self._epoch_start = 0.0
        self._window = (0, 0.0)
        self._panel_batch: dict[str, torch.Tensor] | None = None

    # -- facts ---------------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_facts(trainer, pl_module)
        self._log_store(trainer)

    def _log_store(self, trainer: Trainer) -> None:
        """The tile store as the run's training dataset (`mlflow.data`: name, fingerprint as digest, path)."""
        loggers = [lg for lg in mlflow_loggers(trainer) if hasattr(lg, "log_dataset")]
        if not trainer.is_global_zero or not loggers:
            return
        store = store_lineage(getattr(trainer, "datamodule", None))
        if store is None:
            return
        for logger in loggers:
            logger.log_dataset(Path(store["path"]).name, store["path"], digest=store["fingerprint"])

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._log_facts(trainer, pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_facts(trainer, pl_module)

    def _log_facts(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from eoscale.train.callbacks.params import description

        facts = run_facts(trainer, pl_module)  # every rank: no collectives inside, but cheap
        store = store_lineage(getattr(trainer, "datamodule", None)) if trainer.is_global_zero else None
        if store is not None and store["fingerprint"]:
            facts["run/store_fingerprint"] = store["fingerprint"]
        for logger in mlflow_loggers(trainer):
            logger.log_hyperparams(facts)
            if hasattr(logger, "set_tags"):
                logger.set_tags({"eoscale.command": getattr(trainer.state.fn, "value", str(trainer.state.fn)),
                                 "eoscale.strategy": facts["run/strategy"],
                                 "mlflow.note.content": description(facts, Path(store["path"]).name if store else None)})

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        # the MLflow run travels with the checkpoint: a resumed training continues it (`resume_run_id`)
        runs = [logger.run_id for logger in mlflow_loggers(trainer) if not getattr(logger, "failed", False)]
        if runs and runs[0]:
            checkpoint[RUN_KEY] = runs[0]

    # -- throughput and memory ------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self._samples = 0
        self._epoch_start = time.perf_counter()
        self._window = (0, self._epoch_start)
        # the ranks that train each batch: a tensor-parallel group, or a pipeline's stages, share theirs, so each
        # counts it (before, 2× the samples at 2-way tensor parallelism); 1 for data parallelism alone
        self._sharing = max(trainer.world_size // data_parallel(trainer)[1], 1)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:
        self._samples += int(batch["image"].shape[0])
        if (trainer.global_step % max(trainer.log_every_n_steps, 1)) == 0 and trainer.global_step > 0:
            samples, since = self._window
            now = time.perf_counter()
            per_device = (self._samples - samples) / max(now - since, 1e-9) / self._sharing
            self._window = (self._samples, now)
            # per-step figure from this rank; the epoch figure below is the exact all-rank sum
            pl_module.log("throughput/samples_per_s_device_step", per_device, on_step=True, on_epoch=False, rank_zero_only=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        seconds = time.perf_counter() - self._epoch_start
        device = pl_module.device
        # collectives: every rank takes part
        samples = trainer.strategy.reduce(torch.tensor(float(self._samples), device=device), reduce_op="sum")
        slowest = trainer.strategy.reduce(torch.tensor(seconds, device=device), reduce_op="max")
        peak = trainer.strategy.reduce(torch.tensor(peak_memory_mb(), device=device), reduce_op="max")
        samples = float(samples) / self._sharing  # each batch once
        self.epoch_samples = samples
        metrics = {
            "throughput/samples_per_s": float(samples) / max(float(slowest), 1e-9),
            "throughput/samples_per_s_device": float(samples) / max(float(slowest), 1e-9) / trainer.world_size,
            "time/epoch_s": float(slowest),
            "memory/peak_mb": float(peak),
        }
        for logger in mlflow_loggers(trainer):
            logger.log_metrics(metrics, step=trainer.global_step)

    # -- figures --------------------------------------------------------------------------------------------
    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and trainer.is_global_zero and isinstance(outputs, Mapping):
            n = self.panels
            self._panel_batch = {
                "image": batch["image"][:n].detach().float().cpu(),
                "label": batch["label"][:n].detach().cpu(),
                "pred": outputs["pred"][:n].detach().cpu(),
            }

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._log_figures(trainer, pl_module, "val")

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log_figures(trainer, pl_module, "test")

    def _log_figures(self, trainer: Trainer, pl_module: LightningModule, split: str) -> None:
        loggers = [lg for lg in mlflow_loggers(trainer) if hasattr(lg, "log_artifact")]
        if not trainer.is_global_zero or not loggers:
            return
        from eoscale.train.callbacks import figures

        confusion = getattr(pl_module, "last_confusion", {}).get(split)
        names = list(getattr(pl_module, "class_names", []))
        contract = getattr(pl_module, "contract", None)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            if confusion is not None:
                paths.append(figures.confusion_png(confusion.numpy(), names, Path(tmp) / f"confusion_{split}.png"))
            if self._panel_batch is not None and split == "val":
                colors = [c["color"] for c in contract.classes] if contract else None
                rgb = _rgb_indices(contract.bands if contract else (), self.rgb_bands)
                paths.append(figures.panels_png(self._panel_batch, Path(tmp) / "panels_val.png", rgb=rgb, colors=colors))
            for logger in loggers:
                for path in paths:
                    logger.log_artifact(path, "figures")

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        callback = trainer.checkpoint_callback
        best = getattr(callback, "best_model_path", "") if callback is not None else ""
        if not best and callback is not None:
            best = getattr(callback, "last_model_path", "")
        if best:
            for logger in mlflow_loggers(trainer):
                if hasattr(logger, "set_tags"):
                    logger.set_tags({"best_checkpoint": str(Path(best).resolve())})
                logger.log_hyperparams({"best_checkpoint": str(Path(best).resolve())})


def peak_memory_mb() -> float:
    """Peak accelerator memory allocated by torch, or the process's peak resident memory on CPUs."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _rgb_indices(bands, wanted) -> tuple[int, int, int]:
    bands = list(bands)
    if all(b in bands for b in wanted):
        return tuple(bands.index(b) for b in wanted)  # type: ignore[return-value]
    return (0, 1, 2) if len(bands) >= 3 else (0, 0, 0)
