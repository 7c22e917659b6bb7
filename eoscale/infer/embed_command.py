"""`eoscale embed`: embedding fields of whole scenes from any backbone eoscale loads, with predict's engine.

One process, several, or under Slurm / torchrun, exactly as `eoscale predict` (scenes dealt to processes, or a
scene's rows split among them; column tiles bound memory)::

    eoscale embed --checkpoint runs/best.ckpt --input scenes/*.tif --output fields/
    eoscale embed --checkpoint pretrain/backbone.safetensors --layer backbone --input scene.tif --output fields/
    srun -n 8 --gpus-per-task 1 eoscale embed --checkpoint best.ckpt --input scenes/*.tif --output fields/

Per scene it writes `<scene>_embedding.tif`: an int8 COG of one band a dimension (`A00`…), unit-length vectors
quantised as Google's Satellite Embedding is (`(v/127.5)² · sign(v)`, nodata −128), the de-quantisation, backbone,
layer and checkpoint (path, sha256, lineage) in its tags; `--float` adds the float32 field; and the field's STAC Item.
`eoscale fewshot`, `eoscale similar` and `eoscale change --fields` use fields (eoscale's or downloaded ones).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eoscale.infer import embed_config


def configure(parser: argparse.ArgumentParser) -> None:
    embed_config.configure(parser)
    parser.add_argument("--tracking-uri", default=None, help="with --checkpoint models:/NAME/VERSION: the MLflow "
                        "tracking URI of its registry (default: $MLFLOW_TRACKING_URI)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from eoscale.infer.config import RunOptions, check_config

    config = embed_config.from_args(args)
    check_config(config)
    if config.checkpoint and Path(config.checkpoint).suffix != ".safetensors":
        from eoscale.infer.command import _resolve_checkpoint

        config = _resolve_checkpoint(config, RunOptions(tracking_uri=args.tracking_uri))  # a run folder, models:/…
    from eoscale.infer.outputs.embedding import EmbeddingWriter
    from eoscale.infer.run import predict

    result = predict(config)
    if result is None:  # another process coordinates this run
        return 0
    table = Table(title="eoscale embed")
    for column in ("scene", "size (px)", "time", "windows/s", EmbeddingWriter.summary_column):
        table.add_column(column, justify="left" if column in ("scene", EmbeddingWriter.summary_column) else "right")
    for r in result.scenes:
        table.add_row(r.id, f"{r.height}×{r.width}", f"{r.seconds:.1f} s", f"{r.windows / max(r.seconds, 1e-9):.1f}",
                      EmbeddingWriter.describe(r.areas))
    console = Console()
    console.print(table)
    console.print(EmbeddingWriter.files_note.format(output=config.output))
    return 0
