"""`TemperatureScaling`: every checkpoint of a class model's fit carries a temperature fitted on its own validation.

On by default in `eoscale fit` (`--calibration.enabled false` turns it off):

    trainer:                # or in a config
      callbacks: ...        # nothing to add: EoscaleCLI adds it as the `calibration` group

At each validation of `fit` it keeps a reproducible sample of the val split's labelled pixels and their logits
(`eoscale.models.calibration.PixelSample`, at most `pixels` a rank: the segmentation task returns its logits from
`validation_step`), fits the temperature on it (L-BFGS on the NLL, Guo et al. 2017), and puts it into the task's
band contract before `ModelCheckpoint` saves (it saves in `on_validation_end`, after this `on_validation_epoch_end`),
so the best checkpoint holds the temperature of its own weights and `predict` divides the logits by it. Under
several ranks each fits on its own val shard and the log-temperatures are averaged; the calibration bins are summed
over ranks, so the logged ECE is the whole val split's sample.

Logged to the run (MLflow): `val_ece` (before), `val_ece_calibrated` (after) and `val_temperature`; printed at the
end of fit. A fitted T outside `TEMPERATURE_RANGE` is clamped (`eoscale.models.calibration.clamp_temperature`): the
fit warns once, the checkpoint's calibration record holds `clamped` ({fitted, kept, range}) and the run the tag
`calibration/clamped`. A target kind other than classes (values) is left alone. `eoscale calibrate` does the same for a
checkpoint after the fact.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from eoscale.classes import IGNORE_INDEX
from eoscale.models.calibration import (
    PixelSample,
    clamp_message,
    clamp_temperature,
    fit_log_temperature,
    temperature_of,
)
from eoscale.models.uncertainty import ECE_BINS, CalibrationBins
from eoscale.train.callbacks.monitor import mlflow_loggers

FIT_PIXELS = 200_000  # a rank's sample at each validation: the fit takes about a second on a CPU


class TemperatureScaling(Callback):
    """Fit the temperature of a class model on each validation of `fit` (see the module docstring)."""

    def __init__(self, enabled: bool = True, pixels: int = FIT_PIXELS, bins: int = ECE_BINS, seed: int = 0) -> None:
        if pixels < 1 or bins < 1:
            raise ValueError(f"pixels={pixels} and bins={bins}: both must be at least 1")
        self.enabled, self.pixels, self.bins, self.seed = enabled, pixels, bins, seed
        self._sample: PixelSample | None = None
        self.last: dict[str, Any] | None = None  # the newest fit: temperature, ece_before, ece_after, pixels, step
        self._warned = False  # a temperature clamped: said once a fit (each clamp is in its checkpoint's record)

    def _active(self, trainer: Trainer, pl_module: LightningModule) -> bool:
        contract = getattr(pl_module, "contract", None)
        return (self.enabled and not trainer.sanity_checking and trainer.state.fn == "fit"
                and contract is not None and contract.target == "classes")

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # the same pixels at every validation (the val loader is not shuffled): fits that compare
        self._sample = PixelSample(limit=self.pixels, seed=self.seed + trainer.global_rank,
                                   ignore_index=IGNORE_INDEX) if self._active(trainer, pl_module) else None

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._sample is None or not isinstance(outputs, dict) or "logits" not in outputs:
            return
        logits = outputs["logits"].detach()
        if hasattr(logits, "full_tensor"):  # a DTensor (tensor parallelism): the whole output, as every rank has it
            logits = logits.full_tensor()
        self._sample.add(logits.float(), batch["label"])

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        sample, self._sample = self._sample, None
        if sample is None:
            return
        logits, labels = sample.tensors()
        strategy = trainer.strategy
        # every rank reduces, even one without labelled pixels (its T counts as 1, weighted by its pixels); the
        # average of log T is clamped once, so that the clamp is recorded as the whole split's
        local = torch.tensor([len(sample) * (fit_log_temperature(logits, labels) if len(sample) else 0.0),
                              float(len(sample))], dtype=torch.float64, device=pl_module.device)
        total = strategy.reduce(local, reduce_op="sum")
        if float(total[1]) == 0:
            return
        temperature, clamped = clamp_temperature(temperature_of(float(total[0]) / float(total[1])))
        if clamped is not None:
            self._report_clamp(trainer, clamped)
        before, after = CalibrationBins(self.bins), CalibrationBins(self.bins)
        if len(sample):
            before.add_probs(torch.softmax(logits, 1).T.numpy(), labels.numpy())
            after.add_probs(torch.softmax(logits / temperature, 1).T.numpy(), labels.numpy())
        sums = torch.from_numpy(np.stack([before.count, before.confidence, before.correct,
                                          after.count, after.confidence, after.correct])).to(pl_module.device)
        sums = strategy.reduce(sums, reduce_op="sum").cpu().numpy()
        before = CalibrationBins(self.bins, *sums[:3].copy())
        after = CalibrationBins(self.bins, *sums[3:].copy())
        self.last = {"temperature": temperature, "ece_before": before.ece(), "ece_after": after.ece(),
                     "pixels": before.pixels, "step": trainer.global_step}
        pl_module.contract = dataclasses.replace(
            pl_module.contract, temperature=temperature,
            calibration={"pixels": before.pixels, "ece_before": before.ece(), "ece_after": after.ece(),
                         "by": "fit", "step": trainer.global_step, **({"clamped": clamped} if clamped else {})})
        pl_module.log_dict({"val_ece": before.ece(), "val_ece_calibrated": after.ece(),
                            "val_temperature": temperature}, sync_dist=False, rank_zero_only=False)

    def _report_clamp(self, trainer: Trainer, clamped: dict) -> None:
        """A temperature outside the range: one warning a fit, and the run's tag `calibration/clamped` (the newest)."""
        if not trainer.is_global_zero:
            return
        message = clamp_message(clamped)
        if not self._warned:
            self._warned = True
            warnings.warn(f"step {trainer.global_step}: {message}", RuntimeWarning, stacklevel=2)
        for logger in mlflow_loggers(trainer):
            if hasattr(logger, "set_tags"):
                logger.set_tags({"calibration/clamped": f"step {trainer.global_step}: {message}"})

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.last is not None and trainer.is_global_zero:
            last = self.last
            print(f"calibration: temperature {last['temperature']:.3f} fitted on {last['pixels']} val pixels "
                           f"at step {last['step']}, expected calibration error {last['ece_before']:.4f} -> "
                           f"{last['ece_after']:.4f} (each checkpoint carries the temperature of its own validation)")
