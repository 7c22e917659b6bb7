"""benchmarks/README.md's tables (and lists of figures), generated from the records in `benchmarks/*.json`.

A generated table sits between two markers in the README:

    <!-- generated: NAME (do not edit; python -m eoscale.bench.readme) -->
    | … the table …
    <!-- end generated -->

and `TABLES[NAME]` renders it from the records of one file, each picked by its date, so a figure in a table is
always a record's. `python -m eoscale.bench.readme` rewrites the README; `--check` only says whether it agrees
(tests/bench/test_readme_tables.py runs it). Under each table a line names the record(s) it comes from and, for
records that carry it, the command and commit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from eoscale.bench import readme_scenes

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "benchmarks" / "README.md"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w.-]+) [^\n]*-->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
MiB, GiB = 2**20, 2**30


class Records:
    """The records of `benchmarks/`, each file read once; `one(file, date)` picks a record by its date's start."""

    def __init__(self, folder: Path):
        self.folder, self._files, self.used = folder, {}, []

    def all(self, name: str) -> list[dict]:
        if name not in self._files:
            self._files[name] = json.loads((self.folder / f"{name}.json").read_text())
        return self._files[name]

    def one(self, name: str, date: str) -> dict:
        found = [r for r in self.all(name) if r["date"].startswith(date)]
        if len(found) != 1:
            raise LookupError(f"benchmarks/{name}.json: {len(found)} records dated {date!r}, need exactly one")
        self.used.append((name, found[0]))
        return found[0]

    def source(self) -> str:
        """The line under a table: which records, and their command and commit where they carry them."""
        parts = []
        for name, run in self.used:
            text = f"`{name}.json` {run['date']}"
            provenance = run.get("provenance") or {}
            command = provenance.get("command") or (run["command"] if isinstance(run.get("command"), str) else None)
            if command:
                text += f": `{command}`"
            if provenance.get("commit"):
                text += f" at {provenance['commit'][:10]}" + (" (dirty)" if provenance.get("dirty") else "")
            parts.append(text)
        self.used = []
        return "Record" + ("s" if len(parts) > 1 else "") + ": " + "; ".join(parts) + "."


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    return [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]


def ingest_small(rec: Records) -> list[str]:
    r = rec.one("ingest", "2026-12-02T17:46")
    b, i, p = r["baseline"], r["ingest"], r["ingest"]["phases"]
    codecs = " · ".join(f"{k} {c['ratio']:.2f}, {c['write_tiles_per_s']:,.0f}/{c['read_tiles_per_s']:,.0f}"
                        for k, c in r["codecs"].items())
    return table(["", ""], [
        ["baseline", f"{b['tiles_per_s']:,.0f} tiles/s, {b['mb_per_s']:.0f} MB/s"],
        ["ingest, whole command", f"{i['tiles_per_s']:,.0f} tiles/s, {i['mb_per_s']:.0f} MB/s "
         f"({r['ratio_whole_command']:.2f}× the baseline): " + ", ".join(f"{k} {v:.2f} s" for k, v in p.items())],
        ["ingest, shard phase only", f"{r['ingest_shard_phase']['tiles_per_s']:,.0f} tiles/s ({r['ratio_shard_phase']:.2f}×)"],
        ["codecs (ratio, write/read tiles/s)", codecs],
    ])


def ingest_full(rec: Records) -> list[str]:
    r = rec.one("ingest", "2026-12-05T06:06")
    b, i, runs, s = r["baseline"], r["ingest"], r["runs_seconds"], r["shard_write"]
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in i["phases"].items() if k != "inspect")

    def each(key: str) -> str:
        return ", ".join(f"{v:.1f}" for v in runs[key])

    return table(["", ""], [
        ["baseline (each process one run of the scene's rows)",
         f"{b['tiles_per_s']:,.0f} tiles/s, {b['mb_per_s']:.0f} MB/s ({b['seconds']:.1f} s; runs {each('baseline')} s)"],
        ["ingest, whole command", f"{i['tiles_per_s']:,.0f} tiles/s, {i['mb_per_s']:.0f} MB/s "
         f"(**{r['ratio_whole_command']:.2f}×**; runs {each('ingest')} s): {phases}"],
        ["ingest, shard phase only", f"{r['ingest_shard_phase']['tiles_per_s']:,.0f} tiles/s (**{r['ratio_shard_phase']:.2f}×**)"],
        [f"one shard ({s['tiles']} tiles), one process, ÷ numcodecs' encode of its chunks",
         f"zarr's assignment {s['zarr_assignment_over_encode']:.2f}×, `eoscale.ingest.shards` "
         f"{s['eoscale_shards_over_encode']:.2f}×"],
    ])


def loader(rec: Records) -> list[str]:
    r = rec.one("loader", "2026-12-04T06:27")
    compact = r["loader_compact"]["tiles_per_s"]
    rows = []
    for key, label in (("loader", "loader (normalised on the CPU)"), ("loader_compact", "loader, compact batches"),
                       ("shared_memory_off", "compact, shared memory off"),
                       ("direct_decode_off", "compact, direct decode off (whole shards through zarr)"),
                       ("zarr_shards", "whole shards through zarr, no loader"), ("decode_only", "decode only"),
                       ("random_zarr", "random Zarr reads"), ("rasterio_windows", "rasterio windows")):
        m = r[key]
        ratio = "" if key.startswith("loader") else _ratio(compact / m["tiles_per_s"])
        rows.append([label, f"{m['tiles_per_s']:,.0f}", f"{m['mb_per_s']:,.0f}", ratio])
    return table(["", "tiles/s", "MB/s", "× (compact loader ÷ this)"], rows)


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def learning_seeds(rec: Records) -> list[str]:
    r = rec.one("learning", "2026-12-06T18:39")
    rows = []
    for run in r["runs"]:
        best = re.search(r"step0*(\d+)", run["network"]["checkpoint"])
        rows.append([str(run["seed"]), f"{run['forest']['val_miou']:.3f}", f"{run['network']['val_miou']:.3f}",
                     f"**{run['miou_gain_over_forest']:+.3f}**", best.group(1) if best else "-"])
    return table(["seed", "forest val mIoU", "default recipe (sqrt weights, ce, spectral MLP 64)", "gain",
                  "best at step"], rows)


def calibration(rec: Records) -> list[str]:
    r = rec.one("calibration", "2026-12-06T02:26")
    before, after, unseen = r["uncalibrated"], r["calibrated"], r["unseen_scene_uncertainty_cog"]
    entropy = after["entropy"]
    return [
        f"- temperature {after['temperature']:.3f}; test ECE {before['ece']:.4f} -> {after['ece']:.4f} "
        f"(x{r['ece_ratio_calibrated_to_uncalibrated']:.2f}), test NLL {before['nll']:.4f} -> {after['nll']:.4f}; "
        f"accuracy {after['accuracy']:.3f}",
        f"- test pixels: entropy {entropy['mean_wrong']:.3f} on wrong pixels, {entropy['mean_right']:.3f} on right ones; "
        f"AUROC of entropy for errors {entropy['auroc_errors']:.3f}",
        f"- the unseen scene's uncertainty COG ({'valid' if unseen['cog_valid'] else 'not valid'}): entropy "
        f"{unseen['mean_wrong']:.3f} on wrong pixels, {unseen['mean_right']:.3f} on right ones, AUROC "
        f"{unseen['auroc_errors']:.3f}",
    ]


def regression(rec: Records) -> list[str]:
    r = rec.one("regression", "2026-12-06T02:12")
    med, runs = r["median"], r["runs"]

    def model(name: str, count: str, unit: str) -> str:
        m = med[name]
        return (f"- {name}: RMSE {m['rmse']:.2f} m, MAE {m['mae']:.2f} m, bias {m['bias']:.2f} m, R² {m['r2']:.2f} ("
                + " and ".join(str(run[name][count]) for run in runs) + f" {unit} in "
                + " and ".join(f"{run[name]['fit_seconds']:.0f}" for run in runs) + " s)")

    ratio = r["rmse_ratio_network_to_forest"]
    return [model("network", "steps_done", "steps"), model("forest", "trees", "trees"),
            f"- the training mean: RMSE {r['mean']['rmse']:.2f} m. Network / forest RMSE: {ratio:.2f}, so the "
            + (f"network wins by {100 * (1 - ratio):.0f} %." if ratio < 1 else f"forest wins by {100 * (1 - 1 / ratio):.0f} %.")]


def temporal(rec: Records) -> list[str]:
    r = rec.one("temporal", "2026-12-06T19:25")
    res, best = r["results"], r["best_single_date"]
    stack, single = res["network_stack"], res["network_single"][str(best["network"])]
    others = [v for k, v in res["network_single"].items() if k != str(best["network"])]
    fstack, fsingle = res["forest_stack"], res["forest_single"][str(best["forest"])]
    times = [v["fit_seconds"] for v in others]
    return table(["model", "val mIoU", "seasonal-class val mIoU", "accuracy", "fit"], [
        [f"U-TAE, stack of {len(res['network_single'])}", f"{stack['miou']:.3f}", f"**{stack['miou_seasonal']:.3f}**",
         f"{stack['accuracy']:.3f}", f"{stack['steps']:,} steps, {stack['fit_seconds']:.0f} s "
         f"({stack['seconds_per_step']:.2f} s a step)"],
        [f"same network, best single date ({single['date']})", f"{single['miou']:.3f}",
         f"**{single['miou_seasonal']:.3f}**", f"{single['accuracy']:.3f}",
         f"{single['steps']:,} steps, {single['fit_seconds']:.0f} s ({single['seconds_per_step']:.2f} s a step)"],
        ["same network, other dates (" + ", ".join(v["date"][5:] for v in others) + ")",
         ", ".join(f"{v['miou']:.3f}" for v in others), ", ".join(f"{v['miou_seasonal']:.3f}" for v in others), "",
         f"{min(times):.0f}–{max(times):.0f} s each"],
        ["forest, stacked series", f"{fstack['miou']:.3f}", f"{fstack['miou_seasonal']:.3f}", f"{fstack['accuracy']:.3f}",
         f"{fstack['fit_seconds']:.0f} s"],
        [f"forest, best single date ({fsingle['date']})", f"{fsingle['miou']:.3f}", f"{fsingle['miou_seasonal']:.3f}",
         f"{fsingle['accuracy']:.3f}", f"{fsingle['fit_seconds']:.0f} s"],
    ])


def fusion(rec: Records) -> list[str]:
    rows = []
    for date in ("2026-12-06T23:26", "2026-12-06T23:13", "2026-12-06T23:02"):  # 0 %, 50 %, 90 % cloud
        (row,) = rec.one("fusion", date)["results"].values()
        arms = row["arms"]
        scores = {k: arms[k]["all"]["miou"] for k in ("s2", "s1", "s1+s2")}
        top = max(scores.values())
        cells = [f"**{scores[k]:.3f}**" if scores[k] == top else f"{scores[k]:.3f}" for k in scores]
        first = not rows  # the first row names the figure in brackets
        cells = [f"{c} ({'OA ' if first and k == 's2' else ''}{arms[k]['all']['accuracy']:.3f})"
                 for c, k in zip(cells, scores, strict=True)]
        rows.append([f"{row['cover'] * 100:.0f} %", *cells, f"**{row['gain_over_s2']:+.3f}**",
                     f"{arms['s1+s2']['without_optical']['miou']:.3f}"])
    return table(["cloud", "S2 alone", "S1 alone", "S1 + S2", "gain over S2", "S1 + S2, no optical data at all"], rows)


FUSION_SEASON = "2026-12-07T22:44"  # the record of `eoscale bench fusion --dates` the table shows (its date's start)


def fusion_season(rec: Records) -> list[str]:
    r = rec.one("fusion_season", FUSION_SEASON)
    names = {"s2": "S2 season", "s1": "S1 season", "s1+s2": "S1 + S2 season"}

    def cell(arm: dict) -> str:
        m = arm["miou"]
        return f"{m['mean']:.3f} ± {m['std']:.3f} ({m['min']:.3f}–{m['max']:.3f})"

    rows = []
    for row in r["results"].values():
        top = max(a["miou"]["mean"] for a in row["arms"].values())
        cells = [f"**{cell(row['arms'][k])}**" if row["arms"][k]["miou"]["mean"] == top else cell(row["arms"][k])
                 for k in names]
        rows.append([f"{row['cover'] * 100:.0f} %", *cells, names[row["best_single"]],
                     f"{row['gain_over_best_single']:+.3f}", "yes" if row["fused_beats_best_single"] else "no"])
    return table(["cloud on the optical dates", *names.values(), "best single sensor", "S1 + S2 minus it",
                  "fused beats it"], rows)


def train(rec: Records) -> list[str]:
    r = rec.one("train", "2026-12-03T06:48")
    fsdp, ddp = r["fit_fsdp2"], r["fit_ddp2"]
    return table(["", "samples/s"], [
        ["plain loop", f"{r['plain_loop']['samples_per_s']:.1f}"],
        ["fit, 1 process", f"{r['fit_single']['samples_per_s']:.1f} ({r['ratio_fit_vs_plain']:.2f}× plain)"],
        ["fit, DDP 2×1", f"{ddp['samples_per_s']:.1f} ({r['ratio_ddp2_vs_single']:.2f}× single)"],
        ["plain DDP 2×1", f"{r['plain_ddp2']['samples_per_s']:.1f} ({r['ratio_plain_ddp2_vs_plain']:.2f}× plain)"],
        ["fit, FSDP2 2×1", f"{fsdp['samples_per_s']:.1f}; state per rank {fsdp['state_bytes_rank0'] / 1e6:.0f} MB, "
         f"against {ddp['state_bytes_rank0'] / 1e6:.0f} MB under DDP ({r['ratio_fsdp_vs_ddp_state_bytes']:.1f}×)"],
    ])


def _cell(run: dict | None) -> str:
    if not run:
        return ""
    held = run.get("heldout")
    return f"{held['miou']:.3f} ({run['val_miou']:.3f})" if held else f"{run['val_miou']:.3f}"


def _best(cells: list[str]) -> list[str]:
    """The highest held-out figure of a row in bold."""
    values = [float(c.split()[0]) if c else -1.0 for c in cells]
    return [f"**{c.split()[0]}** {' '.join(c.split()[1:])}" if c and v == max(values) else c
            for c, v in zip(cells, values, strict=True)]


ADAPTER_METHODS = ("scratch", "full", "lora", "linear")


def adapters_ten_percent(rec: Records) -> list[str]:
    rows = []
    for label, date in (("from scratch (`scratch-ref`)", "2026-12-04T17:28"),
                        ("control: 1 MAE step, i.e. a random backbone (`control-mae1step`)", "2026-12-04T18:05"),
                        ("MAE 1,500 steps × 32, norm-pix loss (`mae1500-normpix`)", "2026-12-04T18:06"),
                        ("MAE 1,500 steps × 32, raw-pixel loss (`mae1500-rawpix`)", "2026-12-04T18:00"),
                        ("MAE raw-pixel, fine-tuned at LR 1e-4 with 50 warm-up steps (`…-ft-lr1e-4-warmup50`)",
                         "2026-12-04T18:14"),
                        ("MAE raw-pixel, scratch and full fine-tuned at LR 1e-3 (`…-ft-lr1e-3`)", "2026-12-04T18:17"),
                        ("self-distillation (DINO) 200 steps × 32, {pretrain_s:.0f} s (`dino200`)", "2026-12-04T18:26")):
        r = rec.one("adapters", date)
        runs, label = r["runs"]["0.1"], label.format(pretrain_s=(r.get("mae") or {}).get("seconds") or 0)
        cells = [_cell(runs.get(m)) for m in ADAPTER_METHODS]
        rows.append([label, *(_best(cells) if date == "2026-12-04T17:28" else cells)])  # the reference in bold
    return table(["10 % of the labels", "scratch", "full", "LoRA", "linear"], rows)


def adapters_one_percent(rec: Records) -> list[str]:
    runs = rec.one("adapters", "2026-12-04T18:11")["runs"]["0.01"]
    return table(["1 % of the labels (`mae1500-rawpix-1pct`)", "scratch", "full", "LoRA"],
                 [["MAE raw-pixel backbone", *_best([_cell(runs.get(m)) for m in ("scratch", "full", "lora")])]])


def adapters_decisive(rec: Records) -> list[str]:
    runs = rec.one("adapters", "2026-12-05T05:50")["runs"]
    labels = {"scratch": "from scratch", "full": "full fine-tuning of the MAE backbone",
              "lora": "LoRA r=4 on the MAE backbone", "linear": "linear probe of the MAE backbone"}
    columns = [_best([_cell(runs[f].get(m)) for m in ADAPTER_METHODS]) for f in ("1", "0.1", "0.01")]
    rows = [[labels[m], *(column[i] for column in columns)] for i, m in enumerate(ADAPTER_METHODS)]
    return table(["method", "100 % of the labels", "10 %", "1 %"], rows)


def adapters_first(rec: Records) -> list[str]:
    r = rec.one("adapters", "2026-12-03T03:45")["runs"]
    return table(["labels", "scratch", "full", "LoRA", "linear"], [
        ["100% val mIoU", *(f"{r['1'][m]['val_miou']:.3f}" for m in ADAPTER_METHODS)],
        ["10% val mIoU", *(f"{r['0.1'][m]['val_miou']:.3f}" for m in ADAPTER_METHODS)],
        ["step (100%, median)", *(f"{r['1'][m]['step_seconds_median']:.2f} s" for m in ADAPTER_METHODS)],
        ["trainable parameters", *(f"{r['1'][m]['parameters']['trainable'] / 1e6:.2f} M" for m in ADAPTER_METHODS)],
    ])


def predict_small(rec: Records) -> list[str]:
    r = rec.one("predict", "2026-12-03T09:39")
    c, feed = r["command"], r["feed"]
    return table(["", "windows/s"], [
        ["model forward (baseline)", f"{r['baseline']['windows_per_s']:.1f}"],
        ["window loop", f"{r['window_loop']['windows_per_s']:.1f} ({r['ratio_window_loop']:.2f}×)"],
        ["whole command", f"{c['windows_per_s']:.1f} ({r['ratio_whole_command']:.2f}×), {c['km2_per_s']:.0f} km²/s"],
        ["feed, 1 reading thread", f"{feed['1']['windows_per_s']:,.0f} ({feed['1']['vs_model']:.1f}× the model)"],
        ["feed, 2 reading threads", f"{feed['2']['windows_per_s']:,.0f} ({feed['2']['vs_model']:.1f}×)"],
    ])


def predict_full(rec: Records) -> list[str]:
    runs = [rec.one("predict", "2026-12-05T03:19"), rec.one("predict", "2026-12-05T03:37")]

    def head(r: dict) -> str:
        d = r["data"]
        return f"{d['height']:,}² ({d['km2']:,.0f} km², {r['command']['windows']:,} windows)"

    small_memory = runs[0]["command_memory"]["peak_rss_bytes"]
    rows = [
        ["model forward (baseline)", *(f"{r['baseline']['windows_per_s']:.1f} windows/s" for r in runs)],
        ["window loop", *(f"{r['window_loop']['windows_per_s']:.1f} ({r['ratio_window_loop']:.2f}×)" for r in runs)],
        ["whole command", *(f"{r['command']['windows_per_s']:.1f} ({r['ratio_whole_command']:.2f}×), "
                            f"**{r['command']['km2_per_s']:.1f} km²/s** ({r['command']['seconds']:.1f} s)" for r in runs)],
        ["feed, 1 / 2 reading threads", *(f"{r['feed']['1']['windows_per_s']:.0f} / {r['feed']['2']['windows_per_s']:.0f} "
                                          "windows/s" for r in runs)],
        ["peak memory of the command", f"{small_memory / GiB:.2f} GiB",
         f"{runs[1]['command_memory']['peak_rss_bytes'] / GiB:.2f} GiB "
         f"({runs[1]['command_memory']['peak_rss_bytes'] / small_memory:.2f}×, for "
         f"{runs[1]['data']['km2'] / runs[0]['data']['km2']:.1f}× the area)"],
        ["map a valid COG", *("yes" if r["command_memory"]["cog_valid"] else "no" for r in runs)],
    ]
    return table(["", *(head(r) for r in runs)], rows)


def predict_memory(rec: Records) -> list[str]:
    r = rec.one("predict", "2026-12-05T06:38")
    small, large = r["command_memory_by_size"]["4096"], r["command_memory_by_size"]["10980"]
    met = "met" if r["memory_ratio"] <= 1.3 else "missed"
    return table(["", "4,096²", "10,980²"], [
        ["peak memory of the command", f"{small['peak_rss_bytes'] / GiB:.2f} GiB",
         f"{large['peak_rss_bytes'] / GiB:.2f} GiB (**{r['memory_ratio']:.2f}×** for {r['area_ratio']:.1f}× the area; "
         f"goal ≤ 1.3: {met})"],
        ["map a valid COG", "yes" if small["cog_valid"] else "no", "yes" if large["cog_valid"] else "no"],
    ])


def launchers(rec: Records) -> list[str]:
    r = rec.one("launchers", "2026-12-04T18:04")
    med, each = r["median"], r["each_repeat"]

    def runs(side: str) -> str:
        return ", ".join(f"{x['samples_per_s']:.1f}" for x in each[side])

    return table(["", "samples/s (median; each repeat)", "start-up to the first batch"], [
        ["torchrun", f"{med['torchrun']['samples_per_s']:.1f} ({runs('torchrun')})", f"{med['torchrun']['startup_s']:.1f} s"],
        ["Ray Train", f"{med['ray']['samples_per_s']:.1f} ({runs('ray')}) = {r['ratio_ray_vs_torchrun_samples_per_s']:.2f}× "
         "torchrun", f"{med['ray']['startup_s']:.1f} s (+{r['ray_extra_startup_s']:.0f} s: starting the Ray cluster, its "
         "controller and workers)"],
    ])


def serve(rec: Records) -> list[str]:
    r = rec.one("serve", "2026-12-04T22:13")
    turns = ", ".join(f"{t['in_process_s'] / t['server_s']:.2f}" for t in r["turns"])
    lat, clients = r["latency_1_window_ms"], r["concurrent_clients"]
    errors = sum(c["errors"] for c in clients.values())
    return table(["", ""], [
        [f"in-process forward, batch {r['batch_size']}", f"{r['in_process']['windows_per_s']:.1f} windows/s"],
        [f"server, batch {r['batch_size']}", f"{r['server']['windows_per_s']:.1f} windows/s "
         f"(**{r['ratio_server_vs_in_process']:.2f}×** the in-process forward; turns {turns}×)"
         + (": goal met" if r["ratio_server_vs_in_process"] >= 0.8 else ": goal missed")],
        ["1-window requests", f"p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms"],
        ["concurrent clients, 1-window requests", " · ".join(f"{k}: {c['windows_per_s']:.1f}" + (" windows/s" if i == 0 else "")
                                                           for i, (k, c) in enumerate(clients.items()))
         + f" ({'no' if not errors else errors} errors)"],
    ])


def strategies(rec: Records) -> list[str]:
    r = rec.one("strategies", "2026-12-05T02:13")
    rows = []
    for key, label in (("ddp", "DDP"), ("fsdp", "FSDP2"), ("zero2", "ZeRO-2"), ("zero3", "ZeRO-3")):
        s = r["strategies"][key]
        goal = f"≤ {s['state_goal']:g}: {'met' if s['state_goal_met'] else 'missed'}" if "state_goal" in s else ""
        rows.append([label, f"{s['state_bytes_per_rank'] / 1e6:.1f} MB", f"{s['state_vs_ddp']:.3f}", goal,
                     f"{s['planned_state_bytes'] / 1e6:.1f} MB", f"{100 * s['planner_error']:.1f} %",
                     f"{s['step_s']:.3f} (" + ", ".join(f"{v:.3f}" for v in s["step_s_each_repeat"]) + ")",
                     f"{s['step_vs_ddp']:.2f}"])
    return table(["", "state per rank", "÷ DDP", "goal", "planned", "planner error", "step s (repeats)", "÷ DDP"], rows)


# the real-scene (issue 49) and few-shot (issue 50) records: each table names the records it shows by their dates
def _laid_out(rows: Callable) -> Callable[[Records], list[str]]:
    return lambda rec: table(*rows(rec))


SCENE_TABLES = {
    "learning-scene-zion": _laid_out(readme_scenes.learning_scene(["2026-12-07T15:46", "2026-12-07T16:22",
                                                                          "2026-12-07T19:11", "2026-12-07T21:59",
                                                                          "2026-12-07T22:49", "2026-12-08T02:31"])),
    "learning-scene-nc": _laid_out(readme_scenes.learning_scene(["2026-12-07T16:01", "2026-12-07T23:07"])),
    "fewshot": _laid_out(readme_scenes.fewshot(["2026-12-07T07:18", "2026-12-07T19:15", "2026-12-07T19:38"])),
}

TABLES: dict[str, Callable[[Records], list[str]]] = {
    "ingest-small": ingest_small, "ingest-full": ingest_full, "loader": loader, "learning-seeds": learning_seeds,
    "calibration": calibration, "regression": regression, "temporal": temporal, "fusion": fusion, "fusion-season": fusion_season, "train": train, "adapters-10pct": adapters_ten_percent,
    "adapters-1pct": adapters_one_percent, "adapters-decisive": adapters_decisive, "adapters-first": adapters_first,
    "predict-4096": predict_small, "predict-full": predict_full, "predict-memory": predict_memory,
    "launchers": launchers, "serve": serve, "strategies": strategies, **SCENE_TABLES,
}


def render(text: str, folder: Path) -> str:
    """`text` (the README) with every generated block filled from the records in `folder`."""
    records = Records(folder)

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"benchmarks/README.md names table {name!r}; known: {', '.join(TABLES)}")
        lines = TABLES[name](records)
        return match.group(1) + "\n".join(lines) + "\n\n" + records.source() + "\n" + match.group(4)

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eoscale.bench.readme", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the README agrees with the records")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    rendered = render(text, args.readme.parent)
    if rendered == text:
        print(f"{args.readme}: its tables agree with the records")
        return 0
    if args.check:
        print(f"{args.readme}: its tables disagree with the records; run 'python -m eoscale.bench.readme'",
              file=sys.stderr)
        return 1
    args.readme.write_text(rendered)
    print(f"{args.readme}: tables written from the records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
