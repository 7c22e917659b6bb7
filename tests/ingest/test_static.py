"""`eoscale ingest --static`: a DEM's elevation, slope and aspect (its sine and cosine) as extra store bands with their
own statistics, on each scene's grid; the scenes' own validity unchanged; a DEM that does not cover a scene or notes
another vertical datum refused in one line, nothing written; Sentinel-1 beside Sentinel-2 one store of both."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import rasterio

from eoscale.cli import main
from eoscale.raster.dem import static_layers, to_store_values
from eoscale.sensors.copdem import STORE_SCALE
from eoscale.store import schema
from eoscale.store.open import open_store
from eoscale.synth import synthesize


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("static") / "set", scenes=2, size=(128, 160), seed=2,
                      sensors=("s2", "s1", "dem"))


def _dems(fused):
    return [str(p.with_suffix(".tif")) for p in fused.dem_items]


def _ingest(out, fused, *extra, scenes=None):
    scenes = scenes or [str(p) for p in fused.scene_paths]
    return main(["ingest", "--scenes", *scenes, "--labels", *map(str, fused.label_paths), "--classes",
                 str(fused.class_table_path), "--output", str(out), "--tile-size", "32", "--workers", "1", "--quiet",
                 *extra])


@pytest.mark.slow  # seconds of CPU: the full suite runs it, the fast tier (≤ 3 min) does not
def test_static_layers_are_bands_with_their_own_statistics(fused, tmp_path):
    assert _ingest(tmp_path / "plain.zarr", fused) == 0
    assert _ingest(tmp_path / "static.zarr", fused, "--static", *_dems(fused)) == 0
    plain, static = open_store(tmp_path / "plain.zarr"), open_store(tmp_path / "static.zarr")
    names = static.attrs[schema.ATTR_BANDS]
    assert names == plain.attrs[schema.ATTR_BANDS] + ["ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"]
    # the scenes' own bands decide which tiles are kept and which pixels hold data: the same store beside the layers
    np.testing.assert_array_equal(static[schema.IMAGES].values[:, :, :10], plain[schema.IMAGES].values)
    np.testing.assert_array_equal(static[schema.LABELS].values, plain[schema.LABELS].values)
    stats = static.attrs[schema.ATTR_STATISTICS]
    assert len(stats["mean"]) == 14 and stats["mean"][:10] == plain.attrs[schema.ATTR_STATISTICS]["mean"]
    # the stored elevation is the DEM's, resampled once onto the first scene's grid (pixels without data aside)
    with rasterio.open(fused.scene_paths[0]) as src:
        grid = {"crs": src.crs, "transform": src.transform, "width": src.width, "height": src.height}
    # and so are slope and aspect, each in its own band and store scale (the statistics checks below held with the
    # sine and cosine swapped)
    layers = static_layers(_dems(fused)[0], **grid).layers
    names = ("ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS")
    expected = [to_store_values(layers[name], *STORE_SCALE[name][:2]) for name in names]
    mine = np.flatnonzero(static[schema.SCENE].values == 0)
    assert len(mine)
    images, t = static[schema.IMAGES].values, static.attrs[schema.ATTR_TILE_SIZE]
    for i in mine:
        r, c = int(static[schema.ROW_OFF].values[i]), int(static[schema.COL_OFF].values[i])
        has_data = images[i, 0, 10] > 0
        for band, want in enumerate(expected, start=10):
            np.testing.assert_array_equal(images[i, 0, band][has_data], want[r:r + t, c:c + t][has_data])
        assert has_data.mean() > 0.5
    assert 0 < stats["mean"][11] * STORE_SCALE["SLOPE"][0] < 45  # slope in degrees
    for band, name in ((12, "ASPECT_SIN"), (13, "ASPECT_COS")):  # the aspect's sine and cosine, within -1…1
        scale, offset, _ = STORE_SCALE[name]
        assert -1 <= stats["min"][band] * scale + offset < stats["max"][band] * scale + offset <= 1
    record = static.attrs[schema.ATTR_INGEST]["static"]
    assert record["layers"] == ["ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"]
    assert record["vertical_datum"].startswith("EGM2008") and record["scales"]["ASPECT_SIN"]["scale"] == 0.0001
    assert [r["role"] for r in static.attrs[schema.ATTR_INPUTS]].count("static") == 2


def test_static_layers_subset_and_resume_fingerprint(fused, tmp_path):
    out = tmp_path / "two.zarr"
    assert _ingest(out, fused, "--static", *_dems(fused), "--static-layers", "slope,elevation") == 0
    assert open_store(out).attrs[schema.ATTR_BANDS][-2:] == ["SLOPE", "ELEVATION"]
    assert not out.with_name("two.zarr.partial").exists()


def test_a_dem_that_does_not_cover_a_scene_is_one_line_and_nothing_written(fused, tmp_path, capsys):
    out = tmp_path / "nope.zarr"
    assert _ingest(out, fused, "--static", _dems(fused)[1]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not cover scene" in err and "gdalbuildvrt" in err and len(err.splitlines()) == 1
    assert not out.exists() and not out.with_name("nope.zarr.partial").exists()


def test_another_vertical_datum_is_refused_unless_named(fused, tmp_path, capsys):
    dem = tmp_path / "evrf.tif"
    shutil.copy(_dems(fused)[0], dem)
    with rasterio.open(dem, "r+", IGNORE_COG_LAYOUT_BREAK="YES") as dst:
        dst.update_tags(VERTICAL_DATUM="EVRF2007")
    scene = [str(fused.scene_paths[0])]
    out = tmp_path / "evrf.zarr"
    assert _ingest(out, fused, "--static", str(dem), scenes=scene) == 2
    err = capsys.readouterr().err.strip()
    assert "EVRF2007" in err and "--dem-datum" in err and len(err.splitlines()) == 1
    assert not out.exists() and not out.with_name("evrf.zarr.partial").exists()
    assert _ingest(out, fused, "--static", str(dem), "--dem-datum", "EVRF2007", scenes=scene) == 0
    assert "--dem-datum" in open_store(out).attrs[schema.ATTR_INGEST]["static"]["vertical_datum"]


def test_unknown_static_layer_is_one_line(fused, tmp_path, capsys):
    assert _ingest(tmp_path / "x.zarr", fused, "--static", *_dems(fused), "--static-layers", "curvature") == 2
    assert "choose among elevation,slope,aspect" in capsys.readouterr().err


def test_radar_beside_optical_scenes_makes_one_store_of_both(fused, tmp_path):
    scenes = [str(fused.scene_paths[0]), str(fused.sar_items[0].parent)]
    assert _ingest(tmp_path / "mixed.zarr", fused, scenes=scenes) == 0  # eoscale.raster.fused: tests/ingest/test_fused
    assert [g["name"] for g in open_store(tmp_path / "mixed.zarr").attrs[schema.ATTR_SENSORS]] == ["sentinel-2",
                                                                                                    "sentinel-1"]
