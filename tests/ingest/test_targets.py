"""`eoscale ingest --targets`: value rasters (any CRS, their own nodata) as per-pixel regression targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
import xarray as xr

from eoscale.ingest import ingest
from eoscale.store import schema
from tests.heights import write_heights
from tests.rasters import CLASSES_CSV, write_labels, write_scene


@pytest.fixture(scope="module")
def heights(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("heights")
    scene = root / "scene0.tif"
    classes = write_scene(scene, height=200, width=230, seed=0)
    write_labels(root / "scene0_lc.tif", scene, classes)
    truth = write_heights(root / "scene0_h.tif", scene)
    np.save(root / "truth.npy", truth)
    (root / "classes.csv").write_text(CLASSES_CSV)
    return root


def _ingest(root: Path, out: Path, **kwargs):
    return ingest([str(root / "scene0.tif")], out, classes=str(root / "classes.csv"), tile_size=32, shard_tiles=8,
                  workers=1, progress=False, **kwargs)


def test_targets_are_stored_as_float_values_beside_the_labels(heights, tmp_path):
    out = tmp_path / "tiles.zarr"
    _ingest(heights, out, labels=[str(heights / "scene0_lc.tif")], targets=[str(heights / "scene0_h.tif")],
            target_name="tree_height", target_units="m")
    ds = xr.open_zarr(out)
    assert ds[schema.TARGETS].dtype == np.float32 and ds[schema.TARGETS].dims == (schema.TILE, schema.Y, schema.X)
    assert ds.attrs[schema.ATTR_TARGET_KIND] == "values" and ds.attrs[schema.ATTR_TARGET_NAME] == "tree_height"
    assert ds.attrs[schema.ATTR_TARGET_UNITS] == "m"
    stats = ds.attrs[schema.ATTR_TARGET_STATISTICS]
    values = ds[schema.TARGETS].values
    images = ds[schema.IMAGES].values[:, 0]
    nodata = (images == 0).all(axis=1)
    assert np.isnan(values[nodata]).all() and np.isfinite(values[~nodata]).mean() > 0.95
    assert stats["mean"] == pytest.approx(float(np.nanmean(values)), rel=1e-4)
    assert stats["valid_pixels"] == int(np.isfinite(values).sum())
    # resampled back from 20 m EPSG:3035 bilinearly: close to the heights on the scene's grid
    truth = np.load(heights / "truth.npy")
    rows, cols = ds[schema.ROW_OFF].values, ds[schema.COL_OFF].values
    errors = [np.nanmean(np.abs(values[i] - truth[r : r + 32, c : c + 32])) for i, (r, c) in enumerate(zip(rows, cols, strict=True))]
    assert np.nanmean(errors) < 3.0
    assert any(r["role"] == "targets" for r in ds.attrs[schema.ATTR_INPUTS])
    # eoscale info shows them: kind, name, units, nodata and statistics
    from eoscale.data.info import describe

    info = describe(str(out))["targets"]
    assert (info["kind"], info["name"], info["units"], info["nodata"]) == ("values", "tree_height", "m", "NaN")
    assert info["statistics"]["valid_pixels"] == stats["valid_pixels"]


def test_a_store_without_targets_has_no_targets_array(heights, tmp_path):
    out = tmp_path / "plain.zarr"
    _ingest(heights, out, labels=[str(heights / "scene0_lc.tif")])
    ds = xr.open_zarr(out)
    assert schema.TARGETS not in ds and schema.ATTR_TARGET_KIND not in ds.attrs
    from eoscale.data.info import describe

    assert describe(str(out))["targets"] is None


def test_a_finer_target_raster_is_averaged(heights, tmp_path):
    from rasterio.enums import Resampling

    from eoscale.ingest.targets import describe_target_rasters, resampling_for
    from eoscale.raster.sources import open_scenes

    fine = tmp_path / "fine.tif"
    write_heights(fine, heights / "scene0.tif", crs="EPSG:32632", resolution=5.0)
    scene = open_scenes([str(heights / "scene0.tif")])[0]
    assert resampling_for(scene, describe_target_rasters([str(fine)])[0]) == Resampling.average
    assert resampling_for(scene, describe_target_rasters([str(heights / "scene0_h.tif")])[0]) == Resampling.bilinear


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eoscale", "ingest", *args], capture_output=True, text=True)


def test_bad_targets_are_refused_in_one_line(heights, tmp_path):
    coloured = tmp_path / "coloured.tif"
    write_heights(coloured, heights / "scene0.tif", colours=True)
    far = tmp_path / "far.tif"
    with rasterio.open(heights / "scene0_h.tif") as src:
        profile, data = src.profile, src.read(1)
    profile["transform"] = rasterio.Affine(20, 0, 100_000, 0, -20, 900_000)
    with rasterio.open(far, "w", **profile) as dst:
        dst.write(data, 1)
    cases = {coloured: "colour table", heights / "classes.csv": "class table", far: "no target raster overlaps"}
    for bad, message in cases.items():
        out = tmp_path / f"{Path(bad).stem}.zarr"
        result = _cli("--scenes", str(heights / "scene0.tif"), "--targets", str(bad), "--output", str(out), "-q",
                      "--tile-size", "32", "--workers", "1")
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not out.exists() and not out.with_name(out.name + ".partial").exists()
