"""The comparison's figures, as PNGs.

Drawn on bare `matplotlib.figure.Figure`s (Agg canvas), not through pyplot: no display is needed on compute
nodes, and a notebook's backend is left alone.

- `scaling.png`: total throughput and scaling efficiency against the device count, one line per model and
  data group, with ideal (linear) scaling from the group's baseline;
- `miou_time.png`: validation mIoU against wall time, and against device-hours (what the run cost).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eoscale.track.compare import Comparison


def _figure(**kw):
    from matplotlib.figure import Figure

    return Figure(**kw)


def scaling_png(comparison: Comparison, path: Path) -> Path:
    """Throughput (with ideal scaling) and efficiency against devices."""
    fig = _figure(figsize=(10, 4), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    groups = sorted({r.group for r in comparison.rows})
    for group in groups:
        rows = sorted((r for r in comparison.rows if r.group == group and r.devices and r.samples_per_s),
                      key=lambda r: r.devices)
        if not rows:
            continue
        devices = [r.devices for r in rows]
        line, = ax_t.plot(devices, [r.samples_per_s for r in rows], "o-", label=group)
        base = rows[0]
        if base.efficiency:  # ideal: the baseline's per-device throughput times the devices
            per_device = base.samples_per_s_device / base.efficiency
            ax_t.plot(devices, [per_device * d for d in devices], ":", color=line.get_color(), alpha=0.6)
        eff = [(r.devices, r.efficiency) for r in rows if r.efficiency is not None]
        if eff:
            ax_e.plot(*zip(*eff, strict=True), "o-", color=line.get_color(), label=group)
    ticks = sorted({r.devices for r in comparison.rows if r.devices})
    for ax in (ax_t, ax_e):
        ax.set_xticks(ticks) if ticks else None
    ax_t.set(xlabel="devices", ylabel="samples/s (total)", title="throughput (dotted: ideal)")
    ax_e.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax_e.set(xlabel="devices", ylabel="efficiency", title="scaling efficiency", ylim=(0, 1.15))
    for ax in (ax_t, ax_e):
        ax.grid(alpha=0.3)
    if ax_t.lines:
        ax_t.legend(fontsize="small")
    else:
        ax_t.text(0.5, 0.5, "no throughput logged", ha="center", transform=ax_t.transAxes)
    fig.savefig(path, dpi=110)
    return path


def miou_png(comparison: Comparison, path: Path) -> Path:
    """Validation mIoU against wall time (hours) and device-hours, one line per run."""
    fig = _figure(figsize=(10, 4), layout="constrained")
    ax_w, ax_d = fig.subplots(1, 2)
    for row in comparison.rows:
        curve = comparison.miou_curves.get(row.run_id) or []
        if not curve:
            continue
        hours = [s / 3600 for s, _ in curve]
        values = [v for _, v in curve]
        label = f"{row.run_name} ({row.devices or '?'} dev)"
        line, = ax_w.plot(hours, values, "o-", ms=3, label=label)
        if row.devices:
            ax_d.plot([h * row.devices for h in hours], values, "o-", ms=3, color=line.get_color(), label=label)
    if comparison.target_miou is not None:
        for ax in (ax_w, ax_d):
            ax.axhline(comparison.target_miou, color="grey", lw=0.8, ls=":")
    ax_w.set(xlabel="wall time (h)", ylabel="val mIoU", title="validation mIoU against wall time")
    ax_d.set(xlabel="device-hours", ylabel="val mIoU", title="validation mIoU against cost")
    for ax in (ax_w, ax_d):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no val_miou logged", ha="center", transform=ax.transAxes)
    fig.savefig(path, dpi=110)
    return path


def plot_all(comparison: Comparison, folder: Path) -> list[Path]:
    return [scaling_png(comparison, folder / "scaling.png"), miou_png(comparison, folder / "miou_time.png")]
