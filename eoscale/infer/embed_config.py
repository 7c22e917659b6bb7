"""What `eoscale embed` takes: predict's options that decide how scenes are read and swept (`PredictConfig`), less
those that describe class maps, plus the field's own (`--layer`, `--float`,
`--field-stride`). No torch here, as in
`eoscale.infer.config`: `eoscale embed --help` builds its parser from this module alone.

`eoscale.infer.run.prepare` tells an embedding run by its config's type and builds the feature network and the field
writer instead of the checkpoint's model and its target kind's writer; everything else (dealing scenes to processes,
windows, blending, column tiles, parts, lineage) is predict's.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, fields

from eoscale.infer.config import PredictConfig, option

LAYERS = ("decoder", "backbone")  # eoscale.infer.embed (no torch here)
# predict's options that describe a class or value map, or a served model: not an embedding run's
NOT_EMBED = ("confidence", "uncertainty", "probabilities", "smooth", "mmu", "server", "model", "profile")


@dataclass(frozen=True)
class EmbedConfig(PredictConfig):
    """An embedding run: predict's sweep, a field of a layer's features for each scene."""

    layer: str = option("--layer", "which features: decoder (what a fitted model's classifier sees, at the finest "
                        "stride) or backbone (the backbone's last feature map; the only layer of a backbone.safetensors "
                        "from 'eoscale pretrain')", default="decoder", choices=LAYERS)
    float_field: bool = option("--float", "also write <scene>_embedding_float.tif: the vectors as float32",
                               default=False, action="store_true")
    field_stride: int = option("--field-stride", "one vector a cell of PX × PX pixels instead of one a pixel: the "
                               "field's grid is the scene's, PX times coarser (recorded in its tags and STAC Item); at "
                               "the features' own stride (4 for a CNN's decoder) the vectors are the network's, not "
                               "upsampled, and a scene embeds as fast as it predicts; window, window stride and margin "
                               "must be multiples of PX", default=1, type=int, metavar="PX")


def configure(parser: argparse.ArgumentParser) -> None:
    """`EmbedConfig`'s fields as options; `--input` and `--stac` exclude each other."""
    source = parser.add_mutually_exclusive_group(required=True)
    for f in fields(EmbedConfig):
        if f.name in NOT_EMBED:
            continue
        meta = dict(f.metadata)
        name = meta.pop("flag")
        target = source if meta.pop("group", None) == "source" else parser
        if f.default is not MISSING:
            meta["default"] = f.default
        if name == "--checkpoint":
            meta["help"] = ("an eoscale checkpoint (from 'eoscale fit'; a run's folder or a registered model as for "
                            "predict) or a backbone.safetensors (from 'eoscale pretrain', with --layer backbone)")
        target.add_argument(name, dest=f.name, **meta)


def from_args(args: argparse.Namespace) -> EmbedConfig:
    values = {}
    for f in fields(EmbedConfig):
        if f.name in NOT_EMBED:
            continue
        value = getattr(args, f.name)
        values[f.name] = [] if value is None and f.metadata.get("nargs") and f.default is MISSING else value
    return EmbedConfig(**values)
