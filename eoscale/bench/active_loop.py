"""One strategy's active-learning loop for `eoscale bench active`: the loop's model (a per-pixel forest on texture
features), the strategies, and a round (fit → map → assess → choose → label → add).

The pool scene is cut in two halves with a gap between them: labels are chosen in the west half only, and the
east half, never labelled, is the map being made (assessed against its whole reference raster each round). The
other scene is assessed too, as a transfer to a scene no label came from.

The choosing and labelling are eoscale's own commands (`eoscale sample`, `eoscale label`, `eoscale assess`), run
in this process on the maps and uncertainty rasters the forest writes, exactly as a user would run them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import rasterio

from eoscale.errors import InputError

MEASURES = ("margin", "entropy")
STRATEGY_KEYS = {"random": float, "per_class": int, "interior": int, "spacing": int, "quotas": str}


@dataclass(frozen=True)
class Strategy:
    """How a batch is chosen: `name` random, margin or entropy; with a measure, `random` is the share of each batch
    drawn at random instead (a stratified `eoscale sample --n`), the rest `eoscale sample --by mixed` with these
    `spacing`, `per_class`, `interior` and `quotas`. `random` with options (`random:interior=1:spacing=16`) draws
    through that same path on a flat uncertainty: a control, the spacing and interior without the uncertainty."""

    label: str
    name: str
    random: float = 0.0
    per_class: int = 0
    interior: int = 0
    spacing: int = 8
    quotas: str | None = None

    @property
    def measure(self) -> str | None:
        return None if self.name == "random" else self.name

    @property
    def flat(self) -> bool:
        """Plain `random` is always the baseline (a stratified `eoscale sample --n`, whatever the bench's spacing and
        interior); `random:…` with options is the control."""
        return self.name == "random" and self.label != "random"


def parse_strategy(token: str, defaults: dict) -> Strategy:
    """`NAME[:key=value…]`, e.g. `margin:random=0.25:quotas=proportional`; keys default to the bench's options."""
    name, *options = token.split(":")
    if name not in ("random", *MEASURES):
        raise InputError(f"--strategies {token!r}: a strategy is random, margin or entropy, then :key=value options")
    values = {k: defaults[k] for k in ("per_class", "interior", "spacing", "quotas")}
    values["random"] = 0.0 if name == "random" else defaults["random"]
    for option in options:
        key, _, value = option.partition("=")
        if key not in STRATEGY_KEYS or not value:
            raise InputError(f"--strategies {token!r}: options are {', '.join(f'{k}=…' for k in STRATEGY_KEYS)}")
        try:
            values[key] = STRATEGY_KEYS[key](value)
        except ValueError:
            raise InputError(f"--strategies {token!r}: {key}={value!r} is not a {STRATEGY_KEYS[key].__name__}") from None
    if not 0 <= values["random"] <= 1 or values["spacing"] < 1 or min(values["per_class"], values["interior"]) < 0 \
            or values["quotas"] not in (None, "proportional", "equal"):
        raise InputError(f"--strategies {token!r}: random in [0, 1], spacing ≥ 1, per_class and interior ≥ 0, quotas "
                         "proportional or equal")
    return Strategy(token, name, **values)


@dataclass(frozen=True)
class Scene:
    """A scene's features per pixel, where it has data, and the paths the loop needs."""

    image: Path
    labels: Path
    pixels: np.ndarray  # (height, width, features) float32
    valid: np.ndarray  # (height, width) bool
    profile: dict


def texture_features(bands: np.ndarray, names: tuple, windows: tuple[int, ...]) -> np.ndarray:
    """The bands (and NDVI where red B04 and NIR B08 are named), and each one's mean and standard deviation over
    each window: what a forest needs to tell classes with the same mean spectrum apart by their texture (crop rows,
    urban mix), and to average the noise of a single pixel away."""
    from scipy.ndimage import uniform_filter

    layers = [bands]
    if "B04" in names and "B08" in names:
        red, nir = bands[names.index("B04")], bands[names.index("B08")]
        layers.append(((nir - red) / np.maximum(nir + red, 1.0))[None] * 10000.0)
    base = np.concatenate(layers)
    out = [base]
    for w in windows:
        mean = uniform_filter(base, size=(1, w, w), mode="nearest")
        square = uniform_filter(base * base, size=(1, w, w), mode="nearest")
        out += [mean, np.sqrt(np.maximum(square - mean * mean, 0.0))]
    return np.concatenate(out)


def halves(scene: Scene, gap: int) -> tuple[Scene, Scene]:
    """The scene's west half (where labels are chosen) and its east half (assessed), `gap` columns apart so a
    label's spatial neighbours never lie in the assessed half. Both keep the whole scene's features."""
    from dataclasses import replace

    middle = scene.valid.shape[1] // 2
    columns = np.arange(scene.valid.shape[1])[None, :]
    west = replace(scene, valid=scene.valid & (columns < middle - gap // 2))
    east = replace(scene, valid=scene.valid & (columns >= middle + gap - gap // 2))
    return west, east


def load_scene(image: Path, labels: Path, *, windows: tuple[int, ...]) -> Scene:
    with rasterio.open(image) as src:
        data = src.read(masked=True)
        profile = src.profile
        names = tuple(src.descriptions)
    valid = ~np.ma.getmaskarray(data).any(axis=0)
    features = texture_features(data.filled(0).astype(np.float32), names, windows)
    return Scene(image, labels, np.ascontiguousarray(np.moveaxis(features, 0, -1)), valid, profile)


COMMANDS = {"sample": "eoscale.maps.sample_command", "label": "eoscale.maps.label_command",
            "assess": "eoscale.maps.assess_command"}


def cli(command: str, *argv: str) -> None:
    """Run an eoscale command's module in this process (as `eoscale COMMAND …` would), its report kept off the
    bench's output."""
    import importlib

    module = importlib.import_module(COMMANDS[command])
    parser = argparse.ArgumentParser(prog=f"eoscale {command}")
    module.configure(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = module.run(parser.parse_args(list(argv)))
    if code:
        raise RuntimeError(f"eoscale {command} {' '.join(argv)} failed ({code}):\n{out.getvalue()[-2000:]}")


def write_map(scene: Scene, codes: np.ndarray, path: Path, table) -> None:
    """A land-cover map on the scene's grid, with the class table and nodata tags `eoscale predict` writes."""
    from eoscale.infer.outputs import MapEncoding, map_tags

    profile = {**scene.profile, "driver": "GTiff", "count": 1, "dtype": "uint8", "nodata": 0, "tiled": True,
               "blockxsize": 256, "blockysize": 256, "compress": "deflate", "interleave": "band"}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(codes.astype(np.uint8), 1)
        dataset, band = map_tags(table, MapEncoding.from_table(table), {})
        dst.update_tags(**{**dataset, "EOSCALE_NODATA": "0"})
        dst.update_tags(1, **band)


def write_uncertainty(scene: Scene, values: np.ndarray, path: Path) -> None:
    profile = {**scene.profile, "driver": "GTiff", "count": 1, "dtype": "float32", "nodata": float("nan"),
               "tiled": True, "blockxsize": 256, "blockysize": 256, "compress": "deflate", "interleave": "band"}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(values.astype(np.float32), 1)


def predict(forest, scene: Scene, measure: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Class codes (0 where the scene has no data) and, with a `measure`, the uncertainty (NaN off the data)."""
    from eoscale.maps.uncertain import entropy, margin

    probabilities = forest.predict_proba(scene.pixels[scene.valid])
    codes = np.zeros(scene.valid.shape, dtype=np.uint8)
    codes[scene.valid] = forest.classes_[probabilities.argmax(axis=1)]
    if measure is None:
        return codes, None
    uncertainty = np.full(scene.valid.shape, np.nan, dtype=np.float32)
    uncertainty[scene.valid] = (entropy if measure == "entropy" else margin)(probabilities.T)
    return codes, uncertainty


def assess(forest, scene: Scene, path: Path, table) -> dict:
    """Map the scene's valid pixels and assess the map against its whole reference raster."""
    codes, _ = predict(forest, scene, None)
    write_map(scene, codes, path, table)
    return census(path, scene.labels)


def census(map_path: Path, labels: Path) -> dict:
    """Overall accuracy and mIoU of a map against its whole reference raster (eoscale assess's census)."""
    from eoscale.maps.classmap import open_map
    from eoscale.maps.estimate import stratified
    from eoscale.maps.reference import census_reference
    from eoscale.models.metrics import confusion_miou

    reference = census_reference(open_map(map_path), labels)
    estimates = stratified(reference.counts, reference.areas.weights, 1.0, census=True)
    # the classes in the map or the reference, as a census counts them (the matrix is map by reference)
    return {"oa": float(estimates.overall), "miou": confusion_miou(reference.counts, over="either")}


def labelled_points(csv: Path, only: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, col, reference code) of the labelled points of a sample (`only`: one set of a mixed sample)."""
    import pandas as pd

    table = pd.read_csv(csv, dtype={"reference": "Int64"})
    if only is not None:
        table = table[table["set"] == only]
    table = table[table["reference"].notna()]
    return (table["row"].to_numpy(np.int64), table["col"].to_numpy(np.int64),
            table["reference"].to_numpy(np.int64))


@dataclass
class Loop:
    """One strategy's run from the initial labels; `round` fits, assesses and adds one batch."""

    strategy: Strategy | None  # None: only fitted (the reference forest)
    pool: Scene  # where labels are chosen
    assessed: Scene  # the pool scene's unlabelled half
    held_out: Scene  # another scene
    table: object
    work: Path
    seed: int
    batch: int
    assessment_n: int
    rows: np.ndarray
    cols: np.ndarray
    codes: np.ndarray
    trees: int = 100
    history: list = field(default_factory=list)

    def fit(self):
        from sklearn.ensemble import RandomForestClassifier

        forest = RandomForestClassifier(n_estimators=self.trees, n_jobs=1, random_state=self.seed)
        forest.fit(self.pool.pixels[self.rows, self.cols], self.codes)
        return forest

    def round(self, index: int, *, last: bool) -> dict:
        """Fit, map, assess the held-out scene, then (unless `last`) choose, label and add the next batch."""
        s = self.strategy
        folder = self.work / f"{s.label.replace(':', '_').replace('=', '')}_{self.seed}_{index:02d}"
        folder.mkdir(parents=True)
        started = time.perf_counter()
        forest = self.fit()
        figures = {"round": index, "labels": int(len(self.codes)), **assess(forest, self.assessed, folder / "east.tif",
                                                                             self.table)}
        figures.update({f"held_out_{k}": v for k, v in assess(forest, self.held_out, folder / "held_out.tif",
                                                             self.table).items()})
        if last:
            figures["seconds"] = time.perf_counter() - started
            return figures
        pool_codes, uncertainty = predict(forest, self.pool, s.measure)
        pool_map = folder / "pool.tif"
        write_map(self.pool, pool_codes, pool_map, self.table)
        if s.flat:
            uncertainty = np.where(self.pool.valid, 1.0, np.nan)
        take_random = self.batch if s.measure is None and not s.flat else int(round(self.batch * s.random))
        chosen = self.batch - take_random
        seed = self.seed * 1000 + index
        new = []
        if chosen:
            write_uncertainty(self.pool, uncertainty, folder / "uncertainty.tif")
            options = ["--labelling", str(chosen), "--spacing", str(s.spacing), "--per-class", str(s.per_class),
                       "--interior", str(s.interior), *(["--quotas", s.quotas] if s.quotas else [])]
            cli("sample", str(pool_map), "--by", "mixed", "--uncertainty", str(folder / "uncertainty.tif"), *options,
                "--n", str(self.assessment_n), "--allocation", "min-per-class", "5", "--seed", str(seed),
                "--output", str(folder / "mixed"))
            cli("label", str(folder / "mixed.csv"), "--reference", str(self.pool.labels))
            new.append(labelled_points(folder / "mixed.csv", "labelling"))
            if s.measure is not None:
                figures.update(mixed_assessment(folder, pool_map, self.pool.labels))
        if take_random:
            cli("sample", str(pool_map), "--n", str(take_random), "--seed", str(seed + 500),
                "--output", str(folder / "random"))
            cli("label", str(folder / "random.csv"), "--reference", str(self.pool.labels))
            new.append(labelled_points(folder / "random.csv", None))
        for rows, cols, codes in new:
            self.rows, self.cols = np.concatenate([self.rows, rows]), np.concatenate([self.cols, cols])
            self.codes = np.concatenate([self.codes, codes])
        figures["seconds"] = time.perf_counter() - started
        return figures


def mixed_assessment(folder: Path, pool_map: Path, labels: Path) -> dict:
    """`eoscale assess` of the pool map from the mixed sample (its stratified part only), beside the pool census.
    The few points on the reference raster's nodata (its edges, in another CRS) are dropped, as a labeller would
    drop points they cannot label."""
    import pandas as pd

    table = pd.read_csv(folder / "mixed.csv", dtype=str, keep_default_na=False)
    table[table["reference"] != ""].to_csv(folder / "mixed_labelled.csv", index=False)
    cli("assess", str(pool_map), "--reference", str(folder / "mixed_labelled.csv"), "--design",
        str(folder / "mixed_design.json"), "--output", str(folder / "assessment"), "--no-tracking")
    report = json.loads((folder / "assessment" / "assessment.json").read_text())
    oa = report["overall_accuracy"]
    return {"pool_oa_estimate": oa["estimate"], "pool_oa_ci95": oa["ci95"],
            "pool_oa_census": census(pool_map, labels)["oa"]}
