"""The files of a sample for labelling, and its design beside them:

    <prefix>.gpkg          the points (layer `sample`), geometry in the map's CRS, the columns below
    <prefix>.csv           id, stratum (map class code), stratum_name, x, y (map CRS, pixel centre),
                           lon, lat (WGS84), row, col (map pixel), reference (empty: to be filled with class codes)
    <prefix>_design.json   the map (path, sha256, size, mtime, CRS, grid, class table), each stratum's pixels,
                           hectares, weight W_h and sample size n_h, the allocation and the seed

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

DESIGN_VERSION = 1
LAYER = "sample"
REFERENCE = "reference"


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


def design_record(cmap: ClassMap, sample: Sample, allocation: Allocation, *, seed: int, files: SampleFiles) -> dict:
    """The design as plain data: enough for `eoscale assess` to weigh the sample without reading the map again."""
    weights = sample.areas.weights
    strata = [
        {"code": c.code, "name": c.name, "pixels": int(sample.areas.pixels[i]),
         "area_ha": float(sample.areas.hectares[i]), "weight": float(weights[i]), "n": int(sample.sizes[i])}
        for i, c in enumerate(cmap.table.classes)
    ]
    return {
        "eoscale_sample_design": DESIGN_VERSION,
        "eoscale_version": __version__,
        "map": {"path": str(cmap.path.resolve()), **file_identity(cmap.path), "crs": cmap.crs.to_string(),
                "transform": list(cmap.transform)[:6], "width": cmap.width, "height": cmap.height,
                "nodata": cmap.nodata},
        "classes": [{"code": c.code, "name": c.name, "color": c.color} for c in cmap.table.classes],
        "crs": cmap.crs.to_string(),  # of the x, y columns (EPSG:… where there is a code, else WKT)
        "allocation": allocation.describe(),
        "n": int(sample.sizes.sum()),
        "seed": seed,
        "total_area_ha": float(sample.areas.hectares.sum()),
        "strata": strata,
        "files": {"gpkg": files.gpkg.name, "csv": files.csv.name},
    }


def write_sample(cmap: ClassMap, sample: Sample, allocation: Allocation, *, seed: int, files: SampleFiles,
                 overwrite: bool) -> dict:
    """Write the three files (see the module docstring); returns the design."""
    files.check(overwrite=overwrite)
    for path in files.all():
        path.parent.mkdir(parents=True, exist_ok=True)
    table = points_table(cmap, sample)
    design = design_record(cmap, sample, allocation, seed=seed, files=files)
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
    if not isinstance(design, dict) or design.get("eoscale_sample_design") != DESIGN_VERSION:
        raise InputError(f"{str(path)!r} is not a sample design of version {DESIGN_VERSION} "
                         "(written by 'eoscale sample')")
    return design
