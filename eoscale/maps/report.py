"""The files of an accuracy assessment, in its output folder:

    assessment.json   everything: map, reference, kind (sample or census), the error matrix in counts and in
                      area proportions, overall accuracy, per class user's and producer's accuracy, F1, the
                      mapped (pixel-count) area and the error-adjusted area with SE and 95 % CI
    assessment.csv    one row per class
    assessment.md     the same as readable tables
    confusion.png     the error matrix in estimated area proportions

Written under hidden `.partial` names and renamed at the end (the JSON last), as `eoscale predict` does with
its maps; an existing assessment is kept unless `overwrite`.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from eoscale import __version__
from eoscale.classes import ClassTable
from eoscale.errors import OutputExistsError
from eoscale.maps.estimate import Z95, Estimates
from eoscale.maps.publish import partial, published

FILES = ("assessment.csv", "assessment.md", "confusion.png", "assessment.json")  # the JSON last: it marks one finished
CSV_COLUMNS = ("code", "name", "map_pixels", "mapped_area_ha", "weight", "n", "users_accuracy", "users_accuracy_ci95",
               "producers_accuracy", "producers_accuracy_ci95", "f1", "area_ha", "area_ha_se", "area_ha_ci95",
               "area_ha_lower", "area_ha_upper")


def _number(value) -> float | None:
    """A float for JSON: None where undefined (NaN)."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def build_report(*, map_path: Path, reference, table: ClassTable, estimates: Estimates) -> dict:
    """The assessment as plain data (the content of assessment.json)."""
    e = estimates
    classes = []
    for i, c in enumerate(table.classes):
        classes.append({
            "code": c.code, "name": c.name, "color": c.color,
            "map_pixels": int(reference.areas.pixels[i]), "mapped_area_ha": _number(e.mapped_area[i]),
            "weight": _number(e.weights[i]), "n": int(e.counts[i].sum()), "reference_n": int(e.counts[:, i].sum()),
            "users_accuracy": _number(e.users[i]), "users_accuracy_se": _number(e.users_se[i]),
            "users_accuracy_ci95": _number(e.users_ci95[i]),
            "producers_accuracy": _number(e.producers[i]), "producers_accuracy_se": _number(e.producers_se[i]),
            "producers_accuracy_ci95": _number(e.producers_ci95[i]),
            "f1": _number(e.f1[i]),
            "area_proportion": _number(e.area_proportion[i]), "area_proportion_se": _number(e.area_proportion_se[i]),
            "area_ha": _number(e.area[i]), "area_ha_se": _number(e.area_se[i]), "area_ha_ci95": _number(e.area_ci95[i]),
            "area_ha_lower": _number(e.area[i] - e.area_ci95[i]), "area_ha_upper": _number(e.area[i] + e.area_ci95[i]),
        })
    if reference.census:
        method = ("census: the reference labels every pixel it covers, so the matrix is the population's and "
                  "every standard error is 0")
    else:
        method = ("Olofsson et al. (2014) stratified estimators, strata = the map's classes, weights = their mapped "
                  f"areas; 95 % confidence intervals = ±{Z95} standard errors")
    return {
        "eoscale_version": __version__,
        "map": str(Path(map_path).resolve()),
        "reference": str(Path(reference.path).resolve()),
        "kind": reference.kind,
        "design": str(reference.design.resolve()) if reference.design else None,
        "coverage": reference.coverage,
        "method": method,
        "n": int(e.counts.sum()),
        "total_area_ha": e.total_area,
        "overall_accuracy": {"estimate": _number(e.overall), "se": _number(e.overall_se),
                             "ci95": _number(e.overall_ci95)},
        "classes": classes,
        "error_matrix": {"rows": "map class", "columns": "reference class", "codes": table.codes,
                         "counts": e.counts.astype(np.int64).tolist(),
                         "proportions": [[float(v) for v in row] for row in e.proportions]},
    }


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pm(value, ci, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" + ("" if ci is None else f" ± {ci:.{digits}f}")


def markdown(report: dict) -> str:
    """The report as Markdown tables."""
    oa = report["overall_accuracy"]
    census = report["kind"] == "census"

    def pm(c: dict, key: str, digits: int = 3) -> str:  # a census has no interval to show
        return _pm(c[key], None if census else c[f"{key}_ci95"], digits)

    lines = [f"# Accuracy assessment of {Path(report['map']).name}", "",
             f"- map: `{report['map']}`", f"- reference: `{report['reference']}` ({report['kind']}, "
             f"{report['n']} {'pixels' if report['kind'] == 'census' else 'points'})"]
    if report["coverage"] is not None:
        lines.append(f"- coverage: {100 * report['coverage']:.1f} % of the map's valid pixels have a reference value")
    lines += [f"- method: {report['method']}", f"- mapped area: {report['total_area_ha']:,.1f} ha", "",
              f"**Overall accuracy: {_pm(oa['estimate'], None if census else oa['ci95'])}**"
              + ("" if census else " (± half-width of the 95 % CI)"), "",
              "| code | class | n | user's accuracy | producer's accuracy | F1 | mapped area (ha) | "
              "adjusted area (ha) | 95 % CI (ha) |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["classes"]:
        interval = ("census" if census else "–" if c["area_ha_lower"] is None
                    else f"{c['area_ha_lower']:,.1f} – {c['area_ha_upper']:,.1f}")
        lines.append(f"| {c['code']} | {c['name']} | {c['n']} | {pm(c, 'users_accuracy')} | "
                     f"{pm(c, 'producers_accuracy')} | {_fmt(c['f1'])} | "
                     f"{c['mapped_area_ha']:,.1f} | {pm(c, 'area_ha', 1)} | {interval} |")
    names = [c["name"] for c in report["classes"]]
    header = "| map \\ reference | " + " | ".join(names) + " | total |"
    rule = "|---|" + "---:|" * (len(names) + 1)
    counts, proportions = report["error_matrix"]["counts"], report["error_matrix"]["proportions"]
    lines += ["", "## Error matrix (sample counts)" if report["kind"] == "sample" else "## Error matrix (pixels)", "",
              header, rule]
    lines += [f"| {n} | " + " | ".join(str(v) for v in row) + f" | {sum(row)} |" for n, row in zip(names, counts, strict=True)]
    lines += ["", "## Error matrix (estimated proportions of area)", "", header, rule]
    lines += [f"| {n} | " + " | ".join(f"{v:.4f}" for v in row) + f" | {sum(row):.4f} |"
              for n, row in zip(names, proportions, strict=True)]
    column = np.asarray(proportions).sum(axis=0)
    lines.append("| total | " + " | ".join(f"{v:.4f}" for v in column) + f" | {column.sum():.4f} |")
    return "\n".join(lines) + "\n"


def write_csv(report: dict, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for c in report["classes"]:
            writer.writerow(["" if c[k] is None else (f"{c[k]:.6g}" if isinstance(c[k], float) else c[k])
                             for k in CSV_COLUMNS])


def write_confusion_png(report: dict, path: Path) -> None:
    """The error matrix in estimated area proportions (rows map, columns reference), each cell annotated."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    proportions = np.asarray(report["error_matrix"]["proportions"], dtype=np.float64)
    names = [c["name"] for c in report["classes"]]
    size = 3.0 + 0.7 * len(names)
    figure = Figure(figsize=(size + 1.5, size), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(proportions, cmap="Blues", vmin=0.0, vmax=max(float(proportions.max()), 1e-9))
    axes.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=8)
    axes.set_yticks(range(len(names)), names, fontsize=8)
    axes.set_xlabel("reference class")
    axes.set_ylabel("map class")
    top = proportions.max() if proportions.size else 1.0
    for (i, j), value in np.ndenumerate(proportions):
        axes.text(j, i, f"{value:.3f}", ha="center", va="center", fontsize=7,
                  color="white" if value > top / 2 else "black")
    oa = report["overall_accuracy"]
    ci = None if report["kind"] == "census" else oa["ci95"]
    axes.set_title(f"{Path(report['map']).name}: proportions of area\noverall accuracy {_pm(oa['estimate'], ci)}",
                   fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    figure.savefig(path, format="png")


def check_folder(folder: Path, *, overwrite: bool) -> None:
    if Path(folder).exists() and not Path(folder).is_dir():
        raise OutputExistsError(f"--output {str(folder)!r} is a file: give a folder for the assessment")
    done = Path(folder) / FILES[-1]
    if done.exists() and not overwrite:
        raise OutputExistsError(f"{str(done)!r} exists: pass --overwrite to replace it, or another --output")


def write_report(report: dict, folder: Path, *, overwrite: bool) -> list[Path]:
    """Write the four files; returns their paths."""
    folder = Path(folder)
    check_folder(folder, overwrite=overwrite)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / name for name in FILES]
    csv_path, md_path, png_path, json_path = paths
    with published(paths):  # the JSON last
        write_csv(report, partial(csv_path))
        partial(md_path).write_text(markdown(report))
        write_confusion_png(report, partial(png_path))
        partial(json_path).write_text(json.dumps(report, indent=2) + "\n")
    return paths
