"""`eoscale adapter list | merge`: the LoRA adapters a fit wrote, and folding one into a plain checkpoint.

    eoscale adapter list runs/lora                       # after configs/lora_finetune.yaml (docs/how-to/pretraining.md)
    eoscale adapter merge --checkpoint runs/lora/…/checkpoints/last.ckpt --adapter quickstart \\
        --output runs/lora/quickstart-merged.ckpt
    eoscale predict --checkpoint runs/lora/quickstart-merged.ckpt --input scene.tif --output maps/

`list` reads `<ROOT>/adapters/*/` (`eoscale.models.lora`): rank, alpha, targets, size on disk, the backbone
and the band contract of the store each adapter was trained on.

`merge` builds the network exactly as `eoscale predict --adapter NAME` does (`eoscale.models.checkpoint.load_network`:
the adapter found beside the checkpoint or up to three folders above it, its head loaded, its LoRA updates
folded into the backbone's weights) and writes it as an ordinary checkpoint: weights without LoRA layers,
`finetune: full`, the adapter's band contract and class count. `predict` then needs no `--adapter`, and
runs the same network. The file is written under a temporary name and renamed, so a failed merge leaves no
half-written checkpoint.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from eoscale.errors import InputError, InputNotFoundError, OutputExistsError
from eoscale.paths import Paths

MERGED_KEY = "eoscale_merged_adapter"  # what a merged checkpoint was made from


def describe_adapters(root: str | os.PathLike) -> list[dict]:
    """One entry per adapter under `<root>/adapters/`: name, LoRA settings, size, backbone, band contract."""
    from eoscale.models.lora import ADAPTERS_DIR, list_adapters, read_adapter_meta

    root = Path(root)
    if not root.is_dir():
        raise InputNotFoundError(f"no folder {str(root)!r}: give the root folder of a LoRA fit (its default_root_dir)")
    out = []
    for name in list_adapters(root):
        folder = root / ADAPTERS_DIR / name
        meta = read_adapter_meta(root, name)
        lora, model, contract = meta.get("lora", {}), meta.get("model", {}), meta.get("contract") or {}
        out.append({
            "name": name,
            "path": str(folder),
            "r": lora.get("r"),
            "alpha": lora.get("alpha"),
            "targets": list(lora.get("targets", [])),
            "megabytes": sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 1e6,
            "backbone": model.get("backbone"),
            "bands": list(contract.get("bands", [])),
            "tile_size": contract.get("tile_size"),
            "classes": [c.get("name") for c in contract.get("classes", [])],
        })
    return out


def merge(checkpoint: str | os.PathLike, adapter: str, output: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write `checkpoint` with adapter `adapter` folded into its weights as a plain checkpoint at `output`."""
    import torch

    # predict's own loader: what is written is exactly the network `predict --adapter` runs
    from eoscale.contract import CONTRACT_KEY, MODEL_KEY, load_checkpoint
    from eoscale.models.checkpoint import load_network

    checkpoint, output = Path(checkpoint), Path(output)
    if output.exists() and not overwrite:
        raise OutputExistsError(f"{str(output)!r} exists: pass --overwrite to replace it")
    if output.resolve() == checkpoint.resolve():
        raise InputError(f"--output {str(output)!r} is the checkpoint itself: write the merged one elsewhere")
    model = load_network(checkpoint, adapter=adapter)
    saved = load_checkpoint(checkpoint)
    # the LoRA layers are gone and the head is the adapter's: the merged weights are an ordinary full model
    hparams = dict(saved.get("hyper_parameters") or {})
    hparams.update(finetune="full", lora=None, weights=None, finetune_from=None,
                   num_classes=model.spec["args"]["num_classes"])
    merged = {
        **{k: saved[k] for k in ("epoch", "global_step", "pytorch-lightning_version") if k in saved},
        "state_dict": {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.network.state_dict().items()},
        "hyper_parameters": hparams,
        CONTRACT_KEY: model.contract.to_dict(),
        MODEL_KEY: {"args": model.spec["args"], "finetune": "full", "lora": None},
        MERGED_KEY: {"checkpoint": str(checkpoint), "adapter": adapter},
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent)
    os.close(handle)
    try:
        torch.save(merged, partial)
        os.replace(partial, output)  # atomic on one file system: readers see the old file or the new one
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return output


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the adapters under a LoRA fit's root folder",
                             description="the adapters under ROOT/adapters/: rank, alpha, targets, size, band contract")
    listing.add_argument("root", action=Paths, metavar="ROOT", help="the root folder of a LoRA fit (its trainer.default_root_dir)")
    merging = sub.add_parser("merge", help="fold an adapter into a checkpoint's weights and write a plain checkpoint",
                             description="fold adapter NAME into CHECKPOINT's weights; 'eoscale predict' reads "
                                         "the output without --adapter")
    merging.add_argument("--checkpoint", required=True, action=Paths, metavar="CKPT", help="the checkpoint of the adapter's backbone")
    merging.add_argument("--adapter", required=True, metavar="NAME",
                         help="an adapter in adapters/NAME/ beside the checkpoint or up to three folders above it")
    merging.add_argument("--output", required=True, metavar="OUT.ckpt", help="the merged checkpoint to write")
    merging.add_argument("--overwrite", action="store_true", help="replace OUT.ckpt if it exists")


def run(args: argparse.Namespace) -> int:
    if args.action == "merge":
        out = merge(args.checkpoint, args.adapter, args.output, overwrite=args.overwrite)
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): adapter {args.adapter!r} merged; "
              f"'eoscale predict --checkpoint {out}' needs no --adapter")
        return 0
    adapters = describe_adapters(args.root)
    if not adapters:
        print(f"no adapters under {str(Path(args.root) / 'adapters')!r} (a fit with finetune: lora writes them there)")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"adapters under {args.root}")
    for column in ("name", "r", "alpha", "targets", "MB", "backbone", "bands", "tile", "classes"):
        table.add_column(column, justify="right" if column in ("r", "alpha", "MB", "tile") else "left")
    for a in adapters:
        bands = a["bands"]
        band_text = f"{len(bands)}: {bands[0]}…{bands[-1]}" if len(bands) > 3 else ", ".join(bands) or "-"
        table.add_row(a["name"], str(a["r"]), f"{a['alpha']:g}" if a["alpha"] is not None else "-",
                      ", ".join(a["targets"]), f"{a['megabytes']:.2f}", str(a["backbone"] or "-"), band_text,
                      str(a["tile_size"] or "-"), str(len(a["classes"])))
    Console().print(table)
    return 0
