"""`eoscale mosaic`: maps of two UTM zones (32N and 33N, overlapping at 12°E) become one valid COG with the
inputs' classes and colours, overlaps go to the higher confidence (or the first map), the result does not depend
on the window size, areas are right on the ground, and bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import io
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from pyproj import Proj, Transformer
from rasterio.transform import from_origin
from rio_cogeo.cogeo import cog_validate

from eoscale.classes import ClassTable
from eoscale.cli import main
from eoscale.errors import OutputExistsError
from eoscale.infer.outputs import MapEncoding, map_tags
from eoscale.maps import mosaic as mosaic_module
from eoscale.maps.mosaic import mosaic, read_map
from tests.rasters import CLASSES_CSV, CODES, class_map

TABLE = ClassTable.from_records(list(csv.DictReader(io.StringIO(CLASSES_CSV))))
ENCODING = MapEncoding.from_table(TABLE)
WINDOW = 64  # pixels: every test mosaic spans many windows
LAT = 48.0


def _at(crs: str, lon: float, lat: float = LAT) -> tuple[float, float]:
    return Transformer.from_crs("EPSG:4326", crs, always_xy=True).transform(lon, lat)


def _round(v: float) -> float:
    return round(v / 10) * 10


def write_map(path: Path, crs: str, west: float, north: float, *, height: int, width: int, seed: int,
              confidence: np.ndarray | None = None, table: ClassTable = TABLE) -> None:
    """A map as `eoscale predict` writes one (class codes, tags, colormap), 10 m pixels; with `confidence`,
    `<scene>_confidence.tif` beside it."""
    codes = CODES[class_map(height, width, seed)]
    codes[: height // 6, : width // 5] = ENCODING.nodata
    tags, band_tags = map_tags(table, ENCODING, {"EOSCALE_CHECKPOINT": "/runs/best.ckpt"})
    profile = dict(driver="GTiff", height=height, width=width, count=1, dtype="uint8", crs=crs,
                   transform=from_origin(west, north, 10, 10), tiled=True, blockxsize=64, blockysize=64)
    with rasterio.open(path, "w", nodata=ENCODING.nodata, **profile) as dst:
        dst.write(codes, 1)
        dst.write_colormap(1, ENCODING.colormap(table))
        dst.update_tags(**tags)
        dst.update_tags(1, **band_tags)
    if confidence is not None:
        percent = np.where(codes == ENCODING.nodata, 255, confidence).astype(np.uint8)
        with rasterio.open(path.with_name(path.name.replace("_landcover", "_confidence")), "w", nodata=255,
                           **profile) as dst:
            dst.write(percent, 1)


def write_pair(folder: Path, *, confidence: bool, gap: float | None = None) -> tuple[Path, Path]:
    """Map `a` in UTM 32N ending 300 m east of 12°E and map `b` in 33N starting 300 m west of it (600 m of
    overlap); with `gap`, a ends `gap` m west of 12°E and b starts `gap` m east of it. `a` covers more ground."""
    folder.mkdir(parents=True, exist_ok=True)
    x32, y32 = _at("EPSG:32632", 12.0)
    x33, y33 = _at("EPSG:32633", 12.0)
    rng = np.random.default_rng(0)
    a_east = x32 - gap if gap else x32 + 300
    b_west = x33 + gap if gap else x33 - 300
    a, b = folder / "a_landcover.tif", folder / "b_landcover.tif"
    write_map(a, "EPSG:32632", _round(a_east - 2600), _round(y32 + 1100), height=220, width=260, seed=1,
              confidence=rng.integers(0, 101, (220, 260)) if confidence else None)
    write_map(b, "EPSG:32633", _round(b_west), _round(y33 + 1000), height=200, width=250, seed=2,
              confidence=rng.integers(0, 101, (200, 250)) if confidence else None)
    return a, b


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("maps"), confidence=True)


@pytest.fixture(scope="module")
def made(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("mosaic") / "alps_landcover.tif"
    return mosaic(list(pair), out, window=WINDOW), out


def _exact(path: Path, grid, nodata: int) -> tuple[np.ndarray, np.ndarray]:
    """An oracle independent of GDAL: each mosaic pixel's centre projected exactly (pyproj) into the raster at
    `path`, the value of the pixel it falls in; and where that centre lies within 1/8 pixel of a pixel's edge
    (GDAL's warper approximates the projection to 1/8 of a source pixel, so there either neighbour is right)."""
    with rasterio.open(path) as src:
        data, t, crs = src.read(1), src.transform, src.crs
    cols, rows = np.meshgrid(np.arange(grid.width) + 0.5, np.arange(grid.height) + 0.5)
    g = grid.transform
    x, y = g.c + g.a * cols + g.b * rows, g.f + g.d * cols + g.e * rows
    sx, sy = Transformer.from_crs(grid.crs, crs, always_xy=True).transform(x, y)
    c, r = (sx - t.c) / t.a, (sy - t.f) / t.e
    ci, ri = np.floor(c).astype(np.int64), np.floor(r).astype(np.int64)
    inside = (ci >= 0) & (ci < data.shape[1]) & (ri >= 0) & (ri < data.shape[0])
    values = np.full(c.shape, nodata, dtype=data.dtype)
    values[inside] = data[ri[inside], ci[inside]]
    edge = (np.minimum(c % 1, 1 - c % 1) < 0.125) | (np.minimum(r % 1, 1 - r % 1) < 0.125)
    return values, edge


def _agree(actual: np.ndarray, expected: np.ndarray, edge: np.ndarray) -> None:
    """Equal away from source pixel edges, and at 99.9 % of all pixels."""
    np.testing.assert_array_equal(actual[~edge], expected[~edge])
    assert (actual != expected).mean() < 0.001


def _read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read(1)


def test_mosaic_of_two_utm_zones_is_a_valid_cog_with_the_inputs_classes(made, pair):
    result, out = made
    assert result.windows > 12 and result.overlap == "confidence"
    assert result.outputs.confidence == out.with_name("alps_confidence.tif")
    for path in (out, result.outputs.confidence):
        valid, errors, _ = cog_validate(str(path), quiet=True)
        assert valid, errors
    with rasterio.open(pair[0]) as a, rasterio.open(out) as m:
        assert m.crs == a.crs  # the map covering the most ground
        assert m.res == (10.0, 10.0) and m.transform.c % 10 == 0 and m.transform.f % 10 == 0
        assert m.dtypes[0] == "uint8" and m.nodata == ENCODING.nodata
        assert {k: m.colormap(1)[k] for k in a.colormap(1)} == a.colormap(1)
        tags = m.tags()
        assert json.loads(tags["EOSCALE_CLASSES"]) == json.loads(a.tags()["EOSCALE_CLASSES"])
        assert tags["EOSCALE_NODATA"] == str(ENCODING.nodata)
        assert tags["EOSCALE_CHECKPOINT"] == "/runs/best.ckpt"  # shared by every input: kept
        assert json.loads(tags["EOSCALE_MOSAIC_OF"]) == [str(p.resolve()) for p in pair]
        assert {k: v for k, v in m.tags(1).items() if k.startswith("CLASS_")} == {
            f"CLASS_{c.code}": c.name for c in TABLE.classes}
        assert set(np.unique(m.read(1))) <= {ENCODING.nodata, *CODES.tolist()}
        # the mosaic reaches into both zones: its east edge lies beyond 12°E, its west edge before
        west, east = m.bounds.left, m.bounds.right
    x12, _ = _at("EPSG:32632", 12.0)
    assert west < x12 - 2000 and east > x12 + 2000
    with rasterio.open(result.outputs.confidence) as c:
        assert c.dtypes[0] == "uint8" and c.nodata == 255 and c.shape == (result.grid.height, result.grid.width)


def test_overlaps_go_to_the_higher_confidence(made, pair):
    result, out = made
    grid = result.grid
    nodata = ENCODING.nodata
    (va, ea), (vb, eb) = (_exact(p, grid, nodata) for p in pair)
    ca, cb = (_exact(p.with_name(p.name.replace("_landcover", "_confidence")), grid, 255)[0].astype(np.int16)
              for p in pair)
    ca[ca == 255], cb[cb == 255] = -1, -1
    take_b = (vb != nodata) & ((va == nodata) | (cb > ca))  # ties: the first map
    expected = np.where(take_b, vb, va)
    both = (va != nodata) & (vb != nodata)
    assert both.sum() > 5000 and (take_b & both).any() and (~take_b & both).any()
    _agree(_read(out), expected, ea | eb)
    best = np.where(take_b, cb, ca)
    _agree(_read(result.outputs.confidence), np.where(best >= 0, best, 255), ea | eb)


def test_without_confidence_the_first_map_wins_and_a_warning_says_so(tmp_path, caplog):
    a, b = write_pair(tmp_path / "maps", confidence=False)
    nodata = ENCODING.nodata
    with caplog.at_level(logging.WARNING, logger=mosaic_module.__name__):
        ab = mosaic([a, b], tmp_path / "ab.tif", window=WINDOW)
    assert "first map listed wins" in caplog.text and "no map has a confidence raster" in caplog.text
    ba = mosaic([b, a], tmp_path / "ba.tif", window=WINDOW, crs="EPSG:32632")
    assert ab.overlap == ba.overlap == "order" and ab.outputs.confidence is None
    assert not (tmp_path / "ab_confidence.tif").exists()
    assert ab.grid == ba.grid
    (va, ea), (vb, eb) = (_exact(p, ab.grid, nodata) for p in (a, b))
    _agree(_read(tmp_path / "ab.tif"), np.where(va != nodata, va, vb), ea | eb)
    _agree(_read(tmp_path / "ba.tif"), np.where(vb != nodata, vb, va), ea | eb)
    overlap = (va != nodata) & (vb != nodata) & (va != vb)
    assert overlap.sum() > 1000  # the order decided these


def test_the_window_size_does_not_change_the_mosaic(made, pair, tmp_path, monkeypatch):
    result, out = made
    whole = mosaic(list(pair), tmp_path / "whole.tif", window=4096)
    shapes = []
    real = mosaic_module._warped

    def spy(*args):
        values = real(*args)
        shapes.append(values.shape)
        return values

    monkeypatch.setattr(mosaic_module, "_warped", spy)
    odd = mosaic(list(pair), tmp_path / "odd.tif", window=50)
    assert max(max(s) for s in shapes) <= 50  # nothing larger than a window is ever read
    assert whole.windows == 1 and odd.windows > result.windows
    for other in ("whole", "odd"):
        np.testing.assert_array_equal(_read(tmp_path / f"{other}.tif"), _read(out))
        np.testing.assert_array_equal(_read(tmp_path / f"{other}_confidence.tif"), _read(result.outputs.confidence))
    for r, w in zip(result.areas["classes"], whole.areas["classes"], strict=True):
        assert r["pixels"] == w["pixels"] and r["hectares"] == pytest.approx(w["hectares"], rel=1e-9)


def _ground_hectares(path: Path) -> np.ndarray:
    """A map's hectares per class on the ellipsoid: its grid's 100 m² pixels divided by the UTM zone's areal
    scale at the map's centre (pyproj's projection factors, independent of the equal-area method)."""
    m = read_map(path)
    west, south, east, north = m.bounds
    lon, lat = Transformer.from_crs(m.crs, "EPSG:4326", always_xy=True).transform((west + east) / 2, (south + north) / 2)
    scale = Proj(m.crs.to_wkt()).get_factors(lon, lat).areal_scale
    codes = _read(path)
    return np.array([(codes == c).sum() for c in TABLE.codes]) * 100.0 / scale / 1e4


@pytest.mark.parametrize("crs", ["EPSG:32632", "EPSG:4326"])
def test_areas_of_the_mosaic_equal_the_inputs_areas_on_the_ground(tmp_path, crs):
    a, b = write_pair(tmp_path / "maps", confidence=False, gap=250)
    expected = _ground_hectares(a) + _ground_hectares(b)  # no overlap: the mosaic's areas are the sum
    result = mosaic([a, b], tmp_path / "m_landcover.tif", crs=crs, window=WINDOW)
    if crs == "EPSG:4326":
        assert result.grid.transform.a < 0.001  # degrees: a naive count would be off by orders of magnitude
    got = np.array([r["hectares"] for r in result.areas["classes"]])
    np.testing.assert_allclose(got, expected, rtol=0.002)  # resampling at the class boundaries
    # in total, closer than the grid's own metres would give (UTM's scale error here: 4e-4)
    grid_metres = sum((_read(p) != ENCODING.nodata).sum() for p in (a, b)) * 100.0 / 1e4
    assert abs(grid_metres / expected.sum() - 1) > 3e-4
    assert got.sum() == pytest.approx(expected.sum(), rel=2e-4)
    assert sum(r["percent"] for r in result.areas["classes"]) == pytest.approx(100.0, abs=1e-3)
    rows = list(csv.DictReader((tmp_path / "m_areas.csv").open()))
    assert [int(r["code"]) for r in rows] == TABLE.codes and list(rows[0]) == ["code", "name", "pixels", "hectares",
                                                                               "percent"]
    table = json.loads((tmp_path / "m_areas.json").read_text())
    assert table["area_crs"] == "EPSG:6933" and table["valid_hectares"] == pytest.approx(expected.sum(), rel=0.002)


def test_a_mosaic_of_one_map_is_that_map(pair, tmp_path):
    """Maps in the mosaic's CRS keep their grid: nothing is resampled."""
    result = mosaic([pair[0]], tmp_path / "one.tif", window=WINDOW)
    with rasterio.open(pair[0]) as a, rasterio.open(tmp_path / "one.tif") as m:
        assert (m.crs, m.transform, m.shape) == (a.crs, a.transform, a.shape)
        np.testing.assert_array_equal(m.read(1), a.read(1))
    assert result.overlap == "confidence"
    np.testing.assert_array_equal(_read(tmp_path / "one_confidence.tif"), _read(pair[0].with_name("a_confidence.tif")))


def test_existing_outputs_are_refused_unless_overwrite(made, pair, tmp_path):
    out = tmp_path / "m.tif"
    mosaic(list(pair), out, window=4096)
    before = out.stat().st_mtime_ns
    with pytest.raises(OutputExistsError, match="--overwrite"):
        mosaic(list(pair), out, window=4096)
    assert out.stat().st_mtime_ns == before
    mosaic(list(pair), out, window=4096, overwrite=True)
    assert out.stat().st_mtime_ns != before
    # a file of another tool under one of the mosaic's names is refused too
    (tmp_path / "n_areas.csv").write_text("mine\n")
    with pytest.raises(OutputExistsError, match="n_areas.csv"):
        mosaic(list(pair), tmp_path / "n.tif")
    assert (tmp_path / "n_areas.csv").read_text() == "mine\n" and not (tmp_path / "n.tif").exists()


def test_a_failure_midway_leaves_no_file(pair, tmp_path, monkeypatch):
    calls = []
    real = mosaic_module.compose

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk gone")
        return real(*args, **kwargs)

    monkeypatch.setattr(mosaic_module, "compose", failing)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk gone"):
        mosaic(list(pair), out / "m.tif", window=WINDOW)
    assert list(out.iterdir()) == []  # no map, no hidden .partial file


def test_the_command(pair, tmp_path, capsys):
    code = main(["mosaic", str(pair[1]), str(pair[0]), "--output", str(tmp_path / "m.tif"), "--window", "64"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "mosaic of 2 maps" in captured.out and "EPSG:32632" in captured.out and "ha" in captured.out
    # two CRSs: the one of the map covering the most ground (a, listed second), said in one warning line
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("eoscale mosaic: warning: maps are in 2 CRSs") and "--crs" in line
    assert (tmp_path / "m_confidence.tif").exists() and (tmp_path / "m_areas.json").exists()


def _fails(capsys, args: list[str], *expected: str) -> None:
    code = main(["mosaic", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("eoscale mosaic: error: "), err
    for text in expected:
        assert text in err[0], err[0]


def test_bad_input_is_one_line_exit_2_and_nothing_written(pair, tmp_path, capfd):
    """capfd, not capsys: a line GDAL prints itself (to file descriptor 2) counts too."""
    capsys = capfd
    a, b = pair
    out = tmp_path / "out" / "m.tif"
    _fails(capsys, [str(a), str(tmp_path / "nope_landcover.tif"), "--output", str(out)], "does not exist",
           "nope_landcover.tif")
    plain = tmp_path / "plain.tif"
    shutil.copy(a, plain)
    with rasterio.open(plain, "r+") as dst:
        dst.update_tags(EOSCALE_CLASSES="")
    with rasterio.open(plain) as src:  # GDAL drops an emptied tag
        assert "EOSCALE_CLASSES" not in src.tags()
    _fails(capsys, [str(a), str(plain), "--output", str(out)], "not an eoscale map", "plain.tif")
    text = tmp_path / "notes.tif"
    text.write_text("not a raster")
    _fails(capsys, [str(text), "--output", str(out)], "not a raster", "notes.tif")
    other = ClassTable.from_records([*TABLE.to_records()[:3], {"code": 80, "name": "Water", "color": "#0064c8"}])
    odd = tmp_path / "odd_landcover.tif"
    write_map(odd, "EPSG:32633", 300_000, 5_320_000, height=40, width=40, seed=3, table=other)
    _fails(capsys, [str(a), str(odd), "--output", str(out)], "different class tables", "odd_landcover.tif",
           "class 80 is 'Permanent water bodies' #0064c8 vs 'Water' #0064c8")
    _fails(capsys, [str(a), "--output", str(out), "--crs", "EPSG:99999"], "--crs 'EPSG:99999'", "EPSG:32632")
    far_side = "+proj=ortho +lat_0=-48 +lon_0=-168 +ellps=WGS84"  # the maps lie on the hidden side of the globe
    _fails(capsys, [str(a), str(b), "--output", str(out), "--crs", far_side], "cannot be projected", "--crs")
    _fails(capsys, [str(a), "--output", str(out), "--resolution", "-10"], "--resolution")
    _fails(capsys, [str(a), "--output", str(out), "--crs", "EPSG:4326", "--resolution", "10"],  # metres meant
           "--resolution 10 is", "give it in degree")
    _fails(capsys, [str(a), "--output", str(out), "--resolution", "1e-6"], "coarser --resolution")
    _fails(capsys, [str(a), str(b), "--output", str(a), "--crs", "EPSG:32632"], "is one of the input maps",
           str(a))
    assert not out.parent.exists()
    with pytest.raises(SystemExit) as exit_info:  # no map at all: argparse's own usage error
        main(["mosaic", "--output", str(out)])
    assert exit_info.value.code == 2 and not out.parent.exists()
