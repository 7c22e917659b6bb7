"""Moved: `MAETask` and `MaskedAutoencoder` to `eoscale.train.tasks.mae`, the backbone export to
`eoscale.train.tasks.pretraining`, the `eoscale pretrain` command to `eoscale.train.launch.pretrain`. This path
stays so that configs naming `eoscale.train.mae.MAETask`, and imports of it, keep working, and warns once when
imported (`eoscale.train.moved`)."""

from eoscale.train.launch.pretrain import PRETRAIN_DEFAULTS, configure, run
from eoscale.train.moved import warn_moved
from eoscale.train.tasks.mae import MAETask, MaskedAutoencoder
from eoscale.train.tasks.pretraining import EXPORT_NAME, export_backbone

warn_moved("eoscale.train.mae")

__all__ = ["EXPORT_NAME", "MAETask", "MaskedAutoencoder", "PRETRAIN_DEFAULTS", "configure", "export_backbone", "run"]
