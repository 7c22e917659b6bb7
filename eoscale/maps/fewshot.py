"""A few-shot land-cover map from an embedding field: a light head fitted on a handful of labelled pixels' vectors,
then applied to every pixel of the field.

    result = fewshot("scene_embedding.tif", "fewshot/", points="labels.csv", column="class", head="logistic")

The labelled pixels come from a label raster on the field's grid (`labels`: every labelled pixel, or `per_class` drawn
at random of each class with `seed`) or from places (`points`: CSV or vector file, `eoscale.maps.points`). Heads
(`HEADS`, scikit-learn): `logistic` (multinomial logistic regression), `knn` (k nearest neighbours by cosine, k = 5 or
fewer), `mlp` (one hidden layer of 64). In the output folder:

    fewshot.tif          COG of class codes, the class table's colours, its EOSCALE_CLASSES / EOSCALE_NODATA tags (so
                         `eoscale sample` and `eoscale assess` read it), nodata where the field has no vector
    fewshot_areas.csv    pixels, hectares and share of each class
    fewshot.json         the head, its points (how many a class), the seed, the field (path, sha256) and the areas

The class table is `classes` (CSV code,name,color), else the label raster's EOSCALE_CLASSES tag, else one made from the
codes. Written under `.partial` names, the map renamed last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio

from eoscale.classes import ClassTable
from eoscale.contract import TARGET_TAG
from eoscale.errors import InputError, OutputExistsError
from eoscale.maps.classmap import count_classes, file_identity, open_map
from eoscale.maps.field import Field, open_field
from eoscale.maps.points import field_pixels
from eoscale.maps.publish import partial, published

HEADS = ("logistic", "knn", "mlp")
NODATA = 0  # a class code of 0 is refused: it marks pixels without a vector
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class FewshotOutputs:
    map: Path
    areas: Path
    record: Path

    @classmethod
    def in_folder(cls, folder: Path) -> FewshotOutputs:
        return cls(folder / "fewshot.tif", folder / "fewshot_areas.csv", folder / "fewshot.json")

    def files(self) -> list[Path]:
        return [self.areas, self.record, self.map]


def make_head(head: str, *, seed: int, samples: int):
    """An unfitted scikit-learn classifier of vectors (unit length: a dot product is their cosine)."""
    if head == "logistic":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=10.0, max_iter=2000, random_state=seed)
    if head == "knn":
        from sklearn.neighbors import KNeighborsClassifier

        return KNeighborsClassifier(n_neighbors=max(1, min(5, samples)), metric="cosine", weights="distance")
    if head == "mlp":
        from sklearn.neural_network import MLPClassifier

        return MLPClassifier(hidden_layer_sizes=(64,), max_iter=2000, random_state=seed)
    raise InputError(f"--head {head!r} is not one of {', '.join(HEADS)}")


def labelled_pixels(field: Field, *, labels: str | Path | None, points: str | Path | None, column: str,
                    per_class: int | None, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The rows, columns and codes of the training pixels, and where they came from."""
    if (labels is None) == (points is None):
        raise InputError("give one of --labels (a label raster on the field's grid) or --points (a CSV or vector file)")
    if points is not None:
        rows, cols, codes = field_pixels(points, field, column=column)
        source = {"points": str(points), "column": column}
    else:
        with rasterio.open(labels) as src:
            if (src.crs, src.transform, src.width, src.height) != (field.crs, field.transform, field.width, field.height):
                raise InputError(f"label raster {str(labels)!r} is not on the grid of field {str(field.path)!r}: put it on "
                                 "that grid (gdalwarp -te … -tr … -r near) or give --points")
            values, nodata = src.read(1), src.nodata
        known = values != nodata if nodata is not None else np.ones(values.shape, dtype=bool)
        known &= values != NODATA
        rows, cols = np.nonzero(known)
        codes = values[rows, cols].astype(np.int64)
        source = {"labels": str(labels)}
    if per_class is not None:
        rng = np.random.default_rng(seed)
        keep = np.concatenate([rng.permutation(np.flatnonzero(codes == c))[:per_class] for c in np.unique(codes)])
        rows, cols, codes = rows[keep], cols[keep], codes[keep]
    return rows, cols, codes, source


def fit_head(vectors: np.ndarray, codes: np.ndarray, *, head: str, seed: int):
    """`head` fitted on `vectors` (N, D) labelled `codes`."""
    if len(np.unique(codes)) < 2:
        raise InputError(f"the labelled pixels hold {len(np.unique(codes))} class: a head needs at least two")
    model = make_head(head, seed=seed, samples=int(np.bincount(np.unique(codes, return_inverse=True)[1]).min()))
    return model.fit(vectors, codes)


def class_table(codes: np.ndarray, *, classes: str | Path | None, labels: str | Path | None) -> ClassTable:
    if classes is not None:
        table = ClassTable.load(classes)
    elif labels is not None and _has_class_table(labels):
        table = open_map(labels).table
    else:
        table = ClassTable.from_records([{"code": int(c), "name": f"class {int(c)}", "color": COLOURS[i % len(COLOURS)]}
                                         for i, c in enumerate(np.unique(codes))])
    missing = sorted(set(np.unique(codes).tolist()) - set(table.codes))
    if missing or NODATA in table.codes:
        raise InputError(f"class codes {missing or [NODATA]} are not in the class table or are {NODATA} (the map's "
                         f"nodata): give --classes with codes 1… for every labelled class")
    return table


def _has_class_table(path: str | Path) -> bool:
    with rasterio.open(path) as src:
        return "EOSCALE_CLASSES" in src.tags()


def map_field(field: Field, model, table: ClassTable, dst: Path, tags: dict) -> None:
    """`model`'s class of every vector of `field` into the COG `dst`, strip by strip."""
    from eoscale.maps.mosaic import BLOCKSIZE, to_cog

    dtype = "uint8" if max(table.codes) < 255 else "uint16"
    staging = dst.with_name(dst.name + ".tiled.tif")
    profile = dict(driver="GTiff", width=field.width, height=field.height, count=1, dtype=dtype, nodata=NODATA,
                   crs=field.crs, transform=field.transform, tiled=True, blockxsize=BLOCKSIZE, blockysize=BLOCKSIZE,
                   BIGTIFF="IF_SAFER")
    try:
        with rasterio.open(staging, "w", **profile) as out:
            for window, vectors, valid in field.strips():
                codes = np.full(valid.shape, NODATA, dtype=dtype)
                if valid.any():
                    codes[valid] = model.predict(vectors[valid]).astype(dtype)
                out.write(codes, 1, window=window)
            out.write_colormap(1, {**{c.code: (*c.rgb, 255) for c in table.classes}, NODATA: (0, 0, 0, 0)})
            out.update_tags(**tags, OVERVIEW_RESAMPLING="MODE")
            out.update_tags(1, **{f"CLASS_{c.code}": c.name for c in table.classes})
            out.set_band_description(1, "land-cover class code (few-shot head on an embedding field)")
        to_cog(staging, dst, "MODE")
    finally:
        staging.unlink(missing_ok=True)


def fewshot(field_path: str | Path, output: str | Path, *, labels: str | Path | None = None,
            points: str | Path | None = None, column: str = "class", classes: str | Path | None = None,
            head: str = "logistic", per_class: int | None = None, seed: int = 0, overwrite: bool = False) -> dict:
    """Fit `head` on the labelled pixels of `field_path` and map the field into folder `output`; returns the record."""
    if head not in HEADS:
        raise InputError(f"--head {head!r} is not one of {', '.join(HEADS)}")
    if per_class is not None and per_class < 1:
        raise InputError(f"--per-class {per_class}: give at least 1 pixel a class")
    field = open_field(field_path)
    outputs = FewshotOutputs.in_folder(Path(output))
    if outputs.map.exists() and not overwrite:
        raise OutputExistsError(f"{str(outputs.map)!r} exists: pass --overwrite to replace it")
    rows, cols, codes, source = labelled_pixels(field, labels=labels, points=points, column=column,
                                                per_class=per_class, seed=seed)
    vectors, valid = field.at(rows, cols)
    if not valid.all():
        raise InputError(f"{int((~valid).sum())} labelled pixels fall where field {str(field.path)!r} has no vector "
                         "(nodata): remove them")
    table = class_table(codes, classes=classes, labels=labels)
    model = fit_head(vectors, codes, head=head, seed=seed)
    counts = {int(c): int(n) for c, n in zip(*np.unique(codes, return_counts=True), strict=True)}
    tags = {"EOSCALE_CLASSES": json.dumps(table.to_records()), "EOSCALE_NODATA": str(NODATA), TARGET_TAG: "classes",
            "EOSCALE_FEWSHOT": json.dumps({"head": head, "seed": seed, "points_per_class": counts, **source}),
            "EOSCALE_FIELD": str(field.path.resolve())}
    outputs.map.parent.mkdir(parents=True, exist_ok=True)
    with published(outputs.files()):
        map_field(field, model, table, partial(outputs.map), tags)
        areas = count_classes(open_map(partial(outputs.map)))
        total = areas.hectares.sum()
        lines = ["code,name,pixels,hectares,percent"] + [
            f"{c.code},{c.name},{int(p)},{h:.4f},{100 * h / total if total else 0:.3f}"
            for c, p, h in zip(table.classes, areas.pixels, areas.hectares, strict=True)]
        partial(outputs.areas).write_text("\n".join(lines) + "\n")
        record = {"field": file_identity(field.path), "head": head, "seed": seed, "points_per_class": counts,
                  **source, "classes": table.to_records(),
                  "areas": {str(c.code): {"pixels": int(p), "hectares": float(h)}
                            for c, p, h in zip(table.classes, areas.pixels, areas.hectares, strict=True)},
                  "map": str(outputs.map)}
        partial(outputs.record).write_text(json.dumps(record, indent=1))
    return record
