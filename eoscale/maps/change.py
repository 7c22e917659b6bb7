"""Post-classification change: two land-cover maps of one place → a from–to change map, one code per transition.

    change(Path("maps/2018_landcover.tif"), Path("maps/2024_landcover.tif"), Path("change/2018-2024"))

writes, in the output folder:

    change.tif               COG of transition codes (the change map's class table in its EOSCALE_CLASSES tag,
                             EOSCALE_TARGET=change, the transitions in EOSCALE_TRANSITIONS), a colour per
                             transition (unchanged: the from-class's colour, greyed; changes: saturated colours),
                             nodata where either map has none or map B does not reach
    transitions.csv/.json    pixels, hectares and percent of the valid area of each transition present
    change_quicklook.png     the change map with a legend of its largest transitions

Codes: with C classes in the maps' class table (indices i, j in table order), the transition i → j has code
`i·C + j + 1` (0 is nodata), the same for every pair of maps of that table, so change maps of one legend compare.
The change map's class table lists all C² transitions when they fit a uint8 map (C ≤ 15; a reference sample may
then name any transition, one the map missed included); for larger tables only the transitions present. Because
the change map carries a class table, `eoscale sample` stratifies on its transitions and `eoscale assess` gives
error-adjusted change areas with 95 % CIs unchanged (Olofsson et al. 2014).

Grid: map A's, cropped to where the two maps overlap; map B is put on it by nearest neighbour (codes are not
averaged) through a `WarpedVRT`, `WINDOW` × `WINDOW` pixels at a time, so memory does not grow with the maps.
Areas follow `eoscale.raster.pixel_area` (constant in a projected CRS, per row in a geographic one), the rule of
`predict`'s areas and of `sample`'s strata. Every check runs before anything is written; files are written under
hidden `.partial` names and renamed at the end, the change map last.
"""

from __future__ import annotations

import colorsys
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.vrt import WarpedVRT
from rasterio.warp import transform_bounds
from rasterio.windows import Window

from eoscale.classes import IGNORE_INDEX, ClassTable, LandCoverClass
from eoscale.contract import DEFAULT_TARGET, TARGET_TAG
from eoscale.errors import InputError, OutputExistsError
from eoscale.maps.classmap import class_index
from eoscale.maps.mosaic import BLOCKSIZE, Grid, MapInput, crs_label, read_map, to_cog
from eoscale.maps.publish import partial, published
from eoscale.raster.pixel_area import M2_PER_HECTARE, pixel_area_m2, row_areas_m2

WINDOW = 1024  # output pixels a side made at a time
NODATA = 0
TRANSITIONS_TAG = "EOSCALE_TRANSITIONS"
MAX_CLASSES = 254  # a class table's limit (eoscale.classes): the change map's transitions must fit it
QUICKLOOK_PIXELS = 1000
LEGEND_ENTRIES = 24


@dataclass(frozen=True)
class Transition:
    code: int
    source: LandCoverClass  # the class in map A
    target: LandCoverClass  # the class in map B

    @property
    def changed(self) -> bool:
        return self.source.code != self.target.code

    @property
    def name(self) -> str:
        return f"{self.source.name} → {self.target.name}" if self.changed else f"{self.source.name} (unchanged)"


def transitions(table: ClassTable) -> list[Transition]:
    """Every transition of the class table, in code order (`i·C + j + 1`)."""
    classes = table.classes
    return [Transition(i * len(classes) + j + 1, a, b) for i, a in enumerate(classes) for j, b in enumerate(classes)]


def muted(color: str) -> str:
    """A class colour greyed (unchanged pixels recede, changes stand out)."""
    r, g, b = (int(color[k: k + 2], 16) for k in (1, 3, 5))
    grey = 200
    return "#" + "".join(f"{round(0.3 * v + 0.7 * grey):02x}" for v in (r, g, b))


def change_colours(count: int) -> list[str]:
    """`count` saturated colours, hues spread by the golden ratio so neighbours in the list differ."""
    out = []
    for k in range(count):
        r, g, b = colorsys.hsv_to_rgb((0.02 + k * 0.618034) % 1.0, 0.9 if k % 2 == 0 else 0.7, 0.95 if k % 3 else 0.8)
        out.append("#" + "".join(f"{round(255 * v):02x}" for v in (r, g, b)))
    return out


def change_table(table: ClassTable, present: set[int] | None = None) -> tuple[ClassTable, list[Transition]]:
    """The change map's class table and the transitions it lists: all of them when C² fits a uint8 map, else those
    in `present` (codes)."""
    every = transitions(table)
    listed = every if len(every) <= MAX_CLASSES else [t for t in every if present is None or t.code in present]
    if len(listed) > MAX_CLASSES:
        raise InputError(f"the maps hold {len(listed)} different transitions: a change map's class table holds at most "
                         f"{MAX_CLASSES}; merge classes of the maps first")
    colours = iter(change_colours(sum(t.changed for t in listed)))
    records = [LandCoverClass(t.code, t.name, next(colours) if t.changed else muted(t.source.color)) for t in listed]
    return ClassTable(tuple(records)), listed


# -- the inputs ----------------------------------------------------------------------------------------------------
def read_land_cover(path: str | Path) -> MapInput:
    """An eoscale class map (not a change map: the change of change is no land cover)."""
    m = read_map(path)
    target = m.tags.get(TARGET_TAG) or DEFAULT_TARGET
    if target != "classes":
        raise InputError(f"map {str(m.path)!r} holds {target!r}, not classes: eoscale change compares two land-cover "
                         "maps")
    return m


def check_pair(a: MapInput, b: MapInput) -> None:
    if a.table == b.table:
        return
    if a.table.codes != b.table.codes:
        difference = f"codes {a.table.codes} vs {b.table.codes}"
    else:
        x, y = next((x, y) for x, y in zip(a.table.classes, b.table.classes, strict=True) if x != y)
        difference = f"class {x.code} is {x.name!r} {x.color} vs {y.name!r} {y.color}"
    raise InputError(f"maps {str(a.path)!r} and {str(b.path)!r} have different class tables ({difference}): change "
                     "is measured between maps of one class table")


def common_grid(a: MapInput, b: MapInput) -> tuple[Grid, Window]:
    """Map A's grid cropped to the overlap of the two maps, and where that lies in map A; an `InputError` when
    the maps do not overlap."""
    try:
        left, bottom, right, top = b.bounds if b.crs == a.crs else transform_bounds(b.crs, a.crs, *b.bounds,
                                                                                     densify_pts=21)
    except Exception:
        left = bottom = right = top = float("nan")
    if not all(math.isfinite(v) for v in (left, bottom, right, top)):
        left = bottom = right = top = float("nan")
    inverse = ~a.transform
    cols, rows = zip(*(inverse @ (x, y) for x, y in ((left, top), (right, top), (left, bottom), (right, bottom))),
                     strict=True)
    col0 = max(0, math.floor(min(cols) + 1e-9)) if math.isfinite(min(cols)) else 0
    col1 = min(a.width, math.ceil(max(cols) - 1e-9)) if math.isfinite(max(cols)) else 0
    row0 = max(0, math.floor(min(rows) + 1e-9)) if math.isfinite(min(rows)) else 0
    row1 = min(a.height, math.ceil(max(rows) - 1e-9)) if math.isfinite(max(rows)) else 0
    if col1 <= col0 or row1 <= row0:
        raise InputError(f"maps {str(a.path)!r} ({crs_label(a.crs)}) and {str(b.path)!r} ({crs_label(b.crs)}) do not "
                         "overlap: give two maps of one place")
    window = Window(col0, row0, col1 - col0, row1 - row0)
    return Grid(a.crs, rasterio.windows.transform(window, a.transform), col1 - col0, row1 - row0), window


# -- the outputs ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChangeOutputs:
    change: Path
    csv: Path
    json: Path
    quicklook: Path

    @classmethod
    def in_folder(cls, folder: Path) -> ChangeOutputs:
        return cls(folder / "change.tif", folder / "transitions.csv", folder / "transitions.json",
                   folder / "change_quicklook.png")

    def files(self) -> list[Path]:
        """All files, the change map last (its presence marks the result as finished)."""
        return [self.csv, self.json, self.quicklook, self.change]

    def check(self, inputs: list[MapInput], *, overwrite: bool) -> None:
        given = {m.path.resolve() for m in inputs}
        for path in self.files():
            if path.resolve() in given:
                raise InputError(f"output {str(path)!r} is one of the input maps: choose another --output")
            if path.exists() and not overwrite:
                raise OutputExistsError(f"{str(path)!r} exists: pass --overwrite to replace it")


@dataclass(frozen=True)
class ChangeResult:
    outputs: ChangeOutputs
    grid: Grid
    table: dict  # what transitions.json holds


def change(map_a: str | Path, map_b: str | Path, output: str | Path, *, overwrite: bool = False,
           window: int = WINDOW) -> ChangeResult:
    """The change from `map_a` to `map_b` in the folder `output` (see the module's docstring)."""
    if window < 1:
        raise InputError(f"window {window} is not a positive number of pixels")
    a, b = read_land_cover(map_a), read_land_cover(map_b)
    check_pair(a, b)
    grid, in_a = common_grid(a, b)
    outputs = ChangeOutputs.in_folder(Path(output))
    outputs.check([a, b], overwrite=overwrite)

    every = transitions(a.table)
    classes = len(a.table)
    dtype = "uint8" if len(every) < 255 else "uint16"
    pixels = np.zeros(len(every) + 1, dtype=np.int64)
    area_m2 = np.zeros(len(every) + 1, dtype=np.float64)
    constant = pixel_area_m2(grid.crs, grid.transform)
    lut = a.table.lookup_table()
    outputs.change.parent.mkdir(parents=True, exist_ok=True)
    staging = partial(outputs.change).with_name(partial(outputs.change).name + ".tiled.tif")
    profile = dict(driver="GTiff", width=grid.width, height=grid.height, count=1, dtype=dtype, nodata=NODATA,
                   crs=grid.crs, transform=grid.transform, tiled=True, blockxsize=BLOCKSIZE, blockysize=BLOCKSIZE,
                   BIGTIFF="IF_SAFER")  # uncompressed: read once, right away, by the COG driver
    try:
        with published(outputs.files()):
            with rasterio.open(a.path) as src_a, rasterio.open(b.path) as src_b, \
                    WarpedVRT(src_b, crs=grid.crs, transform=grid.transform, width=grid.width, height=grid.height,
                              resampling=Resampling.nearest, src_nodata=b.nodata, nodata=b.nodata) as vrt_b, \
                    rasterio.open(staging, "w", **profile) as out:
                for w in grid.windows(window):
                    values_a = src_a.read(1, window=Window(in_a.col_off + w.col_off, in_a.row_off + w.row_off,
                                                           w.width, w.height))
                    values_b = vrt_b.read(1, window=w)
                    codes = transition_codes(a, values_a, b, values_b, lut, classes).astype(dtype)
                    out.write(codes, 1, window=w)
                    rows = np.arange(w.row_off, w.row_off + w.height)
                    per_row = np.full(len(rows), constant) if constant is not None else \
                        row_areas_m2(grid.crs, grid.transform, rows)
                    flat = codes.ravel().astype(np.int64)
                    pixels += np.bincount(flat, minlength=len(pixels))
                    area_m2 += np.bincount(flat, weights=np.repeat(per_row, w.width), minlength=len(pixels))
                present = {int(c) for c in np.flatnonzero(pixels[1:]) + 1}
                table, listed = change_table(a.table, present)
                summary = transition_summary(a, b, grid, every, pixels, area_m2)
                out.write_colormap(1, {**{c.code: (*c.rgb, 255) for c in table.classes}, NODATA: (0, 0, 0, 0)})
                out.update_tags(**change_tags(a, b, table, listed), OVERVIEW_RESAMPLING="MODE")
                out.update_tags(1, **{f"CLASS_{c.code}": c.name for c in table.classes})
                out.set_band_description(1, "land-cover transition code (map A class → map B class)")
            to_cog(staging, partial(outputs.change), "MODE")  # mode overviews: a transition is not averaged
            write_tables(summary, partial(outputs.csv), partial(outputs.json))
            write_quicklook(partial(outputs.change), partial(outputs.quicklook), table, summary)
    finally:
        staging.unlink(missing_ok=True)
    return ChangeResult(outputs, grid, summary)


def transition_codes(a: MapInput, values_a: np.ndarray, b: MapInput, values_b: np.ndarray, lut: np.ndarray,
                     classes: int) -> np.ndarray:
    """Transition codes of a window (`NODATA` where either map has none); values outside the class table refused."""
    index_a = class_index(values_a, lut)
    index_b = class_index(values_b, lut)
    for m, values, index in ((a, values_a, index_a), (b, values_b, index_b)):
        stray = (index == IGNORE_INDEX) & (values != m.nodata)
        if stray.any():
            found = sorted({int(v) for v in np.unique(values[stray])[:10]})
            raise InputError(f"map {str(m.path)!r} holds values {found} that are neither in its class table "
                             f"{m.table.codes} nor its nodata {m.nodata}: rewrite it with 'eoscale predict'")
    valid = (index_a != IGNORE_INDEX) & (index_b != IGNORE_INDEX)
    return np.where(valid, index_a.astype(np.int64) * classes + index_b + 1, NODATA)


def change_tags(a: MapInput, b: MapInput, table: ClassTable, listed: list[Transition]) -> dict[str, str]:
    return {"EOSCALE_CLASSES": json.dumps([{"code": c.code, "name": c.name, "color": c.color} for c in table.classes]),
            "EOSCALE_NODATA": str(NODATA), TARGET_TAG: "change",
            TRANSITIONS_TAG: json.dumps([{"code": t.code, "from": t.source.code, "to": t.target.code} for t in listed]),
            "EOSCALE_CHANGE_FROM": str(a.path.resolve()), "EOSCALE_CHANGE_TO": str(b.path.resolve())}


def transition_summary(a: MapInput, b: MapInput, grid: Grid, every: list[Transition], pixels: np.ndarray,
                       area_m2: np.ndarray) -> dict:
    """The transitions present with their pixels, hectares and share of the valid area (both maps have a class)."""
    valid_ha = float(area_m2[1:].sum()) / M2_PER_HECTARE
    rows = []
    for t in every:
        if pixels[t.code] == 0:
            continue
        hectares = float(area_m2[t.code]) / M2_PER_HECTARE
        rows.append({"code": t.code, "from_code": t.source.code, "from_name": t.source.name,
                     "to_code": t.target.code, "to_name": t.target.name, "changed": t.changed,
                     "pixels": int(pixels[t.code]), "hectares": hectares,
                     "percent": 100 * hectares / valid_ha if valid_ha else 0.0})
    return {"map_a": str(a.path), "map_b": str(b.path), "crs": grid.crs.to_string(), "width": grid.width,
            "height": grid.height, "transform": list(grid.transform)[:6], "valid_pixels": int(pixels[1:].sum()),
            "valid_hectares": valid_ha, "changed_hectares": sum(r["hectares"] for r in rows if r["changed"]),
            "transitions": rows}


def write_tables(summary: dict, csv_path: Path, json_path: Path) -> None:
    import csv

    columns = ("code", "from_code", "from_name", "to_code", "to_name", "changed", "pixels", "hectares", "percent")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in summary["transitions"]:
            writer.writerow({**r, "hectares": f"{r['hectares']:.4f}", "percent": f"{r['percent']:.4f}"})
    json_path.write_text(json.dumps(summary, indent=2) + "\n")


def write_quicklook(change_map: Path, png: Path, table: ClassTable, summary: dict) -> None:
    """A PNG of the change map (read from its overviews) with the largest transitions, changes first, in the legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    with rasterio.open(change_map) as src:
        factor = max(1, int(np.ceil(max(src.width, src.height) / QUICKLOOK_PIXELS)))
        shape = (max(1, src.height // factor), max(1, src.width // factor))
        values = src.read(1, out_shape=shape, resampling=Resampling.mode).astype(np.int64)
    lookup = np.full(max(table.codes) + 1, -1, dtype=np.int64)
    lookup[table.codes] = np.arange(len(table))
    index = np.where((values > 0) & (values < len(lookup)), lookup[np.clip(values, 0, len(lookup) - 1)], -1)
    figure = Figure(figsize=(10, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.02, 0.05, 0.56, 0.88))
    axes.imshow(np.ma.masked_less(index, 0), cmap=ListedColormap([c.color for c in table.classes]),
                vmin=-0.5, vmax=len(table) - 0.5, interpolation="nearest")
    axes.set_axis_off()
    axes.set_title(f"{Path(summary['map_a']).name} → {Path(summary['map_b']).name}", fontsize=9)
    colour = {c.code: c.color for c in table.classes}
    shown = sorted(summary["transitions"], key=lambda r: (not r["changed"], -r["hectares"]))[:LEGEND_ENTRIES]
    handles = [Patch(facecolor=colour[r["code"]], edgecolor="black", linewidth=0.3,
                     label=f"{r['from_name']} → {r['to_name']}" if r["changed"] else f"{r['from_name']} (unchanged)")
               for r in shown]
    labels = [f"{h.get_label()} ({r['hectares']:.0f} ha)" for h, r in zip(handles, shown, strict=True)]
    figure.legend(handles=handles, labels=labels, loc="center left", bbox_to_anchor=(0.6, 0.5), fontsize=7,
                  frameon=False, title=f"{summary['changed_hectares']:.0f} of {summary['valid_hectares']:.0f} ha "
                                       "changed", title_fontsize=8)
    figure.savefig(png, format="png")
