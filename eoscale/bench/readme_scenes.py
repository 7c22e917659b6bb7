"""benchmarks/README.md's tables of the real-scene and few-shot records (`learning_scene.json`, `fewshot.json`),
registered in `eoscale.bench.readme.TABLES` like the others: every figure is a record's, picked by its date. Each
function here gives a table's header and rows; `readme` lays them out (no import back: no circle)."""

from __future__ import annotations

from collections.abc import Callable

# the models of `eoscale bench learning --scene` as the tables name them
SCENE_MODELS = {"pixel_forest": "per-pixel forest (scikit-learn)", "means_forest": "forest with 5/15 px means",
                "forest": "eoscale forest", "network": "network", "stack": "stack: eoscale forest + network",
                "stack_means": "stack: means forest + network",
                "network_pretrained": "network from the scene-pretrained encoder"}
FORESTS = ("pixel_forest", "means_forest", "forest")


def learning_scene(dates: list[str]) -> Callable:
    """A table of `learning_scene.json`'s records dated `dates`: each model's held-out mIoU (mean ± population std
    over the record's seeds), accuracy, and its difference to the record's best forest; with `--pretrain`, the
    pretraining gain (the same network and budget with and without the scene-pretrained encoder) as its own row."""
    def render(rec) -> tuple[list[str], list[list[str]]]:
        rows = []
        for date in dates:
            r = rec.one("learning_scene", date)
            s = r["summary"]
            best = max(FORESTS, key=lambda m: s[m]["miou_mean"])
            setting = f"{r['label']}, seed{'s' if len(r['seeds']) > 1 else ''} {','.join(map(str, r['seeds']))}"
            for m, figures in s.items():
                gain = "best forest" if m == best else f"{figures['miou_mean'] - s[best]['miou_mean']:+.3f}"
                rows.append([setting, SCENE_MODELS.get(m, m), f"{figures['accuracy_mean']:.3f}",
                             f"{figures['miou_mean']:.3f} ± {figures['miou_std']:.3f}", gain])
            if r.get("pretraining_gain"):
                g = r["pretraining_gain"]
                rows.append([setting, f"**pretraining gain** ({r['pretrain_minutes']:g} of {r['minutes']:g} min)", "",
                             f"**{g['miou_mean']:+.3f} ± {g['miou_std']:.3f}**", "vs network from scratch"])
        return ["record", "model", "test accuracy", "test mIoU", "− best forest"], rows

    return render


def fewshot(dates: list[str]) -> Callable:
    """A table of `fewshot.json`'s records dated `dates`: where, which encoder's field, the head's and the forest's
    mIoU (mean ± sample std over the seeds) and on how many seeds the head did better."""
    def render(rec) -> tuple[list[str], list[list[str]]]:
        rows = []
        for date in dates:
            r = rec.one("fewshot", date)
            s, data, encoder = r["summary"], r["data"], r["encoder"]
            where = (f"synthetic scene ({data['synth_size']} px)" if "synth_size" in data
                     else f"{data['scene'].rsplit('/', 1)[-1]}, drawn from rows {data['train_rows']}")
            if "config" in encoder:  # the synthetic mode fits its encoder itself, with labels of other scenes
                field = f"{encoder['config']} fitted with labels of two other scenes, {encoder['minutes']:g} min"
            else:
                fitted_by = encoder.get("fitted_by") or ""
                field = ("pretrained on the scene's pixels, no labels" if fitted_by.startswith("eoscale pretrain")
                         else "fitted on the train rows' labels" if fitted_by.startswith("eoscale fit")
                         else encoder["path"].rsplit("/", 1)[-1])
            rows.append([where, f"{field} ({encoder['layer']})", str(data["per_class"]),
                         _spread(s, "head"), _spread(s, "forest"), f"{s['head_better_seeds']} of {len(r['seeds'])}"])
        return ["scene", "field (layer)", "points a class", "head on the field mIoU", "forest on the bands mIoU",
                "head better"], rows

    return render


def _spread(summary: dict, model: str) -> str:
    """mean ± sample std; the first records carry the mean alone."""
    mean, std = summary[f"{model}_miou_mean"], summary.get(f"{model}_miou_std")
    return f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}")
