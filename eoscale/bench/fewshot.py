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

On a real labelled scene (`--scene`, with `--labels` on its grid and `--classes`), the encoder is given (`--encoder`:
a checkpoint or a `backbone.safetensors` fitted without these labels, e.g. by `eoscale pretrain` on the scene's own
pixels; `--layer`), the field is `eoscale embed` of the scene, the labelled pixels are drawn from the rows above
`--train-rows` only (default: the north half; a class with fewer labelled pixels there gives as many as it has), and
both are scored on every labelled pixel with data below it (the south half):

    eoscale bench fewshot --scene zion.vrt --band-names B02,B03,B04,B08 --labels labels_nlcd2011.tif \
        --classes classes.csv --encoder pretrain/backbone.safetensors --layer backbone --seeds 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from eoscale.errors import InputError
from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=256, help="synthetic scene size, px (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=3.0, help="the encoder's training budget (default: %(default)s)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds of the labelled pixels' draw (default: %(default)s)")
    parser.add_argument("--per-class", type=int, default=10, help="labelled pixels a class (default: %(default)s)")
    parser.add_argument("--work", default=None, metavar="DIR", help="keep the data, store, fit and field here")
    real = parser.add_argument_group("a real scene instead of the synthetic world")
    real.add_argument("--scene", default=None, action=Paths, help="a scene (one raster of its bands, e.g. a VRT)")
    real.add_argument("--band-names", default=None, help="the scene's bands as the encoder's names, e.g. B02,B03,B04,B08")
    real.add_argument("--labels", default=None, action=Paths, help="its label raster, on the scene's grid")
    real.add_argument("--classes", default=None, action=Paths, help="its class table (CSV code,name,color)")
    real.add_argument("--encoder", default=None, action=Paths,
                      help="a checkpoint or backbone.safetensors fitted without these labels")
    real.add_argument("--encoder-fitted-by", default=None, metavar="COMMAND",
                      help="how the encoder was fitted (e.g. its 'eoscale pretrain' command), recorded with it")
    real.add_argument("--layer", default="decoder", choices=("decoder", "backbone"), help="(default: %(default)s)")
    real.add_argument("--train-rows", type=int, default=None, metavar="N",
                      help="labelled pixels drawn from rows 0..N-1, scored on rows N.. (default: half the scene)")


def run(args: argparse.Namespace) -> int:
    from eoscale.bench.record import record

    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    real = [args.scene, args.labels, args.classes, args.encoder]
    if any(real) and not all(real):
        raise InputError("a real scene needs --scene, --labels, --classes and --encoder together")
    with tempfile.TemporaryDirectory(prefix="eoscale-bench-fewshot-") as tmp:
        work = Path(args.work or tmp)
        if args.scene:
            figures = bench_scene(work, scene=Path(args.scene), band_names=args.band_names, labels=Path(args.labels),
                                  classes=Path(args.classes), encoder=Path(args.encoder), layer=args.layer,
                                  train_rows=args.train_rows, seeds=seeds, per_class=args.per_class)
            figures["encoder"]["fitted_by"] = args.encoder_fitted_by
        else:
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
        "summary": _summary(head, forest, [r["head"]["accuracy"] for r in rows],
                            [r["forest"]["accuracy"] for r in rows]),
    }


def bench_scene(work: Path, *, scene: Path, band_names: str | None, labels: Path, classes: Path, encoder: Path,
                layer: str, train_rows: int | None, seeds: list[int], per_class: int) -> dict:
    """The head on `encoder`'s field of `scene` against the forest on its bands, drawn north of `train_rows`, scored
    south of it (see the module docstring)."""
    import rasterio

    from eoscale.catalog.digest import file_sha256
    from eoscale.infer.embed_config import EmbedConfig
    from eoscale.infer.run import predict

    with rasterio.open(scene) as src:
        height = src.height
    train_rows = height // 2 if train_rows is None else train_rows
    if not 0 < train_rows < height:
        raise InputError(f"--train-rows {train_rows}: give a row inside the scene's {height}")
    started = time.perf_counter()
    result = predict(EmbedConfig(checkpoint=str(encoder), inputs=[str(scene)], output=str(work / "fields"),
                                 layer=layer, band_names=band_names.split(",") if band_names else None,
                                 overwrite=True, progress=False))
    embed_seconds = time.perf_counter() - started
    field_path = Path(result.scenes[0].outputs["field"])
    rows = [score_seed(field_path, scene, labels, classes, seed=seed, per_class=per_class, train_rows=train_rows)
            for seed in seeds]
    head = [r["head"]["miou"] for r in rows]
    forest = [r["forest"]["miou"] for r in rows]
    return {
        "data": {"scene": str(scene), "labels": str(labels), "classes": str(classes), "band_names": band_names,
                 "per_class": per_class, "train_rows": f"0..{train_rows - 1}", "test_rows": f"{train_rows}..{height - 1}"},
        "encoder": {"path": str(encoder), "sha256": file_sha256(encoder), "layer": layer,
                    "embed_wall_seconds": embed_seconds, "dimensions": result.scenes[0].areas.get("dimensions")},
        "caveat": ("the encoder was given (--encoder; encoder.fitted_by says how it was fitted, without these labels); "
                   "the labelled pixels are drawn from the training rows only, scored on the others"),
        "seeds": rows,
        "summary": _summary(head, forest, [r["head"]["accuracy"] for r in rows],
                            [r["forest"]["accuracy"] for r in rows]),
    }


def _summary(head: list[float], forest: list[float], head_accuracy: list[float], forest_accuracy: list[float]) -> dict:
    """Means and spreads (sample standard deviations) over the seeds, and on how many the head did better."""
    def spread(values: list[float]) -> float:
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0

    return {"head_miou_mean": float(np.mean(head)), "forest_miou_mean": float(np.mean(forest)),
            "head_miou_std": spread(head), "forest_miou_std": spread(forest),
            "head_accuracy_mean": float(np.mean(head_accuracy)), "forest_accuracy_mean": float(np.mean(forest_accuracy)),
            "head_better_seeds": int(sum(h > f for h, f in zip(head, forest, strict=True)))}


def score_seed(field_path: Path, scene: Path, labels: Path, classes: Path, *, seed: int, per_class: int,
               train_rows: int | None = None) -> dict:
    """One draw of `per_class` labelled pixels a class: the head on the field and the forest on the bands, scored on
    every other labelled pixel with data (`train_rows`: drawn from the rows above it only, scored on those below)."""
    import rasterio
    from sklearn.ensemble import RandomForestClassifier

    from eoscale.classes import ClassTable
    from eoscale.maps.fewshot import fit_head
    from eoscale.maps.field import open_field
    from eoscale.models.metrics import confusion_miou

    field = open_field(field_path)
    valid = np.concatenate([ok for _, _, ok in field.strips()])
    with rasterio.open(scene) as src:
        bands = np.moveaxis(src.read(), 0, -1).astype(np.float32)
    table = ClassTable.load(classes)
    index = table.lookup_table()[_labels_on_grid(labels, field)]
    known = valid & (index < len(table))
    north = np.ones(known.shape, dtype=bool)
    if train_rows is not None:
        north[train_rows:] = False
    rng = np.random.default_rng(seed)
    train = np.zeros(known.shape, dtype=bool)
    for k in np.unique(index[known & north]):
        where = np.flatnonzero((index == k) & known & north)
        train.flat[rng.permutation(where)[:per_class]] = True
    test = known & ~train & ~north if train_rows is not None else known & ~train
    y = index[train]
    head = fit_head(field.at(*np.nonzero(train))[0], y, head="logistic", seed=seed)
    forest = RandomForestClassifier(n_estimators=200, random_state=seed, n_jobs=1).fit(bands[train], y)
    out = {"seed": seed, "train_pixels": int(train.sum()), "test_pixels": int(test.sum())}
    # the field strip by strip: a whole field of a wide backbone's vectors (384 float32 a pixel) need not fit memory
    by_head = np.concatenate([head.predict(vectors[here]) for w, vectors, _ in field.strips()
                              if (here := test[w.row_off : w.row_off + w.height]).any()])
    for name, predicted in (("head", by_head), ("forest", forest.predict(bands[test]))):
        confusion = np.zeros((len(table), len(table)), dtype=np.int64)
        np.add.at(confusion, (index[test], predicted), 1)
        out[name] = {"accuracy": float((predicted == index[test]).mean()), "miou": confusion_miou(confusion)}
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
