"""`eoscale synth --heights`: a canopy height COG per scene in the label rasters' CRS and grid, nodata over water,
heights that follow class and context (stand edges lower than stand cores), and no byte of the default set
changed by asking for them."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import rasterio

from eoscale.cli import main
from eoscale.synth.heights import HEIGHT_NODATA
from eoscale.synth.landcover import TREE, WATER

SIZE = 192


def digests(out, skip=()):
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*"))
            if p.is_file() and not any(str(p.relative_to(out)).startswith(s) for s in skip)}


def test_heights_leave_the_default_set_byte_identical(tmp_path):
    assert main(["synth", str(tmp_path / "plain"), "--scenes", "2", "--size", str(SIZE), "--seed", "3"]) == 0
    assert main(["synth", str(tmp_path / "tall"), "--scenes", "2", "--size", str(SIZE), "--seed", "3", "--heights"]) == 0
    plain = digests(tmp_path / "plain", skip=("manifest.json",))
    tall = digests(tmp_path / "tall", skip=("manifest.json", "heights/"))
    assert plain == tall
    manifest = json.loads((tmp_path / "tall" / "manifest.json").read_text())
    assert manifest.pop("heights")["nodata"] == HEIGHT_NODATA
    assert [s.pop("heights") for s in manifest["scenes"]] == ["heights/scene_000_height.tif", "heights/scene_001_height.tif"]
    assert manifest == json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert not (tmp_path / "plain" / "heights").exists()


def test_heights_are_a_float_cog_on_the_label_grid_that_depends_on_context(tmp_path):
    from rio_cogeo.cogeo import cog_validate

    assert main(["synth", str(tmp_path), "--scenes", "1", "--size", "256", "--heights", "--seed", "1"]) == 0
    chm, labels = tmp_path / "heights" / "scene_000_height.tif", tmp_path / "labels" / "scene_000_landcover.tif"
    assert cog_validate(str(chm))[0]
    with rasterio.open(chm) as h, rasterio.open(labels) as lab:
        assert (h.crs, h.transform, h.shape, h.dtypes[0], h.nodata) == (lab.crs, lab.transform, lab.shape, "float32",
                                                                         HEIGHT_NODATA)
        heights, classes = h.read(1), lab.read(1)
        assert h.tags()["units"] == "m"
    assert (heights[classes == WATER] == HEIGHT_NODATA).mean() > 0.7  # nearest labels, averaged heights
    valid = heights != HEIGHT_NODATA
    assert heights[valid].min() >= 0 and heights[valid].max() < 45
    trees = (classes == TREE) & valid
    assert heights[trees].mean() > 8 > np.median(heights[~trees & valid])
    # context: tree pixels at a stand's edge are lower than tree pixels deep inside it, same class and spectrum
    from scipy import ndimage

    depth = ndimage.distance_transform_edt(classes == TREE)
    edge, core = trees & (depth <= 1), trees & (depth >= 4)
    assert core.sum() > 50 and edge.sum() > 50
    assert heights[core].mean() > heights[edge].mean() + 5
