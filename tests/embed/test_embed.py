"""Embedding fields end to end: `eoscale embed` (predict's engine, the int8 field writer), reading fields back (an
eoscale field, a Satellite-Embedding-shaped file), the few-shot head, similarity and change between fields.

Each test names the defect it guards. The scene is `tests.rasters`' (four blocky classes visible in the bands), the
checkpoint an untrained one of `tests.checkpoints` (seeded): its decoder features are a fixed random function of the
bands, so the figures below are the same on every machine and say what the field keeps, not what a model learnt.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from eoscale.cli import main
from eoscale.errors import InputError
from eoscale.sensors.embedding import NODATA, band_names, dequantise, quantise
from tests.checkpoints import make_checkpoint
from tests.rasters import CODES, write_scene

HEIGHT, WIDTH = 101, 147
NODATA_BOX = (slice(40, 60), slice(0, 30))


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.normal(size=(n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("dimensions", [8, 64, 128])
def test_int8_vectors_keep_cosine_099_with_the_float_ones(dimensions):
    # guards the quantisation: a linear or truncating scale, or a lost sign, would turn vectors away from their float ones
    v = _unit(np.random.default_rng(dimensions), 20_000, dimensions)
    back, valid = dequantise(quantise(v, axis=1), axis=1)
    assert valid.all()
    assert _cosine(back, v).min() >= 0.99


def test_the_dequantisation_is_the_satellite_embeddings():
    # guards the formula against Google's published one, (v/127.5)^2 * sign(v), and nodata -128
    q = np.array([[127, -64, 0, 1], [5, -128, 3, 3]], dtype=np.int8)
    v, valid = dequantise(q, axis=1)
    assert v[0].tolist() == pytest.approx([(127 / 127.5) ** 2, -((64 / 127.5) ** 2), 0.0, (1 / 127.5) ** 2])
    assert valid.tolist() == [True, False] and np.isnan(v[1]).all()
    assert quantise(np.array([[1.0, -0.25, np.nan]]), axis=1).tolist() == [[NODATA, NODATA, NODATA]]
    assert quantise(np.array([[1.0, -0.25, 0.0]]), axis=1).tolist() == [[127, -64, 0]]


def test_the_writers_quantisation_is_the_reference_one_bit_for_bit():
    # guards the field writer's fast quantisation (eoscale.infer.outputs.embedding) against drifting from the
    # reference formula it stands in for (eoscale.sensors.embedding.quantise): a different rounding (half away from
    # zero, truncation), a lost sign of -0 or a missed non-finite vector or nodata pixel would change bytes here
    from eoscale.infer.outputs.embedding import normalise_, quantise_unit

    v = _unit(np.random.default_rng(11), 40 * 30, 16).reshape(40, 30, 16)
    halves = (np.arange(-255, 256, dtype=np.float32) / 2) / 127.5  # sqrt(|v|)*127.5 exactly on .5: ties
    v[0] = 0.0
    v[20:37, :, 0] = (np.sign(halves) * halves**2)[:510].reshape(17, 30)
    v[1, 0, 3], v[1, 1, 4], v[1, 2, :] = np.nan, np.inf, -0.0
    valid = np.ones((40, 30), dtype=bool)
    valid[5:9, 10:20] = False
    expected = quantise(np.where(valid[..., None], v, np.nan), axis=-1)
    planes = np.moveaxis(v, -1, 0).copy()
    finite = np.isfinite(planes).all(axis=0)
    got = quantise_unit(planes, finite & valid)
    assert np.array_equal(np.moveaxis(got, 0, -1), expected)
    assert (expected[1, :2] == NODATA).all() and (expected[5:9, 10:20] == NODATA).all()
    # normalising: unit length along the dimensions, a zero vector stays zero, a non-finite one is flagged
    planes = 3 * np.moveaxis(v, -1, 0).copy()
    assert np.array_equal(normalise_(planes), finite)
    assert np.abs(np.linalg.norm(planes[:, 10:, :], axis=0) - 1).max() < 1e-6 and (planes[:, 0] == 0).all()


def test_the_part_writer_runs_no_torch_kernel():
    # guards the embedding part writer against torch kernels: it runs in a thread beside the forward passes, and a
    # torch kernel there starts a second team of OpenMP threads on the cores the forward's team is using
    import torch

    from eoscale.infer.outputs.embedding import EmbeddingPart
    from eoscale.infer.predict import Block

    probs = torch.from_numpy(np.moveaxis(_unit(np.random.default_rng(3), 6 * 9, 8).reshape(6, 9, 8), -1, 0).copy())
    part = EmbeddingPart(Path(tempfile.mkdtemp()) / "part", float_field=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        part.write(Block(0, 0, probs, np.ones((6, 9), dtype=bool)))
    part.abort()
    views = {"aten::detach", "detach", "aten::to", "aten::resolve_conj", "aten::resolve_neg"}  # .numpy(): no kernel
    assert [e.name for e in profile.events() if e.name.startswith("aten::") and e.name not in views] == []


@pytest.mark.parametrize("shape", [(101, 147), (256, 257), (257, 300), (777, 1000), (1025, 100)])
def test_the_field_gets_the_overview_levels_of_gdals_cog_driver(tmp_path, shape):
    # guards the overviews the field writer builds before the COG copy: as many levels as the COG driver would make
    # itself (a ceil-halving rule gives (1025, 100) three levels, the driver two), none for a field of one block
    from rasterio import shutil as rio_shutil

    from eoscale.infer.outputs.field_cog import overview_factors

    height, width = shape
    with rasterio.open(tmp_path / "flat.tif", "w", driver="GTiff", height=height, width=width, count=1, dtype="int8",
                       crs="EPSG:32633", transform=from_origin(0, 0, 10, 10)) as dst:
        dst.write(np.zeros((1, height, width), dtype=np.int8))
    rio_shutil.copy(tmp_path / "flat.tif", tmp_path / "cog.tif", driver="COG", BLOCKSIZE=256)
    with rasterio.open(tmp_path / "cog.tif") as src:
        assert overview_factors(height, width) == src.overviews(1)


def test_the_field_is_zstd_where_gdal_writes_it_and_deflate_where_it_does_not(tmp_path, monkeypatch):
    # guards the field's codec: ZSTD (faster, smaller) only where this GDAL writes it, else deflate, which every TIFF
    # reader reads; a probe that took GDAL's "unknown codec" warning for a yes would write uncompressed fields
    from affine import Affine
    from rasterio.crs import CRS

    from eoscale.infer.outputs import embedding
    from eoscale.infer.outputs.base import MapContext
    from eoscale.infer.outputs.rasters import Georef, Piece

    assert embedding.gdal_writes("DEFLATE") and not embedding.gdal_writes("NO_SUCH_CODEC")
    field = np.random.default_rng(4).integers(-127, 128, (40, 30, 3), dtype=np.int8)
    (tmp_path / "part.int8").write_bytes(field.tobytes())
    context = MapContext(Georef(CRS.from_epsg(32633), Affine(10, 0, 0, 0, -10, 0), 30, 40), {}, {}, "x", "t")
    for has_zstd, codec in ((embedding.gdal_writes("ZSTD"), "zstd"), (False, "deflate")):
        if has_zstd is False and codec == "zstd":
            continue  # a GDAL without ZSTD: only the fallback can be checked
        monkeypatch.setattr(embedding, "gdal_writes", lambda name, has=has_zstd: has if name == "ZSTD" else True)
        embedding.write_field_cog([Piece(tmp_path / "part", 0, 0, 40, 30)], ".int8", tmp_path / f"{codec}.tif",
                                  context, dtype="int8", dimensions=3, nodata=NODATA, tags={})
        with rasterio.open(tmp_path / f"{codec}.tif") as src:
            assert src.compression.name == codec and src.tags(ns="IMAGE_STRUCTURE").get("PREDICTOR") == "2"
            assert np.array_equal(np.moveaxis(src.read(), 0, -1), field)


def test_the_fields_overviews_are_nearest_vectors_of_the_field(tmp_path):
    # guards the field's overviews: each overview pixel must be one of the vectors of the 2x2 pixels under it (an
    # average of quantised values would be no quantised vector; a shifted or band-swapped overview would not match)
    from affine import Affine
    from rasterio.crs import CRS

    from eoscale.infer.outputs.base import MapContext
    from eoscale.infer.outputs.embedding import write_field_cog
    from eoscale.infer.outputs.rasters import Georef, Piece

    height, width, d = 300, 520, 4
    field = np.random.default_rng(2).integers(-127, 128, (height, width, d), dtype=np.int8)
    (tmp_path / "part.int8").write_bytes(field.tobytes())
    context = MapContext(Georef(CRS.from_epsg(32633), Affine(10, 0, 0, 0, -10, 0), width, height), {}, {}, "x", "t")
    write_field_cog([Piece(tmp_path / "part", 0, 0, height, width)], ".int8", tmp_path / "field.tif", context,
                    dtype="int8", dimensions=d, nodata=NODATA, tags={})
    with rasterio.open(tmp_path / "field.tif") as src:
        assert src.overviews(1) == [2, 4] and np.array_equal(np.moveaxis(src.read(), 0, -1), field)
    with rasterio.open(tmp_path / "field.tif", overview_level=0) as src:
        overview = np.moveaxis(src.read(), 0, -1)
    h, w = overview.shape[:2]
    cells = [field[a : a + 2 * h : 2, b : b + 2 * w : 2] for a in (0, 1) for b in (0, 1)]
    assert np.logical_or.reduce([(overview == c).all(-1) for c in cells]).all()


@pytest.mark.parametrize(("dtype", "nodata"), [("int8", NODATA), ("float32", float("nan"))])
@pytest.mark.parametrize("shape", [(777, 1000), (1025, 600), (600, 300)])
def test_the_field_cog_from_its_parts_is_gdals_tiled_copy_with_its_nearest_overviews(tmp_path, shape, dtype, nodata):
    # guards the one-pass field COG (the parts read where they lie, overviews sampled in numpy): its pixels, every
    # overview level, tags, band names and nodata must be what GDAL gives for the same field written to a GeoTIFF
    # with GDAL's own nearest overviews (the writer's path until then), on sizes that do not halve evenly (GDAL's
    # levels each sampled from the one above: not 2i + 1, nor each level from the field) and from parts of two
    # processes and two column tiles (a part misplaced, a row or column off by one, a band out of order or a dropped
    # tag would not match)
    from affine import Affine
    from rasterio.crs import CRS
    from rasterio.enums import Resampling

    from eoscale.infer.outputs.base import MapContext
    from eoscale.infer.outputs.embedding import write_field_cog
    from eoscale.infer.outputs.field_cog import overview_factors
    from eoscale.infer.outputs.rasters import Georef, Piece

    height, width, d = shape[0], shape[1], 5
    rng = np.random.default_rng(3)
    field = (rng.integers(-127, 128, (height, width, d), dtype=np.int8) if dtype == "int8"
             else rng.normal(size=(height, width, d)).astype(np.float32))
    rows, cols = [0, height // 2 + 1, height], [0, 300, width]  # two parts, two column tiles (600 × 300: one empty)
    pieces = []
    for i in range(2):
        for j in range(2):
            path = tmp_path / f"part-{i}-{j}"
            (path.with_suffix(".v")).write_bytes(field[rows[i] : rows[i + 1], cols[j] : cols[j + 1]].tobytes())
            pieces.append(Piece(path, rows[i], cols[j], rows[i + 1] - rows[i], cols[j + 1] - cols[j]))
    crs, transform = CRS.from_epsg(32633), Affine(10, 0, 500000, 0, -10, 4000000)
    context = MapContext(Georef(crs, transform, width, height), {}, {}, "x", "t")
    tags = {"EMBEDDING_MODEL": "resnet18", "EOSCALE_LINEAGE": json.dumps({"a": "<&'\">"})}
    write_field_cog(pieces, ".v", tmp_path / "field.tif", context, dtype=dtype, dimensions=d, nodata=nodata, tags=tags)
    with rasterio.open(tmp_path / "gdal.tif", "w", driver="GTiff", height=height, width=width, count=d, dtype=dtype,
                       crs=crs, transform=transform, nodata=nodata, tiled=True, interleave="pixel") as out:
        out.write(np.moveaxis(field, -1, 0))
    with rasterio.open(tmp_path / "gdal.tif", "r+") as out:
        out.build_overviews(overview_factors(height, width), Resampling.nearest)
    with rasterio.open(tmp_path / "field.tif") as got, rasterio.open(tmp_path / "gdal.tif") as want:
        levels = got.overviews(1)
        assert levels == overview_factors(height, width) and len(levels) >= 2
        assert np.array_equal(got.read(), want.read(), equal_nan=True)
        assert got.descriptions == tuple(band_names(d)) and got.crs == crs and got.transform == transform
        assert np.isnan(got.nodata) if dtype == "float32" else got.nodata == NODATA
        assert {k: got.tags()[k] for k in tags} == tags and got.tags()["OVERVIEW_RESAMPLING"] == "NEAREST"
    for level in range(len(levels)):
        with rasterio.open(tmp_path / "field.tif", overview_level=level) as got, \
                rasterio.open(tmp_path / "gdal.tif", overview_level=level) as want:
            assert got.shape == want.shape and np.array_equal(got.read(), want.read(), equal_nan=True), level
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(  # no overview files left behind
        ["field.tif", "gdal.tif", *(f"part-{i}-{j}.v" for i in range(2) for j in range(2))])


def _embed(root: Path, checkpoint: Path) -> dict:
    """One `eoscale embed` run (int8 and float fields) of an odd-sized scene with a nodata box."""
    scene = root / "odd.tif"
    classes = write_scene(scene, height=HEIGHT, width=WIDTH, seed=3, nodata_box=NODATA_BOX)
    out = root / "fields"
    assert main(["embed", "--checkpoint", str(checkpoint), "--input", str(scene), "--output", str(out), "--float",
                 "--no-progress", "--device", "cpu"]) == 0
    return {"root": root, "checkpoint": checkpoint, "classes": classes, "field": out / "odd_embedding.tif",
            "float": out / "odd_embedding_float.tif", "item": out / "odd_embedding_item.json"}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> dict:
    """The field of an untrained checkpoint: its layout and numerics, not what it knows."""
    root = tmp_path_factory.mktemp("embed")
    return _embed(root, make_checkpoint(root / "best.ckpt"))


def _trained_checkpoint(root: Path) -> Path:
    """The test checkpoint trained for 150 steps on another scene of the same world (seed 7), as `eoscale fit` would
    save it: an untrained network's features do not tell the classes apart (measured: 10 points a class gave 0.52 of
    the pixels right), so what a head finds in the field would not show whether the field was written right."""
    import torch

    from eoscale.infer.model import load_model
    from tests.checkpoints import MEAN, STD
    from tests.rasters import class_map

    checkpoint = make_checkpoint(root / "untrained.ckpt")
    scene = root / "train.tif"
    write_scene(scene, height=96, width=96, seed=7, nodata_box=None)
    with rasterio.open(scene) as src:
        image = src.read().astype(np.float32)
    x = torch.from_numpy((image - np.float32(MEAN)[:, None, None]) / np.float32(STD)[:, None, None])
    y = torch.from_numpy(class_map(96, 96, 7).astype(np.int64))
    torch.manual_seed(0)
    network = load_model(checkpoint).network.train().requires_grad_(True)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        rows, cols = torch.randint(0, 64, (8,), generator=generator), torch.randint(0, 64, (8,), generator=generator)
        xb = torch.stack([x[:, i : i + 32, j : j + 32] for i, j in zip(rows, cols, strict=True)])
        yb = torch.stack([y[i : i + 32, j : j + 32] for i, j in zip(rows, cols, strict=True)])
        loss = torch.nn.functional.cross_entropy(network(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    saved = torch.load(checkpoint, weights_only=True)
    saved["state_dict"] = {f"model.{k}": v for k, v in network.state_dict().items()}
    torch.save(saved, root / "trained.ckpt")
    return root / "trained.ckpt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """The field of a checkpoint trained on another scene of the same synthetic world (~30 s on 2 cores)."""
    root = tmp_path_factory.mktemp("trained")
    return _embed(root, _trained_checkpoint(root))


def test_embed_writes_an_int8_cog_in_the_satellite_embedding_layout(embedded):
    # guards the field's layout and identity: one int8 band a dimension named A00.., nodata -128 where the scene has
    # none, the de-quantisation, backbone, layer and checkpoint digest in the tags, a valid COG, a STAC Item
    from rio_cogeo.cogeo import cog_validate

    from eoscale.catalog.digest import file_sha256

    with rasterio.open(embedded["field"]) as src:
        q, tags = src.read(), src.tags()
        assert (src.count, src.dtypes[0], src.nodata) == (8, "int8", NODATA)
        assert list(src.descriptions) == band_names(8)
    assert tags["EMBEDDING_DEQUANTISATION"] == "(v/127.5)^2*sign(v)"
    assert (tags["EMBEDDING_MODEL"], tags["EMBEDDING_LAYER"], tags["EMBEDDING_DIMENSIONS"]) == ("test_resnet", "decoder", "8")
    assert tags["EOSCALE_CHECKPOINT_SHA256"] == file_sha256(embedded["checkpoint"])
    assert (q[:, NODATA_BOX[0], NODATA_BOX[1]] == NODATA).all()
    assert (q[:, 70:, 40:] != NODATA).all()
    assert cog_validate(str(embedded["field"]))[0]
    item = json.loads(embedded["item"].read_text())
    assert item["properties"]["eoscale:embedding"]["EMBEDDING_LAYER"] == "decoder"
    assert set(item["assets"]) == {"embedding", "embedding_float"}


def test_the_int8_field_keeps_cosine_099_with_the_float_field(embedded):
    # guards the whole write path (blending, renormalising, quantising, pixel-interleaved parts into bands): a band
    # written in the wrong place or a vector not made unit length again after blending would break this
    with rasterio.open(embedded["field"]) as src:
        v, valid = dequantise(src.read(), axis=0)
    with rasterio.open(embedded["float"]) as src:
        f = src.read()
    assert valid.sum() == HEIGHT * WIDTH - 20 * 30
    assert np.abs(np.linalg.norm(f[:, valid], axis=0) - 1).max() < 1e-5
    assert np.isnan(f[:, ~valid]).all()
    assert _cosine(v[:, valid].T, f[:, valid].T).min() >= 0.99


def test_the_field_is_the_same_whatever_the_column_tile(embedded, tmp_path):
    # guards the reuse of predict's column tiles: a field swept in narrow tiles must be the field swept whole
    scene = embedded["root"] / "odd.tif"
    assert main(["embed", "--checkpoint", str(embedded["checkpoint"]), "--input", str(scene), "--output",
                 str(tmp_path), "--column-tile", "64", "--no-progress", "--device", "cpu"]) == 0
    with rasterio.open(embedded["field"]) as a, rasterio.open(tmp_path / "odd_embedding.tif") as b:
        assert np.array_equal(a.read(), b.read())


def _cell_means(field: np.ndarray, cell: int) -> np.ndarray:
    """A (dimensions, rows, columns) float field's mean vector over each cell of `cell` × `cell` pixels (NaN: none)."""
    d, h, w = field.shape
    padded = np.full((d, -(-h // cell) * cell, -(-w // cell) * cell), np.nan, dtype=np.float32)
    padded[:, :h, :w] = field
    cells = padded.reshape(d, padded.shape[1] // cell, cell, padded.shape[2] // cell, cell)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a cell of nodata only: its mean is NaN
        return np.nanmean(cells, axis=(2, 4))


def test_a_field_at_the_features_stride_is_the_scenes_grid_in_cells(embedded, tmp_path):
    # guards --field-stride (one vector a cell of 4x4 pixels, the decoder's own stride, blended on the grid of cells):
    # the field must lie on the scene's grid made 4 times coarser (a transform left at the pixels' or a grid cut short
    # would not), hold nodata exactly where every pixel of a cell is nodata, be the same whatever the column tile, and
    # its vectors must be the full-resolution field's at the same place (a field shifted by one cell, or blended on
    # the pixels' positions, agrees less with it than the cells under it do)
    scene = embedded["root"] / "odd.tif"
    fields = {}
    for name, extra in (("whole", []), ("tiled", ["--column-tile", "64"])):
        assert main(["embed", "--checkpoint", str(embedded["checkpoint"]), "--input", str(scene), "--output",
                     str(tmp_path / name), "--field-stride", "4", "--float", "--no-progress", "--device", "cpu",
                     *extra]) == 0
        with rasterio.open(tmp_path / name / "odd_embedding.tif") as src:
            fields[name] = src.read()
            tags, transform, shape = src.tags(), src.transform, src.shape
    assert np.array_equal(fields["whole"], fields["tiled"])
    with rasterio.open(scene) as src:
        assert transform == src.transform * src.transform.scale(4)
    assert shape == (-(-HEIGHT // 4), -(-WIDTH // 4)) and tags["EMBEDDING_STRIDE"] == "4"
    item = json.loads((tmp_path / "whole" / "odd_embedding_item.json").read_text())
    assert item["properties"]["proj:shape"] == list(shape) and item["properties"]["eoscale:embedding"]["EMBEDDING_STRIDE"] == "4"
    nodata_pixels = np.zeros((HEIGHT, WIDTH), dtype=bool)
    nodata_pixels[NODATA_BOX] = True
    all_nodata = np.isnan(_cell_means(np.where(nodata_pixels, np.nan, 1.0)[None].astype(np.float32), 4)[0])
    assert np.array_equal(fields["whole"][0] == NODATA, all_nodata) and all_nodata.sum() == 5 * 7
    with rasterio.open(tmp_path / "whole" / "odd_embedding_float.tif") as src:
        coarse = src.read()
    with rasterio.open(embedded["float"]) as src:
        under = _cell_means(src.read(), 4)
    valid = ~all_nodata

    def agreement(shift: tuple[int, int]) -> float:
        moved = np.roll(under, shift, axis=(1, 2))
        ok = valid & np.isfinite(moved).all(axis=0)
        return float(_cosine(coarse[:, ok].T, moved[:, ok].T).mean())

    assert agreement((0, 0)) >= 0.95  # measured 0.989; shifted by one cell 0.87-0.88
    assert agreement((0, 0)) > max(agreement(s) for s in ((1, 0), (-1, 0), (0, 1), (0, -1))) + 0.05


def test_a_field_stride_that_does_not_tile_the_windows_is_refused(embedded, tmp_path, capsys):
    # guards the one-line refusal of cells that windows and their stride do not hold whole (windows of 32 pixels
    # every 24 from a margin of 4: 8 does not divide 4), before any work and with nothing written
    scene = str(embedded["root"] / "odd.tif")
    assert main(["embed", "--checkpoint", str(embedded["checkpoint"]), "--input", scene, "--output", str(tmp_path / "a"),
                 "--field-stride", "8", "--no-progress", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "field stride of 8" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a" / "odd_embedding.tif").exists()


def _points(embedded, path: Path, *, per_class: int, seed: int, classes: list[int] | None = None) -> Path:
    """A CSV of `per_class` labelled points a class (x, y of pixel centres in the field's CRS), away from nodata."""
    rng = np.random.default_rng(seed)
    index = embedded["classes"]
    with rasterio.open(embedded["field"]) as src:
        valid = (src.read(1) != NODATA)
        transform = src.transform
    lines = ["x,y,class"]
    for k in classes if classes is not None else range(len(CODES)):
        rows, cols = np.nonzero((index == k) & valid)
        for i in rng.permutation(len(rows))[:per_class]:
            x, y = rasterio.transform.xy(transform, rows[i], cols[i], offset="center")
            lines.append(f"{x},{y},{CODES[k]}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_embed_field_few_shot_head_map_end_to_end(trained, tmp_path):
    # guards embed -> field -> head -> map: from 10 points a class on the field of a trained encoder, the head's map
    # must recover most of the scene's classes (chance: about 0.3) and be what the same head makes of the float
    # field in memory (a field whose vectors are scrambled, misplaced or read back wrongly would not)
    from sklearn.linear_model import LogisticRegression

    points = _points(trained, tmp_path / "points.csv", per_class=10, seed=0)
    assert main(["fewshot", str(trained["field"]), "--points", str(points), "--output", str(tmp_path / "map")]) == 0
    with rasterio.open(tmp_path / "map" / "fewshot.tif") as src:
        mapped, tags = src.read(1), src.tags()
    valid = mapped != 0
    assert (~valid).sum() == 20 * 30
    truth = CODES[trained["classes"]]
    assert (mapped[valid] == truth[valid]).mean() >= 0.7  # measured 0.82-0.85 over three draws of the points
    with rasterio.open(trained["float"]) as src:
        f = np.moveaxis(src.read(), 0, -1)
    table = np.loadtxt(points, delimiter=",", skiprows=1)
    rows, cols = rasterio.transform.rowcol(src.transform, table[:, 0], table[:, 1])
    head = LogisticRegression(C=10.0, max_iter=2000, random_state=0).fit(f[rows, cols], table[:, 2].astype(int))
    assert (head.predict(f[valid]) == mapped[valid]).mean() >= 0.98  # the int8 field's map is the float field's
    assert [c["code"] for c in json.loads(tags["EOSCALE_CLASSES"])] == CODES.tolist()
    record = json.loads((tmp_path / "map" / "fewshot.json").read_text())
    assert record["points_per_class"] == {str(c): 10 for c in CODES}
    assert (tmp_path / "map" / "fewshot_areas.csv").read_text().startswith("code,name,pixels,hectares,percent")


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(CODES)))
def test_similarity_from_five_examples_ranks_their_class_auroc_09(trained, tmp_path, k):
    # guards similarity search: the cosine with 5 examples' mean vector must rank their class's pixels first
    from sklearn.metrics import roc_auc_score

    from eoscale.maps.similarity import similarity

    points = _points(trained, tmp_path / "examples.csv", per_class=5, seed=k, classes=[k])
    similarity(trained["field"], tmp_path / "similar.tif", points=points)
    with rasterio.open(tmp_path / "similar.tif") as src:
        s = src.read(1)
    valid = np.isfinite(s)
    assert roc_auc_score((trained["classes"] == k)[valid], s[valid]) >= 0.9


def test_change_between_fields_is_one_minus_cosine(embedded, tmp_path):
    # guards the change as 1 - cosine: 0 between a field and itself, and high where one place's vectors were replaced
    from eoscale.maps.similarity import field_change

    later = tmp_path / "later.tif"
    with rasterio.open(embedded["float"]) as src:
        profile, f = src.profile, src.read()
    f[:, 70:90, 60:100] = -f[:, 70:90, 60:100]  # opposite vectors: distance 2
    with rasterio.open(later, "w", **profile) as dst:
        dst.write(f)
    same = field_change(embedded["field"], embedded["field"], tmp_path / "same.tif")
    assert same["mean_distance"] == pytest.approx(0.0, abs=1e-5)
    field_change(embedded["float"], later, tmp_path / "changed.tif")
    with rasterio.open(tmp_path / "changed.tif") as src:
        d = src.read(1)
    assert d[70:90, 60:100] == pytest.approx(2.0, abs=1e-4)
    assert np.nanmax(np.delete(d, np.s_[70:90], axis=0)) < 1e-5


def _satellite_embedding(path: Path, vectors: np.ndarray, *, tags: dict | None = None) -> None:
    """A GeoTIFF of the Satellite Embedding's layout: 64 int8 bands A00..A63, nodata -128, 10 m, UTM."""
    h, w, d = vectors.shape
    with rasterio.open(path, "w", driver="GTiff", height=h, width=w, count=d, dtype="int8", nodata=NODATA,
                       crs="EPSG:32633", transform=from_origin(500_000, 4_500_000, 10, 10), tiled=True,
                       blockxsize=16, blockysize=16) as dst:
        dst.write(quantise(np.moveaxis(vectors, -1, 0), axis=0))
        dst.descriptions = tuple(f"A{i:02d}" for i in range(d))
        if tags:
            dst.update_tags(**tags)


def test_a_satellite_embedding_shaped_cog_reads_back_as_a_field(tmp_path):
    # guards reading public fields: the de-quantisation on read, nodata as no vector, and the bands named as the
    # embedding sensor's
    from eoscale.maps.field import open_field
    from eoscale.sensors import band_of_description, sensor_of_bands

    vectors = _unit(np.random.default_rng(5), 32 * 48, 64).reshape(32, 48, 64)
    vectors[3, 4] = np.nan
    path = tmp_path / "satellite_embedding.tif"
    _satellite_embedding(path, vectors)
    field = open_field(path)
    assert (field.dimensions, field.dtype, field.width, field.height) == (64, "int8", 48, 32)
    read = np.concatenate([v for _, v, _ in field.strips(rows=7)])
    valid = np.concatenate([ok for _, _, ok in field.strips(rows=7)])
    assert not valid[3, 4] and valid.sum() == 32 * 48 - 1
    assert _cosine(read[valid], vectors[valid]).min() >= 0.99
    at, ok = field.at(np.array([3, 10]), np.array([4, 20]))
    assert ok.tolist() == [False, True] and _cosine(at[1], vectors[10, 20]) >= 0.99
    assert sensor_of_bands([f"A{i:02d}" for i in range(64)], what="t") == "embedding"
    assert band_of_description("A07") == ("embedding", "A07")


def test_a_field_of_another_dequantisation_is_refused(tmp_path):
    # guards against reading a differently quantised field (e.g. TESSERA's int8 + scales) as the Satellite Embedding's
    from eoscale.maps.field import open_field

    path = tmp_path / "other.tif"
    _satellite_embedding(path, _unit(np.random.default_rng(1), 64, 4).reshape(8, 8, 4),
                         tags={"EMBEDDING_DEQUANTISATION": "v*scale"})
    with pytest.raises(InputError, match="de-quantisation"):
        open_field(path)


def test_few_shot_user_mistakes_are_one_line(embedded, tmp_path, capsys):
    # guards the refusals: one class only, and a points file without the column, exit 2 with nothing written
    one = _points(embedded, tmp_path / "one.csv", per_class=5, seed=0, classes=[1])
    assert main(["fewshot", str(embedded["field"]), "--points", str(one), "--output", str(tmp_path / "a")]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main(["fewshot", str(embedded["field"]), "--points", str(one), "--column", "label", "--output",
                 str(tmp_path / "b")]) == 2
    assert "no column 'label'" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())


def test_eoscale_change_of_two_fields_writes_the_distance(embedded, tmp_path):
    # guards the route through `eoscale change`: two fields give field_change.tif (1 - cosine), not a class change map
    assert main(["change", str(embedded["field"]), str(embedded["field"]), "--output", str(tmp_path)]) == 0
    with rasterio.open(tmp_path / "field_change.tif") as src:
        d = src.read(1)
    assert np.nanmax(np.abs(d)) < 1e-5 and np.isnan(d[NODATA_BOX]).all()
    assert json.loads((tmp_path / "field_change.json").read_text())["valid_pixels"] == HEIGHT * WIDTH - 20 * 30


def test_a_pretrained_backbone_export_embeds_its_last_feature_map(embedded, tmp_path, capsys):
    # guards the foundation route: a backbone.safetensors (as `eoscale pretrain` exports it) is embedded with its own
    # band contract, one vector of the ViT's width a pixel; --layer decoder is refused in one line (it has no decoder)
    import timm

    from eoscale.bands import SENTINEL2_NAMES
    from eoscale.models.foundation import save_backbone
    from tests.checkpoints import MEAN, STD

    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, in_chans=10, img_size=32)
    export = save_backbone(vit.state_dict(), tmp_path / "backbone.safetensors", metadata={
        "bands": list(SENTINEL2_NAMES), "mean": list(MEAN), "std": list(STD), "patch_size": 16, "img_size": 32,
        "model": "vit_tiny_patch16_224"})
    scene = str(embedded["root"] / "odd.tif")
    assert main(["embed", "--checkpoint", str(export), "--input", scene, "--output", str(tmp_path / "a"),
                 "--no-progress", "--device", "cpu"]) == 2
    assert "--layer backbone" in capsys.readouterr().err and not (tmp_path / "a" / "odd_embedding.tif").exists()
    assert main(["embed", "--checkpoint", str(export), "--layer", "backbone", "--input", scene, "--output",
                 str(tmp_path / "b"), "--no-progress", "--device", "cpu"]) == 0
    with rasterio.open(tmp_path / "b" / "odd_embedding.tif") as src:
        assert (src.count, src.tags()["EMBEDDING_MODEL"], src.tags()["EMBEDDING_LAYER"]) == (192, "vit_tiny_patch16_224", "backbone")
        q = src.read()
    v, valid = dequantise(q, axis=0)
    assert valid.sum() == HEIGHT * WIDTH - 20 * 30
    assert np.abs(np.linalg.norm(v[:, valid], axis=0) - 1).max() < 0.05  # unit vectors, within the quantisation


@pytest.mark.slow
def test_two_processes_write_the_field_one_process_writes(embedded, tmp_path):
    # guards the reuse of predict's ranks: a scene's rows split between two processes give the same bytes
    scene = embedded["root"] / "odd.tif"
    assert main(["embed", "--checkpoint", str(embedded["checkpoint"]), "--input", str(scene), "--output",
                 str(tmp_path), "--devices", "2", "--no-progress", "--device", "cpu"]) == 0
    with rasterio.open(embedded["field"]) as a, rasterio.open(tmp_path / "odd_embedding.tif") as b:
        assert np.array_equal(a.read(), b.read())


@pytest.mark.slow
def test_two_processes_write_the_field_of_cells_one_process_writes(embedded, tmp_path):
    # guards --field-stride across ranks: a process starting at a later row block (its halo window rows blended on
    # the cells, its first block's rows counted in cells) must give the bytes one process gives
    scene = embedded["root"] / "odd.tif"
    for name, extra in (("one", []), ("two", ["--devices", "2"])):
        assert main(["embed", "--checkpoint", str(embedded["checkpoint"]), "--input", str(scene), "--output",
                     str(tmp_path / name), "--field-stride", "4", "--no-progress", "--device", "cpu", *extra]) == 0
    with rasterio.open(tmp_path / "one" / "odd_embedding.tif") as a, rasterio.open(tmp_path / "two" / "odd_embedding.tif") as b:
        assert np.array_equal(a.read(), b.read())
