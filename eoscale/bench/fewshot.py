"""`eoscale bench fewshot`: a few-shot head on an embedding field against a random forest on the raw bands, given the
same labelled pixels.

On synthetic data (`eoscale synth`), in one run:

1. the encoder: `eoscale ingest` of scenes 0 and 1 with their labels, `eoscale fit` of the default recipe
   (`configs/resnet18_seg.yaml`) for `--minutes` (the learning bench's `fit_network`: the schedule fitted to the
   budget), its best checkpoint by val mIoU;
2. the field: `eoscale embed` of scene 2, which the encoder never saw (decoder layer);
3. for each seed: `--per-class` labelled pixels a class drawn at random from scene 2's labels (put on its grid by
   nearest neighbour), a logistic head on their field vectors (`eoscale.maps.fewshot`, as `eoscale fewshot` fits it)
   and a random forest (200 trees) on their raw bands; both scored on every other labelled pixel of scene 2 with data
   (overall accuracy and mIoU over the classes present).

What it measures is said plainly in the record: the encoder was trained with labels of the same classes in the same
synthetic world (scenes 0 and 1), so the field carries what supervised training learnt of these classes; it is not a
self-supervised foundation model's field, and a gain here holds for a field of a model trained on the classes mapped.

    eoscale bench fewshot --minutes 3 --seeds 0,1,2,3,4 --per-class 10
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=256, help="synthetic scene size, px (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=3.0, help="the encoder's training budget (default: %(default)s)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds of the labelled pixels' draw (default: %(default)s)")
    parser.add_argument("--per-class", type=int, default=10, help="labelled pixels a class (default: %(default)s)")
    parser.add_argument("--work", default=None, metavar="DIR", help="keep the data, store, fit and field here")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record

    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-fewshot-") as tmp:
        work = Path(args.work or tmp)
        figures = bench_synthetic(work, size=args.size, minutes=args.minutes, seeds=seeds, per_class=args.per_class)
    figures["command"] = "eoscale bench fewshot " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "fewshot"] else sys.argv[1:])
    figures["commit"] = _commit()
    for row in figures["seeds"]:
        print(f"  seed {row['seed']}: head on the field accuracy {row['head']['accuracy']:.3f} mIoU {row['head']['miou']:.3f}"
              f" | forest on the bands accuracy {row['forest']['accuracy']:.3f} mIoU {row['forest']['miou']:.3f}")
    s = figures["summary"]
    print(f"mean over {len(seeds)} seeds: head mIoU {s['head_miou_mean']:.3f}, forest mIoU {s['forest_miou_mean']:.3f}; "
          f"the head better on {s['head_better_seeds']} of {len(seeds)} seeds")
    if args.record:
        print(f"recorded in {record('fewshot', figures, directory=args.record)}")
    return 0


def bench_synthetic(work: Path, *, size: int, minutes: float, seeds: list[int], per_class: int) -> dict:
    from eoscale.bench.learning import fit_network
    from eoscale.infer.embed_config import EmbedConfig
    from eoscale.infer.run import predict
    from eoscale.models.checkpoint import run_checkpoint
    from eoscale.synth import synthesize

    data = synthesize(work / "synth", scenes=3, size=size, overwrite=True)
    classes = work / "synth" / "classes.csv"
    store = work / "train.zarr"
    _eoscale("ingest", "--scenes", *map(str, data.scene_paths[:2]), "--labels", *map(str, data.label_paths[:2]),
             "--classes", str(classes), "--output", str(store), "--overwrite", "--quiet")
    started = time.perf_counter()
    fit = fit_network(str(store), work, config="configs/resnet18_seg.yaml", extra=[], minutes=minutes, batch=16, workers=0)
    fit_seconds = time.perf_counter() - started
    checkpoint = run_checkpoint(work / "fit")[0]
    scene = Path(data.scene_paths[2])
    predict(EmbedConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(work / "fields"), overwrite=True,
                        progress=False))
    field_path = work / "fields" / f"{scene.stem}_embedding.tif"
    rows = [score_seed(field_path, scene, Path(data.label_paths[2]), classes, seed=seed, per_class=per_class)
            for seed in seeds]
    head = [r["head"]["miou"] for r in rows]
    forest = [r["forest"]["miou"] for r in rows]
    return {
        "data": {"synth_size": size, "encoder_scenes": [str(p.name) for p in data.scene_paths[:2]],
                 "evaluated_scene": scene.name, "per_class": per_class},
        "encoder": {"config": "configs/resnet18_seg.yaml", "minutes": minutes, "fit_wall_seconds": fit_seconds,
                    "checkpoint": checkpoint.name, "val_miou_on_encoder_store": fit.get("val_miou"),
                    "layer": "decoder"},
        "caveat": ("the encoder was trained with labels of these classes on two other scenes of the same synthetic world; "
                   "the field carries supervised features of these classes, not a self-supervised foundation model's"),
        "seeds": rows,
        "summary": {"head_miou_mean": float(np.mean(head)), "forest_miou_mean": float(np.mean(forest)),
                    "head_better_seeds": int(sum(h > f for h, f in zip(head, forest, strict=True)))},
    }


def score_seed(field_path: Path, scene: Path, labels: Path, classes: Path, *, seed: int, per_class: int) -> dict:
    """One draw of `per_class` labelled pixels a class: the head on the field and the forest on the bands, scored on
    every other labelled pixel with data."""
    import rasterio
    from sklearn.ensemble import RandomForestClassifier

    from eoscale.bench.learning import miou
    from eoscale.classes import ClassTable
    from eoscale.maps.fewshot import fit_head
    from eoscale.maps.field import open_field

    field = open_field(field_path)
    vectors = np.concatenate([v for _, v, _ in field.strips()])
    valid = np.concatenate([ok for _, _, ok in field.strips()])
    with rasterio.open(scene) as src:
        bands = np.moveaxis(src.read(), 0, -1).astype(np.float32)
    table = ClassTable.load(classes)
    index = table.lookup_table()[_labels_on_grid(labels, field)]
    known = valid & (index < len(table))
    rng = np.random.default_rng(seed)
    train = np.zeros(known.shape, dtype=bool)
    for k in np.unique(index[known]):
        where = np.flatnonzero((index == k) & known)
        train.flat[rng.permutation(where)[:per_class]] = True
    test = known & ~train
    y = index[train]
    head = fit_head(vectors[train], y, head="logistic", seed=seed)
    forest = RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=1).fit(bands[train], y)
    out = {"seed": seed, "train_pixels": int(train.sum()), "test_pixels": int(test.sum())}
    for name, model, x in (("head", head, vectors), ("forest", forest, bands)):
        predicted = model.predict(x[test])
        confusion = np.zeros((len(table), len(table)), dtype=np.int64)
        np.add.at(confusion, (index[test], predicted), 1)
        out[name] = {"accuracy": float((predicted == index[test]).mean()), "miou": miou(confusion)[0]}
    return out


def _labels_on_grid(labels: Path, field) -> np.ndarray:
    """The label raster on the field's grid (nearest neighbour; synth writes labels in another CRS and resolution)."""
    import rasterio
    from rasterio.warp import Resampling, reproject

    out = np.zeros((field.height, field.width), dtype=np.uint16)
    with rasterio.open(labels) as src:
        reproject(rasterio.band(src, 1), out, dst_transform=field.transform, dst_crs=field.crs,
                  resampling=Resampling.nearest, dst_nodata=0)
    return out


def _eoscale(*argv: str) -> None:
    done = subprocess.run([sys.executable, "-m", "eoscale", *argv], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise RuntimeError(f"eoscale {argv[0]} failed:\n{done.stderr[-3000:]}")


def _commit() -> str | None:
    from eoscale.bench.embed import _commit as commit

    return commit()
