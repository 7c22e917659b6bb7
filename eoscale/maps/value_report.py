"""The files of a continuous map's assessment, in its output folder:

    assessment.json   map, reference, kind (sample or census), n, the target's name and units, RMSE, MAE, bias and
                      R² with their 95 % intervals (a sample's) and how they were computed
    assessment.csv    one row per statistic: statistic, estimate, ci95_lower, ci95_upper, units
    assessment.md     the same as a readable table
    scatter.png       map against reference values with the 1:1 line (a density plot for many pairs)

Written under hidden `.partial` names and renamed at the end (the JSON last), as the class assessment's files are
(`eoscale.maps.report`); an existing assessment is kept unless `overwrite`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from eoscale import __version__
from eoscale.maps.agreement import STATISTICS, Statistic
from eoscale.maps.publish import partial, published
from eoscale.maps.report import check_folder

FILES = ("assessment.csv", "assessment.md", "scatter.png", "assessment.json")  # the JSON last: it marks one finished
METHODS = {
    "sample": "points: each point's map value at its pixel; 95 % intervals by the percentile bootstrap of the pairs "
              "(2,000 resamples, seed 0)",
    "census": "a reference raster warped onto the map's grid (average where finer, bilinear where coarser); the "
              "statistics are those of every pixel where both have a value, without intervals",
}


def build_value_report(*, map_path: Path, pairs, name: str, units: str | None,
                       statistics: dict[str, Statistic]) -> dict:
    """The assessment as plain data (the content of assessment.json)."""
    n = pairs.sums["n"] if pairs.sums is not None else len(pairs.reference)
    return {
        "eoscale_version": __version__, "target": "values", "map": str(map_path), "reference": str(pairs.path),
        "kind": pairs.kind, "n": int(n), "name": name, "units": units, "coverage": pairs.coverage,
        "reference_mean": float(pairs.sums["reference"] / n) if pairs.sums else float(np.mean(pairs.reference)),
        "map_mean": (float((pairs.sums["reference"] + pairs.sums["error"]) / n) if pairs.sums
                     else float(np.mean(pairs.predicted))),
        "statistics": {k: statistics[k].to_dict() for k in STATISTICS}, "method": METHODS[pairs.kind],
        "error": "map minus reference (a positive bias: the map overestimates)",
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    units = f" ({report['units']})" if report["units"] else ""
    lines = [f"# Assessment of {Path(report['map']).name}", "",
             f"{report['name']}{units} against {Path(report['reference']).name}: {report['kind']} of {report['n']:,} "
             f"{'points' if report['kind'] == 'sample' else 'pixels'}.", "",
             "| statistic | estimate | 95 % CI |", "|---|---:|---:|"]
    for key in STATISTICS:
        s = report["statistics"][key]
        ci = "–" if s["ci95_lower"] is None else f"{_fmt(s['ci95_lower'])} – {_fmt(s['ci95_upper'])}"
        lines.append(f"| {key.upper() if key != 'r2' else 'R²'} | {_fmt(s['estimate'])} | {ci} |")
    lines += ["", f"Error: {report['error']}. Method: {report['method']}.", ""]
    return "\n".join(lines)


def write_csv(report: dict, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["statistic", "estimate", "ci95_lower", "ci95_upper", "units"])
        for key in STATISTICS:
            s = report["statistics"][key]
            writer.writerow([key, s["estimate"], s["ci95_lower"], s["ci95_upper"],
                             "" if key == "r2" else report["units"] or ""])


def write_scatter_png(report: dict, predicted: np.ndarray, reference: np.ndarray, path: Path) -> None:
    """Map against reference with the 1:1 line; hexagonal bins where points would hide each other."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    both = np.concatenate([predicted, reference]) if len(predicted) else np.array([0.0, 1.0])
    low, high = float(both.min()), float(both.max())
    high = high if high > low else low + 1
    if len(predicted) > 2000:
        shown = axes.hexbin(reference, predicted, gridsize=60, bins="log", mincnt=1, cmap="viridis",
                            extent=(low, high, low, high))
        figure.colorbar(shown, ax=axes, label="pixels")
    else:
        axes.scatter(reference, predicted, s=12, alpha=0.6, edgecolors="none")
    axes.plot([low, high], [low, high], color="black", linewidth=1, label="1:1")
    units = f" ({report['units']})" if report["units"] else ""
    axes.set_xlabel(f"reference {report['name']}{units}")
    axes.set_ylabel(f"map {report['name']}{units}")
    s = report["statistics"]
    axes.set_title(f"RMSE {_fmt(s['rmse']['estimate'], 2)}, bias {_fmt(s['bias']['estimate'], 2)}, "
                   f"R² {_fmt(s['r2']['estimate'], 2)} (n = {report['n']:,})", fontsize=10)
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.legend(loc="upper left")
    figure.savefig(path, format="png")


def write_value_report(report: dict, pairs, folder: Path, *, overwrite: bool) -> list[Path]:
    """Write the four files; returns their paths."""
    folder = Path(folder)
    check_folder(folder, overwrite=overwrite)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in FILES]
    csv_path, md_path, png_path, json_path = paths
    with published(paths):
        write_csv(report, partial(csv_path))
        partial(md_path).write_text(markdown(report))
        write_scatter_png(report, pairs.predicted, pairs.reference, partial(png_path))
        partial(json_path).write_text(json.dumps(report, indent=2) + "\n")
    return paths


def print_value_summary(report: dict, output: Path) -> None:
    units = f" {report['units']}" if report["units"] else ""
    kind = "census" if report["kind"] == "census" else f"{report['n']} points"
    print(f"{Path(report['map']).name} against {Path(report['reference']).name} ({kind}): {report['name']}")
    for key in STATISTICS:
        s = report["statistics"][key]
        ci = "" if s["ci95_lower"] is None else f"  (95 % CI {_fmt(s['ci95_lower'])} – {_fmt(s['ci95_upper'])})"
        print(f"  {('R²' if key == 'r2' else key.upper()):<5} {_fmt(s['estimate'])}{'' if key == 'r2' else units}{ci}")
    print(f"written to {output}/ ({', '.join(FILES)})")
