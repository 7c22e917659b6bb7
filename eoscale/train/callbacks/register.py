"""`RegisterModel`: a fit registers its best checkpoint in the MLflow Model Registry when it ends.

    trainer:
      callbacks:
        - class_path: eoscale.train.callbacks.register.RegisterModel
          init_args: {name: landcover, alias: champion}

Then `eoscale predict --checkpoint models:/landcover@champion …` and `eoscale serve --checkpoint
models:/landcover/3` find it in the same tracking store (`eoscale.track.registry`). The version holds the
checkpoint, the fit's LoRA adapters (a LoRA fit writes them when training ends, before this runs) and its band
contract. It runs in `teardown` (after the module's `on_fit_end`, so the adapters exist) on global rank 0 only;
a tracking store that refuses costs a warning, not the fit.
"""

from __future__ import annotations

import warnings

from lightning.pytorch import Callback, LightningModule, Trainer


class RegisterModel(Callback):
    """Register the fit's best checkpoint (else its last) as a new version of model `name`, with `alias`."""

    def __init__(self, name: str = "landcover", alias: str | None = None) -> None:
        from eoscale.track.registry import parse_reference

        parse_reference(f"models:/{name}@{alias}" if alias else f"models:/{name}/1")  # names MLflow accepts
        self.name, self.alias = name, alias
        self.version: str | None = None

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" or not trainer.is_global_zero or trainer.interrupted:
            return
        callback = trainer.checkpoint_callback
        checkpoint = callback and (callback.best_model_path or callback.last_model_path)
        logger = next((lg for lg in trainer.loggers if getattr(lg, "_tracking_uri", None) and lg.run_id), None)
        if not checkpoint or logger is None or getattr(logger, "failed", False):
            warnings.warn(f"model {self.name!r} not registered: the fit has "
                          f"{'no MLflow run' if checkpoint else 'no checkpoint'}", RuntimeWarning, stacklevel=1)
            return
        from eoscale.track.registry import register_checkpoint

        try:
            self.version = register_checkpoint(checkpoint, name=self.name, run_id=logger.run_id,
                                               tracking_uri=logger._tracking_uri, adapters_root=trainer.default_root_dir,
                                               alias=self.alias)
        except Exception as err:  # the model is trained; a store that refuses should not lose it
            warnings.warn(f"model {self.name!r} not registered ({type(err).__name__}: {str(err)[:200]})",
                          RuntimeWarning, stacklevel=1)
            return
        at = f"models:/{self.name}@{self.alias}" if self.alias else f"models:/{self.name}/{self.version}"
        print(f"registered {checkpoint} as model {self.name!r} version {self.version} ({at})")
