"""A profile folder's traces (`eoscale.track.profiler`) summarised as `summary.md` and `summary.png`.

- top ops by self time (an op's time less that of the ops it called), per rank: CPU ops, and GPU kernels where
  the trace has them;
- the memory peak per rank and device, from the profiler's allocation events (`profile_memory`);
- with Holistic Trace Analysis (`hta`), per rank: the temporal breakdown (GPU compute, non-compute and idle time)
  and the share of communication kernels overlapped by compute. HTA reads GPU kernels only: on a CPU trace the
  summary says so and shows the rest.

The traces are read as Chrome trace JSON, so a trace written by another machine summarises the same.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from eoscale.track.profiler import TRACE_SUFFIX, trace_files

TOP = 15
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def load_trace(path: str | os.PathLike) -> dict:
    """A Chrome trace file (gzipped or not) as its JSON object."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def self_times(events: list[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """`{(kind, name): {"self_us", "calls"}}`: CPU ops' self time (nested ops subtracted, per thread) and GPU
    kernels' time (which do not nest)."""
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: {"self_us": 0.0, "calls": 0})
    threads: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        if e.get("cat") == "cpu_op":
            threads[(e.get("pid"), e.get("tid"))].append(e)
        elif e.get("cat") in GPU_CATEGORIES:
            row = out[("gpu", e["name"])]
            row["self_us"] += float(e["dur"])
            row["calls"] += 1
    for ops in threads.values():
        ops.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list] = []  # [end, event, time of its children]
        for e in ops:
            start, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= start:
                _close(stack.pop(), out)
            if stack:
                stack[-1][2] += dur
            stack.append([start + dur, e, 0.0])
        while stack:
            _close(stack.pop(), out)
    return dict(out)


def _close(frame: list, out: dict) -> None:
    end, event, children = frame
    row = out[("cpu", event["name"])]
    row["self_us"] += max(float(event["dur"]) - children, 0.0)
    row["calls"] += 1


def memory_peaks(events: list[dict]) -> dict[str, float]:
    """`{device: peak MB}` from the profiler's `[memory]` events (their "Total Allocated" after each allocation)."""
    peaks: dict[str, float] = {}
    for e in events:
        if e.get("name") != "[memory]":
            continue
        args = e.get("args", {})
        kind = {0: "cpu", 1: "cuda"}.get(args.get("Device Type"), str(args.get("Device Type")))
        device = kind if kind == "cpu" else f"{kind}:{args.get('Device Id', 0)}"
        peaks[device] = max(peaks.get(device, 0.0), float(args.get("Total Allocated", 0)) / 2**20)
    return peaks


def rank_of(trace: dict, path: Path) -> int:
    info = trace.get("distributedInfo") or {}
    if "rank" in info:
        return int(info["rank"])
    digits = "".join(c for c in path.name.removesuffix(TRACE_SUFFIX) if c.isdigit())
    return int(digits) if digits else 0


def hta_figures(folder: Path) -> tuple[Any, Any, str | None]:
    """HTA's temporal breakdown and comm/compute overlap (pandas DataFrames), or Nones and why not."""
    # HTA logs every file it parses, and numpy warns on a rank without communication: not the user's business
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _hta(folder)
    finally:
        logging.disable(logging.NOTSET)


def _hta(folder: Path) -> tuple[Any, Any, str | None]:
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None, None, "Holistic Trace Analysis is not installed (pip install HolisticTraceAnalysis)"
    try:
        analysis = TraceAnalysis(trace_dir=str(folder))
        breakdown = analysis.get_temporal_breakdown(visualize=False)
    except Exception as err:  # noqa: BLE001 - HTA reads GPU kernels only; say why and keep the rest
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        return None, None, f"HTA's temporal breakdown needs GPU kernels, which this trace does not have ({first})"
    try:
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    except Exception:  # noqa: BLE001 - a run of one rank has no communication kernels to overlap
        overlap = None
    return breakdown, overlap, None


def summarize(folder: str | os.PathLike, *, title: str = "profile") -> list[Path]:
    """Write `summary.md` and `summary.png` into `folder` from its traces; returns their paths."""
    folder = Path(folder)
    ranks: dict[int, dict] = {}
    for path in trace_files(folder):
        trace = load_trace(path)
        events = trace.get("traceEvents", [])
        rank = rank_of(trace, path)
        times = self_times(events)
        ranks[rank] = {"file": path.name, "ops": times, "memory": memory_peaks(events),
                       "gpu": any(kind == "gpu" for kind, _ in times)}
    breakdown, overlap, note = hta_figures(folder)
    markdown = folder / "summary.md"
    markdown.write_text(_markdown(title, ranks, breakdown, overlap, note))
    return [markdown, _plot(folder / "summary.png", title, ranks, breakdown)]


def top_ops(ops: dict, kind: str, n: int = TOP) -> list[tuple[str, float, int]]:
    rows = [(name, v["self_us"], int(v["calls"])) for (k, name), v in ops.items() if k == kind]
    return sorted(rows, key=lambda r: -r[1])[:n]


def _markdown(title: str, ranks: dict, breakdown, overlap, note: str | None) -> str:
    lines = [f"# {title}", "", f"Traces of {len(ranks)} rank(s): "
             + ", ".join(f"`{r['file']}`" for _, r in sorted(ranks.items()))
             + ". Open one in https://ui.perfetto.dev or chrome://tracing.", ""]
    for rank, info in sorted(ranks.items()):
        peaks = ", ".join(f"{d} {mb:,.1f} MB" for d, mb in sorted(info["memory"].items())) or "not recorded"
        lines += [f"## rank {rank}", "", f"Memory peak (allocated by torch over the recorded steps): {peaks}.", ""]
        for kind, what in (("gpu", "GPU kernels"), ("cpu", "CPU ops")):
            rows = top_ops(info["ops"], kind)
            if not rows:
                continue
            total = sum(v["self_us"] for (k, _), v in info["ops"].items() if k == kind) or 1.0
            lines += [f"Top {what} by self time:", "", "| op | self ms | share | calls |", "|---|---:|---:|---:|"]
            lines += [f"| `{name[:80]}` | {us / 1000:,.2f} | {us / total:.1%} | {calls} |" for name, us, calls in rows]
            lines.append("")
    lines += ["## Holistic Trace Analysis", ""]
    if breakdown is None:
        lines += [f"Not available: {note}.", ""]
    else:
        lines += ["Temporal breakdown per rank (GPU time):", "", _table(breakdown), ""]
        if overlap is not None:
            lines += ["Communication overlapped by computation, per rank:", "", _table(overlap), ""]
    return "\n".join(lines) + "\n"


def _table(frame) -> str:
    """A pandas DataFrame as a Markdown table (pandas' own needs `tabulate`)."""
    def cell(v: Any) -> str:
        return f"{v:,.2f}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False))])


def _plot(path: Path, title: str, ranks: dict, breakdown) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank, info = min(ranks.items()) if ranks else (0, {"ops": {}, "gpu": False})
    kind = "gpu" if info["gpu"] else "cpu"
    rows = top_ops(info["ops"], kind)[::-1]
    panels = 2 if breakdown is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 0.35 * max(len(rows), 4) + 1.5), squeeze=False)
    ax = axes[0][0]
    ax.barh([n[:48] for n, _, _ in rows], [us / 1000 for _, us, _ in rows], color="tab:blue")
    ax.set_xlabel("self time, ms (recorded steps)")
    ax.set_title(f"rank {rank}: top {'GPU kernels' if kind == 'gpu' else 'CPU ops'}", fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    if breakdown is not None:
        ax = axes[0][1]
        bottom = None
        for column, color in (("compute_time_pctg", "tab:green"), ("non_compute_time_pctg", "tab:orange"),
                              ("idle_time_pctg", "tab:gray")):
            if column in breakdown:
                values = breakdown[column].astype(float).to_numpy()
                ax.bar(breakdown["rank"].astype(str), values, bottom=bottom, label=column.removesuffix("_pctg"),
                       color=color)
                bottom = values if bottom is None else bottom + values
        ax.set_ylabel("% of GPU time")
        ax.set_xlabel("rank")
        ax.set_title("HTA temporal breakdown", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
