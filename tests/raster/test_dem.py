"""Static layers from a DEM (`eoscale.raster.dem`): slope in metres on a geographic grid, layers resampled once onto a
scene's grid, aspect as its sine and cosine (older stores' degrees still computed), and a DEM on another vertical datum
refused unless the user names it."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.crs import CRS

from eoscale.errors import InputError
from eoscale.raster.dem import (
    aspect_components,
    check_datum,
    pixel_metres,
    slope_aspect,
    static_layers,
    to_store_values,
)
from eoscale.raster.static import parse_layers, static_bands
from eoscale.sensors.copdem import STORE_SCALE
from eoscale.synth import synthesize

GEO = CRS.from_epsg(4326)
AS = 1 / 3600


def _write(path, heights, transform, crs=GEO, **tags):
    with rasterio.open(path, "w", driver="GTiff", width=heights.shape[1], height=heights.shape[0], count=1,
                       dtype="float32", crs=crs, transform=transform, nodata=-32767) as dst:
        dst.write(heights.astype("float32")[None])
        dst.update_tags(**tags)


def test_a_geographic_pixel_is_measured_on_the_ellipsoid():
    width, height = pixel_metres(Affine(1.5 * AS, 0, 6.0, 0, -AS, 51.0 + AS / 2 * 0), GEO, 1)
    # at 51° N: 1″ of latitude is 30.9 m, 1.5″ of longitude 29.2 m
    assert height[0] == pytest.approx(30.9, abs=0.1) and width[0] == pytest.approx(29.2, abs=0.1)


def test_a_tilted_plane_has_its_slope_and_aspect_in_metres():
    transform = Affine(1.5 * AS, 0, 6.0, 0, -AS, 51.0)
    rows, cols = np.mgrid[0:40, 0:40]
    width, height = pixel_metres(transform, GEO, 40)
    heights = 100 + 0.1 * rows * height[:, None]  # rising 10 m per 100 m southward: faces north
    slope, aspect = slope_aspect(heights, transform, GEO)
    assert np.nanmedian(slope) == pytest.approx(np.degrees(np.arctan(0.1)), abs=0.05)
    assert np.nanmedian((aspect + 180) % 360 - 180) == pytest.approx(0, abs=0.5)  # facing north
    east = 100 + 0.2 * cols * width[:, None]  # rising eastward: faces west
    slope, aspect = slope_aspect(east, transform, GEO)
    assert np.nanmedian(slope) == pytest.approx(np.degrees(np.arctan(0.2)), abs=0.1)
    assert np.nanmedian(aspect) == pytest.approx(270, abs=0.5)


def test_layers_are_resampled_onto_a_utm_grid_with_nodata_kept(tmp_path):
    transform = Affine(1.5 * AS, 0, 6.0, 0, -AS, 51.0)
    rows, cols = np.mgrid[0:120, 0:120]
    width, height = pixel_metres(transform, GEO, 120)
    heights = 50 + 0.05 * cols * width[:, None]
    heights[:, 100:] = -32767  # no data in the east
    _write(tmp_path / "dem.tif", heights, transform)
    utm = CRS.from_epsg(32632)
    grid = Affine(10, 0, 290_000, 0, -10, 5_651_500)
    out = static_layers(str(tmp_path / "dem.tif"), crs=utm, transform=grid, width=200, height=200)
    assert set(out.layers) == {"ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS"} and out.datum.startswith("EGM2008")
    slope = out.layers["SLOPE"]
    assert np.nanmedian(slope) == pytest.approx(np.degrees(np.arctan(0.05)), abs=0.1)
    # facing west: sine -1, cosine about 0 (UTM north is a little off true north)
    assert np.nanmedian(out.layers["ASPECT_SIN"]) == pytest.approx(-1, abs=0.01)
    assert np.nanmedian(out.layers["ASPECT_COS"]) == pytest.approx(0, abs=0.06)
    older = static_layers(str(tmp_path / "dem.tif"), crs=utm, transform=grid, width=200, height=200, layers=("ASPECT",))
    assert np.nanmedian(older.layers["ASPECT"]) == pytest.approx(270, abs=3)  # a store from before: degrees
    assert (np.isfinite(older.layers["ASPECT"]) == np.isfinite(out.layers["ASPECT_SIN"])).all()
    assert np.isfinite(out.layers["ELEVATION"]).mean() > 0.5


def test_another_vertical_datum_needs_the_user_to_name_it(tmp_path):
    path = tmp_path / "evrf.tif"
    _write(path, np.full((8, 8), 100.0), Affine(AS, 0, 6, 0, -AS, 51), VERTICAL_DATUM="EVRF2007")
    with pytest.raises(InputError, match="notes vertical datum 'EVRF2007'.*--dem-datum 'EVRF2007'"):
        check_datum(str(path))
    assert check_datum(str(path), accept_datum="evrf2007").startswith("EVRF2007")
    compound = tmp_path / "egm.tif"
    _write(compound, np.full((8, 8), 100.0), Affine(AS, 0, 6, 0, -AS, 51), crs=CRS.from_user_input("EPSG:4326+3855"))
    assert "EGM2008" in check_datum(str(compound)).replace(" ", "")


def test_the_synthetic_dem_gives_layers_under_its_scene(tmp_path):
    result = synthesize(tmp_path / "set", scenes=1, size=96, seed=1, sensors=("s2", "dem"))
    dem = result.dem_items[0].with_suffix(".tif")
    with rasterio.open(result.scene_paths[0]) as src:
        out = static_layers(str(dem), crs=src.crs, transform=src.transform, width=src.width, height=src.height)
    assert all(np.isfinite(v).all() for v in out.layers.values())
    assert 40 < np.mean(out.layers["ELEVATION"]) < 160 and np.max(out.layers["SLOPE"]) < 30
    stored = to_store_values(out.layers["ELEVATION"], 0.1, -1000.0)
    np.testing.assert_allclose(stored * 0.1 - 1000, out.layers["ELEVATION"], atol=0.051)


def _facing(path, degrees: float) -> Affine:
    """A geographic DEM at `path` of a plane that faces `degrees` (clockwise from north), 10 m down per 100 m."""
    transform = Affine(1.5 * AS, 0, 6.0, 0, -AS, 51.0)
    rows, cols = np.mgrid[0:30, 0:30]
    width, height = pixel_metres(transform, GEO, 30)
    east, north = cols * width[:, None], -rows * height[:, None]
    theta = np.radians(degrees)
    _write(path, 500 - 0.1 * (np.sin(theta) * east + np.cos(theta) * north), transform)
    return transform


def test_slopes_facing_359_and_1_degrees_are_neighbours_in_the_stored_aspect(tmp_path):
    # guards issue 46 item 5: aspect was stored as 0-360 degrees, so two slopes facing 359° and 1° (both north) lay at
    # the two ends of the band; as sine and cosine they are 0.035 apart, as the 2° between them
    stored = {}
    for degrees in (359.0, 1.0):
        transform = _facing(tmp_path / f"dem{degrees:g}.tif", degrees)
        grid = transform @ Affine.translation(5, 5)  # inside the DEM: no edge
        layers = static_layers(str(tmp_path / f"dem{degrees:g}.tif"), crs=GEO, transform=grid, width=20, height=20,
                               layers=("ASPECT_SIN", "ASPECT_COS", "ASPECT")).layers
        stored[degrees] = np.array([np.median(to_store_values(layers[n], *STORE_SCALE[n][:2]) * STORE_SCALE[n][0]
                                              + STORE_SCALE[n][1]) for n in ("ASPECT_SIN", "ASPECT_COS")])
        assert np.median(layers["ASPECT"]) == pytest.approx(degrees, abs=0.1)  # the older band, as it was
    assert np.hypot(*(stored[359.0] - stored[1.0])) == pytest.approx(2 * np.sin(np.radians(1)), abs=0.002)
    assert stored[1.0] == pytest.approx([np.sin(np.radians(1)), np.cos(np.radians(1))], abs=0.001)


def test_flat_ground_faces_nowhere():
    slope = np.array([0.0, 5.0, np.nan], np.float32)
    sin, cos = aspect_components(slope, np.array([180.0, 90.0, np.nan], np.float32))
    assert sin[:2].tolist() == [0.0, 1.0] and cos[0] == 0 and abs(cos[1]) < 1e-6 and np.isnan([sin[2], cos[2]]).all()


def test_static_layer_names_take_aspect_as_its_sine_and_cosine():
    assert parse_layers("slope,aspect") == ("SLOPE", "ASPECT_SIN", "ASPECT_COS")
    assert parse_layers(None) == ("ELEVATION", "SLOPE", "ASPECT_SIN", "ASPECT_COS")
    assert static_bands(["B02", "ELEVATION", "ASPECT"]) == ["ELEVATION", "ASPECT"]  # an older store's degrees
    with pytest.raises(InputError, match="choose among elevation,slope,aspect"):
        parse_layers("curvature")
