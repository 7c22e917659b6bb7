"""Land-cover class tables: source codes, contiguous class indices, names and colours.

A class table maps the codes of a land-cover product (ESA WorldCover: 10 tree cover, 20 shrubland, …) to
contiguous indices 0..C-1 that models train on; codes not in the table map to `IGNORE_INDEX`.
Files are CSV (`code,name,color`, colour as `#rrggbb`) or JSON (a list of such objects). The colour is optional (a
table without a `color` column, or a row with an empty one): such a class takes the colour of its position in a
default palette (`default_colour`: matplotlib's tab20, then hues spread by the golden ratio), as QGIS gives classes
colours of its own, so the same table gives the same colours in the store, the checkpoint and every map.
"""

from __future__ import annotations

import colorsys
import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from eoscale.errors import InputError, InputNotFoundError

IGNORE_INDEX = 255  # label value for nodata and unmapped codes; uint8 labels leave 0..254 for classes
# matplotlib's "tab20" (Vega's category20): 20 colours that tell classes apart, the default palette's first ones
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
         "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5")


def default_colour(index: int) -> str:
    """The colour of the class at `index` of a table that states none: tab20's, then hues spread by the golden ratio."""
    if index < len(TAB20):
        return TAB20[index]
    r, g, b = colorsys.hsv_to_rgb((index * 0.618034) % 1.0, 0.75 if index % 2 else 0.55, 0.9 if index % 3 else 0.7)
    return "#" + "".join(f"{round(255 * v):02x}" for v in (r, g, b))


@dataclass(frozen=True)
class LandCoverClass:
    code: int
    name: str
    color: str  # '#rrggbb'

    @property
    def rgb(self) -> tuple[int, int, int]:
        return tuple(int(self.color[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


@dataclass(frozen=True)
class ClassTable:
    """An ordered list of classes; a class's position is its training index."""

    classes: tuple[LandCoverClass, ...]

    def __post_init__(self) -> None:
        codes = [c.code for c in self.classes]
        if not self.classes:
            raise InputError("class table is empty: give at least one 'code,name[,color]' row")
        if len(set(codes)) != len(codes):
            raise InputError(f"class table has repeated codes: {sorted(codes)}")
        if len(self.classes) >= IGNORE_INDEX:
            raise InputError(f"class table has {len(self.classes)} classes: at most {IGNORE_INDEX - 1} fit")
        for c in self.classes:
            if not (len(c.color) == 7 and c.color.startswith("#")):
                raise InputError(f"class {c.code} ({c.name}): colour {c.color!r} is not '#rrggbb'")

    def __len__(self) -> int:
        return len(self.classes)

    @property
    def codes(self) -> list[int]:
        return [c.code for c in self.classes]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.classes]

    def lookup_table(self, max_code: int = 65535) -> np.ndarray:
        """A uint8 array `lut` with `lut[code] = index` and `IGNORE_INDEX` for codes not in the table."""
        lut = np.full(max_code + 1, IGNORE_INDEX, dtype=np.uint8)
        for index, c in enumerate(self.classes):
            if 0 <= c.code <= max_code:
                lut[c.code] = index
        return lut

    def to_records(self) -> list[dict]:
        return [{"index": i, **asdict(c)} for i, c in enumerate(self.classes)]

    @classmethod
    def from_records(cls, records: list[dict]) -> ClassTable:
        """A table from `{code, name, color}` records; a record without a colour (or an empty one) takes its position's
        `default_colour`."""
        return cls(tuple(LandCoverClass(int(r["code"]), str(r["name"]),
                                        str(r.get("color") or "").strip().lower() or default_colour(i))
                         for i, r in enumerate(records)))

    def save(self, path: str | Path) -> None:
        path = Path(path)
        if path.suffix.lower() == ".json":
            path.write_text(json.dumps([asdict(c) for c in self.classes], indent=2) + "\n")
            return
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["code", "name", "color"])
            for c in self.classes:
                writer.writerow([c.code, c.name, c.color])

    @classmethod
    def load(cls, path: str | Path) -> ClassTable:
        """Read a class table from CSV (`code,name[,color]`) or JSON."""
        path = Path(path)
        if not path.is_file():
            raise InputNotFoundError(f"class table {str(path)!r} does not exist")
        try:
            if path.suffix.lower() == ".json":
                records = json.loads(path.read_text())
            else:
                with path.open(newline="") as f:
                    records = list(csv.DictReader(f))
            return cls.from_records(records)
        except (KeyError, ValueError, TypeError, json.JSONDecodeError) as err:
            if isinstance(err, InputError):
                raise
            raise InputError(
                f"class table {str(path)!r} is not readable ({err}): expected CSV with columns code,name and optionally color"
            ) from None


# ESA WorldCover 10 m v200 legend (codes and the product's own colours).
WORLDCOVER = ClassTable(
    (
        LandCoverClass(10, "Tree cover", "#006400"),
        LandCoverClass(20, "Shrubland", "#ffbb22"),
        LandCoverClass(30, "Grassland", "#ffff4c"),
        LandCoverClass(40, "Cropland", "#f096ff"),
        LandCoverClass(50, "Built-up", "#fa0000"),
        LandCoverClass(60, "Bare / sparse vegetation", "#b4b4b4"),
        LandCoverClass(70, "Snow and ice", "#f0f0f0"),
        LandCoverClass(80, "Permanent water bodies", "#0064c8"),
        LandCoverClass(90, "Herbaceous wetland", "#0096a0"),
        LandCoverClass(95, "Mangroves", "#00cf75"),
        LandCoverClass(100, "Moss and lichen", "#fae6a0"),
    )
)
