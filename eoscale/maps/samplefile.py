"""The files of a sample for labelling, and its design beside them:

    <prefix>.gpkg          the points (layer `sample`), geometry in the map's CRS, the columns below
    <prefix>.csv           id, stratum (map class code), stratum_name, x, y (map CRS, pixel centre),
                           lon, lat (WGS84), row, col (map pixel), reference (empty: to be filled with class codes)
    <prefix>_design.json   the map (path, sha256, size, mtime, CRS, grid, class table), each stratum's pixels,
                           hectares, weight W_h, sample size n_h and inclusion probability n_h / N_h, the
                           allocation and the seed

A sample with points chosen by uncertainty (`eoscale sample --by uncertainty|mixed`, `eoscale.maps.uncertain`) has
two more columns, `set` (`assessment`: the stratified probability sample; `labelling`: the points chosen by
uncertainty, for training labels) and `uncertainty` (of the labelling points), and a design of version 2 that
says which sets it holds (`design`: `uncertainty` or `mixed`, `probability_sample`, and `labelling`: how its points
were chosen). Stratified samples keep version 1, so the files of every earlier sample read as before; an older
eoscale refuses a version-2 design rather than weigh its labelling points as a probability sample.

All three are written under hidden `.partial` names and renamed at the end, the design last, so an
interrupted run leaves nothing that looks finished; existing outputs are kept unless `overwrite`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio

from eoscale import __version__
from eoscale.errors import InputError, OutputExistsError
from eoscale.maps.classmap import ClassMap, file_identity
from eoscale.maps.design import Allocation, Sample
from eoscale.maps.publish import partial, published

DESIGN_VERSION = 1  # a stratified sample
SETS_VERSION = 2  # a sample with a labelling set (chosen by uncertainty), and maybe a stratified one beside it
LAYER = "sample"
REFERENCE = "reference"
SET = "set"
ASSESSMENT = "assessment"  # the probability sample: the only points `eoscale assess` estimates from
LABELLING = "labelling"  # points chosen by uncertainty: training labels, never an estimate
UNCERTAINTY = "uncertainty"


@dataclass(frozen=True)
class SampleFiles:
    gpkg: Path
    csv: Path
    design: Path

    @classmethod
    def for_prefix(cls, prefix: str | Path) -> SampleFiles:
        prefix = Path(prefix)
        return cls(prefix.with_name(prefix.name + ".gpkg"), prefix.with_name(prefix.name + ".csv"),
                   prefix.with_name(prefix.name + "_design.json"))

    def all(self) -> list[Path]:
        return [self.gpkg, self.csv, self.design]

    def check(self, *, overwrite: bool) -> None:
        existing = [str(p) for p in self.all() if p.exists()]
        if existing and not overwrite:
            raise OutputExistsError(f"{existing[0]!r} exists: pass --overwrite to replace it, or another --output")


def design_of(path: Path) -> Path:
    """Where the design of a sample file (`<prefix>.csv` or `.gpkg`) lies: `<prefix>_design.json`."""
    return path.with_name(path.stem + "_design.json")


def points_table(cmap: ClassMap, sample: Sample):
    """The sample as a GeoDataFrame in the map's CRS, with map and WGS84 coordinates of each pixel centre."""
    import geopandas as gpd
    from pyproj import Transformer

    x, y = rasterio.transform.xy(cmap.transform, sample.rows, sample.cols, offset="center")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    lon, lat = Transformer.from_crs(cmap.crs.to_wkt(), "EPSG:4326", always_xy=True).transform(x, y)
    codes = np.asarray(cmap.table.codes)[sample.strata]
    names = np.asarray(cmap.table.names, dtype=object)[sample.strata]
    frame = {
        "id": np.arange(1, len(x) + 1),
        "stratum": codes.astype(np.int64),
        "stratum_name": names,
        "x": x, "y": y, "lon": np.asarray(lon), "lat": np.asarray(lat),
        "row": sample.rows.astype(np.int64), "col": sample.cols.astype(np.int64),
        REFERENCE: np.full(len(x), None, dtype=object),
    }
    return gpd.GeoDataFrame(frame, geometry=gpd.points_from_xy(x, y), crs=cmap.crs.to_wkt())


def sets_table(cmap: ClassMap, assessment: Sample | None, labelling: Sample, uncertainty: np.ndarray):
    """The points of both sets in one table: the probability sample first, then the labelling points, most
    uncertain first; the `set` column tells them apart, `id` runs through both."""
    import pandas as pd

    parts = []
    if assessment is not None:
        part = points_table(cmap, assessment)
        part[SET] = ASSESSMENT
        part[UNCERTAINTY] = np.nan
        parts.append(part)
    part = points_table(cmap, labelling)
    part[SET] = LABELLING
    part[UNCERTAINTY] = np.asarray(uncertainty, dtype=np.float64)
    parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    table["id"] = np.arange(1, len(table) + 1)
    columns = [c for c in table.columns if c not in (REFERENCE, "geometry")] + [REFERENCE, "geometry"]
    return table[columns]


def design_record(cmap: ClassMap, sample: Sample, allocation: Allocation | None, *, seed: int, files: SampleFiles,
                  labelling: tuple[Sample, dict] | None = None, assessment: bool = True) -> dict:
    """The design as plain data: enough for `eoscale assess` to weigh the sample without reading the map again.
    With `labelling` (its points and how they were chosen), a version-2 design; `assessment=False`: no
    probability sample beside them (`sample` then only lends its strata areas, with n = 0)."""
    weights = sample.areas.weights
    sizes = sample.sizes if assessment else np.zeros_like(sample.sizes)
    strata = [
        {"code": c.code, "name": c.name, "pixels": int(sample.areas.pixels[i]),
         "area_ha": float(sample.areas.hectares[i]), "weight": float(weights[i]), "n": int(sizes[i]),
         "inclusion_probability": float(sizes[i] / sample.areas.pixels[i]) if sample.areas.pixels[i] else 0.0}
        for i, c in enumerate(cmap.table.classes)
    ]
    record = {
        "eoscale_sample_design": DESIGN_VERSION,
        "eoscale_version": __version__,
        "map": {"path": str(cmap.path.resolve()), **file_identity(cmap.path), "crs": cmap.crs.to_string(),
                "transform": list(cmap.transform)[:6], "width": cmap.width, "height": cmap.height,
                "nodata": cmap.nodata},
        "classes": [{"code": c.code, "name": c.name, "color": c.color} for c in cmap.table.classes],
        "crs": cmap.crs.to_string(),  # of the x, y columns (EPSG:… where there is a code, else WKT)
        "allocation": allocation.describe() if allocation is not None else None,
        "n": int(sizes.sum()),
        "seed": seed,
        "total_area_ha": float(sample.areas.hectares.sum()),
        "strata": strata,
        "files": {"gpkg": files.gpkg.name, "csv": files.csv.name},
    }
    if labelling is None:
        return record
    points, how = labelling
    record["eoscale_sample_design"] = SETS_VERSION
    record["design"] = "mixed" if assessment else "uncertainty"
    record["probability_sample"] = ASSESSMENT if assessment else None  # the set `eoscale assess` may estimate from
    record["labelling"] = {"n": int(points.sizes.sum()), "per_stratum": {str(c): int(n) for c, n in
                                                                         zip(cmap.table.codes, points.sizes, strict=True)},
                           **how}
    return record


def write_sample(cmap: ClassMap, sample: Sample | None, allocation: Allocation | None, *, seed: int,
                 files: SampleFiles, overwrite: bool,
                 labelling: tuple[Sample, np.ndarray, dict] | None = None) -> dict:
    """Write the three files (see the module docstring); returns the design. `sample` is the stratified
    (probability) sample, `labelling` the points chosen by uncertainty, their uncertainties and how they were
    chosen; one of them may be None."""
    files.check(overwrite=overwrite)
    for path in files.all():
        path.parent.mkdir(parents=True, exist_ok=True)
    if labelling is None:
        table = points_table(cmap, sample)
        design = design_record(cmap, sample, allocation, seed=seed, files=files)
    else:
        points, values, how = labelling
        table = sets_table(cmap, sample, points, values)
        design = design_record(cmap, sample if sample is not None else points, allocation, seed=seed, files=files,
                               labelling=(points, how), assessment=sample is not None)
    with published(files.all()):  # the design last: its presence marks a finished sample
        partial(files.gpkg).unlink(missing_ok=True)  # GDAL would add a layer to a GeoPackage left by a killed run
        table.to_file(partial(files.gpkg), driver="GPKG", layer=LAYER)
        table.drop(columns="geometry").to_csv(partial(files.csv), index=False, float_format="%.10g")
        partial(files.design).write_text(json.dumps(design, indent=2) + "\n")
    return design


def read_design(path: Path) -> dict:
    """A design file written by `eoscale sample`."""
    try:
        design = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"design {str(path)!r} is not readable ({err}): it should be the _design.json "
                         "'eoscale sample' wrote") from None
    if not isinstance(design, dict) or design.get("eoscale_sample_design") not in (DESIGN_VERSION, SETS_VERSION):
        raise InputError(f"{str(path)!r} is not a sample design of version {DESIGN_VERSION} or {SETS_VERSION} "
                         "(written by 'eoscale sample')")
    return design
