"""Moved: the LightningCLI to `eoscale.train.launch.cli`, `main` to `eoscale.train.launch.main`. This path stays
so that imports of it (and `python -m eoscale.train.cli fit …`) keep working, and warns once when imported
(`eoscale.train.moved`)."""

from eoscale.train.launch.cli import (
    LOGGER,
    EoscaleCLI,
    SaveConfigToMLflow,
    ShortErrorParser,
    _resume_checkpoint,
    default_precision,
)
from eoscale.train.launch.main import main
from eoscale.train.moved import warn_moved

warn_moved("eoscale.train.cli")

__all__ = ["EoscaleCLI", "LOGGER", "SaveConfigToMLflow", "ShortErrorParser", "_resume_checkpoint",
           "default_precision", "main"]

if __name__ == "__main__":
    main()
