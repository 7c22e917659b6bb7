"""The figures of `eoscale bench adapters` (eoscale/bench/adapters.py) as rich tables."""

from __future__ import annotations

# the methods, in the order of the table
LABELS = {"scratch": "from scratch", "full": "full fine-tuning", "lora": "LoRA", "linear": "linear probe"}
LORA_GOAL = 0.01  # adapter parameters ÷ backbone parameters, at most


def show(figures: dict) -> None:
    """Print the figures as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a log file: wide enough that no column is cut
        console = Console(width=130)
    fractions = [f"{f:g}" for f in figures["fractions"]]
    held = figures.get("heldout")
    table = Table(title=f"{'held-out' if held else 'val'} mIoU after {figures['steps']} steps of {figures['batch_size']} "
                        f"tiles ({figures['model']}, patch {figures['patch_size']}; recipe {figures.get('recipe')!r})")
    table.add_column("method")
    for f in fractions:
        table.add_column(f"{float(f):.0%} labels", justify="right")
    table.add_column("step (100%)", justify="right")
    table.add_column("peak RSS", justify="right")
    table.add_column("params+grads+optim", justify="right")
    table.add_column("trainable", justify="right")
    for method in LABELS:
        cells = [figures["runs"].get(f, {}).get(method) for f in fractions]
        if not any(cells):
            continue
        first = cells[0] or {}
        table.add_row(
            LABELS[method],
            *(_score(c, held) for c in cells),
            f"{first['step_seconds_median']:.3f} s" if first.get("step_seconds_median") else "-",
            f"{first['peak_rss_bytes'] / 2**20:.0f} MiB" if first else "-",
            f"{first['state_bytes'] / 2**20:.1f} MiB" if first else "-",
            f"{first['parameters']['trainable']:,}" if first else "-",
        )
    console.print(table)
    p = figures.get("lora_parameters")
    if p:
        mark = "meets" if p["adapter_vs_backbone"] <= LORA_GOAL else "misses"
        console.print(f"LoRA r={figures['lora']['r']} on qkv/proj: {p['adapter']:,} adapter parameters = "
                      f"{p['adapter_vs_backbone']:.2%} of the backbone's {p['backbone']:,} ({mark} the goal ≤ 1%); "
                      f"with the head {p['trainable']:,} trainable = {p['trainable_vs_all']:.1%} of the model; "
                      f"adapter folder {p['adapter_megabytes'] or 0:.2f} MB")
    for c in figures.get("lora_fraction_by_model", []):
        console.print(f"  LoRA r={c['r']} on {c['model']} (patch 8): {c['adapter']:,} ÷ {c['backbone']:,} = "
                      f"{c['adapter_vs_backbone']:.2%} of the backbone ({'meets' if c['meets_goal'] else 'misses'} ≤ 1%)")
    r = figures.get("lora_vs_full")
    if r:
        console.print(f"LoRA ÷ full fine-tuning: step time {r['step_time']:.2f}×, peak RSS {r['peak_rss']:.2f}×, "
                      f"params+grads+optimizer state {r['state_bytes']:.2f}×"
                      + (f", CUDA peak {r['cuda_max_allocated']:.2f}×" if "cuda_max_allocated" in r else ""))
    if figures.get("mae"):
        m = figures["mae"]
        console.print(f"MAE pretraining: {m['steps']} steps of {m['batch_size']} tiles in {m['seconds']:.0f} s; "
                      f"whole bench {figures['wall_seconds'] / 60:.1f} min")


def _score(fit: dict | None, held: str | None) -> str:
    """A fit's cell: the held-out mIoU (val mIoU in brackets) with a held-out store, else the val mIoU."""
    if not fit or fit.get("val_miou") is None:
        return "-"
    if held and fit.get("heldout"):
        return f"{fit['heldout']['miou']:.3f} ({fit['val_miou']:.3f})"
    return f"{fit['val_miou']:.3f}"
