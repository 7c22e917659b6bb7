"""Moved: `MAETask` and `MaskedAutoencoder` to `eoscale.train.tasks.mae`, the backbone export to
`eoscale.train.tasks.pretraining`, the `eoscale pretrain` command to `eoscale.train.launch.pretrain`. This path
stays so that configs naming `eoscale.train.mae.MAETask`, and imports of it, keep working."""

from eoscale.train.launch.pretrain import PRETRAIN_DEFAULTS, configure, run
from eoscale.train.tasks.mae import MAETask, MaskedAutoencoder
from eoscale.train.tasks.pretraining import EXPORT_NAME, export_backbone

__all__ = ["EXPORT_NAME", "MAETask", "MaskedAutoencoder", "PRETRAIN_DEFAULTS", "configure", "export_backbone", "run"]
