"""eoscale synth: georeferenced files in both layouts, determinism, labels in another CRS, physical spectra."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.warp import transform as transform_points
from rasterio.warp import transform_bounds

from eoscale.bands import NODATA, SENTINEL2_L2A, SENTINEL2_NAMES
from eoscale.classes import WORLDCOVER, ClassTable
from eoscale.cli import main
from eoscale.errors import InputError, OutputExistsError
from eoscale.synth import SynthResult, synthesize
from eoscale.synth.landcover import CLASS_CODES, generate_landcover
from eoscale.synth.render import render_scene

SHAPE = (200, 257)  # odd width on purpose
B = {name: i for i, name in enumerate(SENTINEL2_NAMES)}


@pytest.fixture(scope="module")
def multiband(tmp_path_factory) -> SynthResult:
    return synthesize(tmp_path_factory.mktemp("mb") / "set", scenes=2, size=SHAPE, seed=7, nodata_fraction=0.2)


@pytest.fixture(scope="module")
def perband(tmp_path_factory) -> SynthResult:
    out = tmp_path_factory.mktemp("pb") / "set"
    return synthesize(out, scenes=2, size=SHAPE, seed=7, nodata_fraction=0.2, layout="perband")


@pytest.fixture(scope="module")
def default_scene() -> tuple[np.ndarray, np.ndarray]:
    """A default-sized (1000x1000) class map and its cloud-free rendering, (bands, y, x) uint16."""
    rng = np.random.default_rng([0, 0])
    landcover = generate_landcover((1000, 1000), rng)
    bands = render_scene(landcover, rng, nodata_fraction=0.0)
    image = np.stack([b if b.shape == (1000, 1000) else np.repeat(np.repeat(b, 2, 0), 2, 1) for b in bands])
    return landcover.classes, image


def test_multiband_scenes_are_georeferenced_sentinel2_l2a(multiband):
    assert multiband.scene_ids == ["scene_000", "scene_001"]
    footprints = []
    for path in multiband.scene_paths:
        with rasterio.open(path) as src:
            assert src.crs.to_epsg() == 32632
            assert (src.height, src.width) == SHAPE and src.count == 10
            assert src.dtypes == ("uint16",) * 10 and src.nodata == NODATA
            assert src.descriptions == SENTINEL2_NAMES
            assert src.res == (10.0, 10.0) and src.transform.c % 10 == 0 and src.transform.f % 10 == 0
            assert 300_000 <= src.bounds.left < 340_000 and 5_630_000 < src.bounds.top <= 5_660_000
            assert src.profile["tiled"] and src.profile["compress"] == "deflate"
            for i, band in enumerate(SENTINEL2_L2A, start=1):
                tags = src.tags(i)
                assert float(tags["wavelength_nm"]) == band.wavelength_nm
                assert float(tags["bandwidth_nm"]) == band.bandwidth_nm
                assert float(tags["resolution_m"]) == band.resolution_m
            data = src.read()
            footprints.append(src.bounds)
        nodata = data == NODATA
        assert nodata.any() and (nodata == nodata[0]).all(), "nodata must be the same pixels in every band"
        assert 1000 < np.median(data[B["B08"]][~nodata[0]]) < 6000  # NIR reflectance of a vegetated scene
    a, b = footprints
    assert a.right <= b.left or b.right <= a.left or a.top <= b.bottom or b.top <= a.bottom, "scenes overlap"


def test_manifest_lists_the_files_with_relative_paths(multiband):
    manifest = json.loads(multiband.manifest_path.read_text())
    assert manifest["layout"] == "multiband" and manifest["size"] == list(SHAPE)
    assert [b["name"] for b in manifest["bands"]] == list(SENTINEL2_NAMES)
    for scene in manifest["scenes"]:
        assert not Path(scene["image"]).is_absolute() and not Path(scene["labels"]).is_absolute()
    assert SynthResult.from_manifest(multiband.out_dir) == multiband
    assert all(p.is_file() for p in [*multiband.scene_paths, *multiband.label_paths, multiband.class_table_path])


def test_class_table_is_the_worldcover_subtable_used(multiband):
    table = ClassTable.load(multiband.class_table_path)
    assert table.codes == list(CLASS_CODES) and len(table) >= 7
    worldcover = {c.code: c for c in WORLDCOVER.classes}
    assert all(c == worldcover[c.code] for c in table.classes)


def test_labels_are_laea_20m_and_agree_with_the_scene_truth(multiband):
    for index, (scene_path, label_path) in enumerate(zip(multiband.scene_paths, multiband.label_paths, strict=True)):
        with rasterio.open(scene_path) as scene, rasterio.open(label_path) as labels:
            assert labels.crs.to_epsg() == 3035 and labels.res == (20.0, 20.0)
            assert labels.dtypes == ("uint8",) and labels.nodata == 0
            footprint = transform_bounds(scene.crs, labels.crs, *scene.bounds)
            assert labels.bounds.left <= footprint[0] and labels.bounds.bottom <= footprint[1]
            assert labels.bounds.right >= footprint[2] and labels.bounds.top >= footprint[3]
            codes = labels.read(1)
            scene_transform, scene_crs = scene.transform, scene.crs
        assert set(np.unique(codes)) <= {0, *CLASS_CODES}
        # nearest-neighbour reprojection: each label pixel holds the truth at its centre
        truth = generate_landcover(SHAPE, np.random.default_rng([7, index])).classes
        rows, cols = np.nonzero(codes)
        pick = np.random.default_rng(0).choice(rows.size, 500, replace=False)
        xs, ys = rasterio.transform.xy(labels.transform, rows[pick], cols[pick])
        ux, uy = transform_points(labels.crs, scene_crs, xs, ys)
        r, c = rasterio.transform.rowcol(scene_transform, ux, uy)
        r, c = np.clip(r, 0, SHAPE[0] - 1), np.clip(c, 0, SHAPE[1] - 1)
        assert (truth[r, c] == codes[rows[pick], cols[pick]]).mean() > 0.98


def test_perband_writes_20m_bands_at_20m_on_the_same_grid(multiband, perband):
    for scene_files, multiband_path in zip(perband.scene_paths, multiband.scene_paths, strict=True):
        assert [Path(p).stem.rsplit("_", 1)[1] for p in scene_files] == list(SENTINEL2_NAMES)
        with rasterio.open(multiband_path) as src:
            stacked = src.read()
            bounds = src.bounds
        for band, path in zip(SENTINEL2_L2A, scene_files, strict=True):
            with rasterio.open(path) as src:
                assert src.crs.to_epsg() == 32632 and src.res == (band.resolution_m,) * 2
                assert src.descriptions == (band.name,) and src.tags(1)["resolution_m"] == f"{band.resolution_m:g}"
                image = src.read(1)
                assert (src.bounds.left, src.bounds.top) == (bounds.left, bounds.top)
                assert 0 <= src.bounds.right - bounds.right < 20 and 0 <= bounds.bottom - src.bounds.bottom < 20
            if band.resolution_m == 20:
                assert image.shape == (math.ceil(SHAPE[0] / 2), math.ceil(SHAPE[1] / 2))
                image = np.repeat(np.repeat(image, 2, 0), 2, 1)[: SHAPE[0], : SHAPE[1]]
            # both layouts hold the same measurements
            np.testing.assert_array_equal(image, stacked[B[band.name]])


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path):
    def digests(out: Path) -> dict[str, str]:
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*")) if p.is_file()}

    first = synthesize(tmp_path / "a", scenes=2, size=(96, 131), seed=3)
    again = synthesize(tmp_path / "b", scenes=2, size=(96, 131), seed=3)
    other = synthesize(tmp_path / "c", scenes=2, size=(96, 131), seed=4)
    a, b, c = digests(first.out_dir), digests(again.out_dir), digests(other.out_dir)
    assert a == b
    assert all(a[k] != c[k] for k in a if k.startswith(("scenes/", "labels/")))


def test_default_size_map_has_coherent_regions_of_at_least_7_classes(default_scene):
    classes, _ = default_scene
    codes, counts = np.unique(classes, return_counts=True)
    assert set(codes) <= set(CLASS_CODES) and len(codes) >= 7
    # spatially coherent: most pixels share their class with the pixel to the right
    assert (classes[:, 1:] == classes[:, :-1]).mean() > 0.9


def test_class_spectra_are_physically_sensible_and_confusable(default_scene):
    classes, image = default_scene
    reflectance = image.astype(np.float64) / 10_000
    means = {code: reflectance[:, classes == code].mean(axis=1) for code in CLASS_CODES}

    def ndvi(s: np.ndarray) -> float:
        return (s[B["B08"]] - s[B["B04"]]) / (s[B["B08"]] + s[B["B04"]])

    assert means[80][B["B08"]] < 0.05 < means[10][B["B08"]]  # water absorbs NIR; canopies scatter it
    assert ndvi(means[80]) < 0 < ndvi(means[60]) < ndvi(means[40]) < ndvi(means[10])
    assert means[50][B["B11"]] > means[10][B["B11"]]  # built-up brighter than canopy in the SWIR

    def distance(a: int, b: int) -> float:
        return float(np.linalg.norm(means[a] - means[b]))

    assert distance(30, 40) < distance(30, 80) and distance(30, 40) < distance(40, 80)
    assert distance(10, 20) < distance(10, 80)
    # per pixel, grassland and cropland overlap: a nearest-mean classifier mixes them up often
    pixels = reflectance[:, np.isin(classes, (30, 40))].T
    labels = classes[np.isin(classes, (30, 40))]
    nearest = np.where(
        np.linalg.norm(pixels - means[30], axis=1) < np.linalg.norm(pixels - means[40], axis=1), 30, 40
    )
    assert 0.05 < (nearest != labels).mean() < 0.5


def test_nodata_fraction_zero_leaves_no_nodata(tmp_path):
    result = synthesize(tmp_path / "clear", scenes=1, size=80, nodata_fraction=0)
    with rasterio.open(result.scene_paths[0]) as src:
        assert (src.read() != NODATA).all()


@pytest.mark.parametrize(
    "kwargs",
    [{"size": 63}, {"size": (64, 10)}, {"scenes": 0}, {"layout": "bsq"}, {"nodata_fraction": 0.9}, {"seed": -1}],
)
def test_bad_values_raise_input_error(tmp_path, kwargs):
    with pytest.raises(InputError) as err:
        synthesize(tmp_path / "out", **kwargs)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_existing_output_needs_overwrite(tmp_path):
    out = tmp_path / "set"
    synthesize(out, scenes=1, size=64, seed=1)
    with pytest.raises(OutputExistsError, match="--overwrite") as err:
        synthesize(out, scenes=1, size=64, seed=2)
    assert str(out) in str(err.value) and "\n" not in str(err.value)
    result = synthesize(out, scenes=2, size=64, seed=2, overwrite=True)
    assert len(json.loads(result.manifest_path.read_text())["scenes"]) == 2
    unrelated = tmp_path / "home"
    unrelated.mkdir()
    (unrelated / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError):
        synthesize(unrelated, scenes=1, size=64, overwrite=True)
    assert (unrelated / "notes.txt").read_text() == "keep me"


def test_interrupted_run_leaves_nothing_that_looks_finished(tmp_path, monkeypatch):
    import eoscale.synth.dataset as dataset

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset, "write_labels", fail)
    with pytest.raises(KeyboardInterrupt):
        synthesize(tmp_path / "set", scenes=2, size=64)
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_a_set_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["synth", str(out), "--scenes", "1", "--size", "96x80", "--seed", "5", "--layout", "perband"]) == 0
    assert "wrote 1 scene" in capsys.readouterr().out
    result = SynthResult.from_manifest(out)
    assert result.layout == "perband" and len(result.scene_paths[0]) == 10
    assert main(["synth", "--output", str(out), "--size", "96x80"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_cli_safe_layout_writes_a_sentinel2_l2a_product(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "old"), "--layout", "safe", "--baseline", "03.01", "--scenes", "1",
                 "--size", "64", "--nodata-fraction", "0"]) == 0
    (product,) = (tmp_path / "old" / "scenes").glob("S2A_MSIL2A_*_N0301_*.SAFE")
    mtd = (product / "MTD_MSIL2A.xml").read_text()
    assert "<PROCESSING_BASELINE>03.01</PROCESSING_BASELINE>" in mtd and "BOA_ADD_OFFSET" not in mtd
    assert "<BOA_QUANTIFICATION_VALUE unit=\"none\">10000</BOA_QUANTIFICATION_VALUE>" in mtd
    (img,) = (product / "GRANULE").glob("*/IMG_DATA")
    with rasterio.open(next((img / "R10m").glob("*_B02_10m.jp2"))) as src:
        assert src.driver == "JP2OpenJPEG" and src.res == (10.0, 10.0) and src.crs.to_epsg() == 32632
        old_b02 = src.read(1)
    with rasterio.open(next((img / "R20m").glob("*_SCL_20m.jp2"))) as src:
        assert src.res == (20.0, 20.0) and src.dtypes == ("uint8",)
        assert set(np.unique(src.read(1))) <= {4, 5, 6, 8, 9}
    assert main(["synth", str(tmp_path / "new"), "--layout", "safe", "--scenes", "1", "--size", "64",
                 "--nodata-fraction", "0"]) == 0  # default: baseline 05.10, with BOA_ADD_OFFSET -1000
    (product,) = (tmp_path / "new" / "scenes").glob("*_N0510_*.SAFE")
    assert '<BOA_ADD_OFFSET band_id="8">-1000</BOA_ADD_OFFSET>' in (product / "MTD_MSIL2A.xml").read_text()
    with rasterio.open(next(product.glob("GRANULE/*/IMG_DATA/R10m/*_B02_10m.jp2"))) as src:
        np.testing.assert_array_equal(src.read(1), old_b02 + 1000)
    capsys.readouterr()
    assert main(["synth", str(tmp_path / "bad"), "--layout", "safe", "--baseline", "5.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NN.NN" in err[0] and not (tmp_path / "bad").exists(), err


def test_cli_landsat_layout_writes_a_c2_l2_folder_with_every_qa_flag(tmp_path, capsys):
    """SR_B1..SR_B7 at 30 m with the C2 factors applied inversely, QA_PIXEL with fill, dilated cloud, cirrus, cloud,
    shadow and snow where synth put them, the MTL as text and XML, ST_B10 and ANG beside, and a USGS-like Item."""
    from eoscale.synth.landsat import CLOUD, QA_VALUES

    assert main(["synth", str(tmp_path / "ls"), "--layout", "landsat", "--scenes", "1", "--size", "120",
                 "--nodata-fraction", "0.2", "--seed", "1"]) == 0
    result = SynthResult.from_manifest(tmp_path / "ls")
    folder = result.scene_paths[0]
    assert folder.name.startswith("LC09_L2SP_") and folder.name.endswith("_02_T1")
    with rasterio.open(next(folder.glob("*_SR_B5.TIF"))) as src:
        assert src.res == (30.0, 30.0) and (src.width, src.height) == (40, 40) and src.dtypes == ("uint16",)
        b5 = src.read(1)
    with rasterio.open(next(folder.glob("*_QA_PIXEL.TIF"))) as src:
        qa = src.read(1)
    for name, value in QA_VALUES.items():
        assert (qa == value).any(), name
    assert (b5[qa == QA_VALUES["fill"]] == 0).all() and (b5[qa != QA_VALUES["fill"]] > 0).all()
    cloud = qa == QA_VALUES["cloud"]
    np.testing.assert_allclose(b5[cloud] * 2.75e-5 - 0.2, CLOUD[4], atol=2e-5)  # the cloud tops' reflectance
    mtl = next(folder.glob("*_MTL.txt")).read_text()
    assert "REFLECTANCE_MULT_BAND_5 = 2.75E-05" in mtl and "REFLECTANCE_ADD_BAND_5 = -0.200000" in mtl
    assert "<REFLECTANCE_ADD_BAND_7>-0.200000</REFLECTANCE_ADD_BAND_7>" in next(folder.glob("*_MTL.xml")).read_text()
    assert next(folder.glob("*_ST_B10.TIF")) and next(folder.glob("*_ANG.txt"))
    item = json.loads(result.item_paths[0].read_text())
    assert item["properties"]["platform"] == "LANDSAT_9" and item["properties"]["proj:epsg"] == 32632
    assert item["assets"]["nir08"]["eo:bands"][0]["name"] == "SR_B5"
    assert item["assets"]["nir08"]["raster:bands"][0]["scale"] == 2.75e-5 and item["assets"]["nir08"]["href"].startswith("./")


def test_cli_cog_layout_writes_the_safe_products_pixels_with_an_item(tmp_path):
    """The COGs of a scene hold its SAFE product's digital numbers (baseline 05.10: +1000); the Item's raster:bands
    offset undoes it."""
    for layout in ("safe", "cog"):
        assert main(["synth", str(tmp_path / layout), "--layout", layout, "--scenes", "1", "--size", "64",
                     "--seed", "2"]) == 0
    cog = SynthResult.from_manifest(tmp_path / "cog")
    with rasterio.open(cog.scene_paths[0] / "B8A.tif") as src:
        assert src.res == (20.0, 20.0) and src.nodata == 0
        b8a = src.read(1)
    with rasterio.open(next((tmp_path / "safe" / "scenes").glob("*.SAFE/GRANULE/*/IMG_DATA/R20m/*_B8A_20m.jp2"))) as src:
        np.testing.assert_array_equal(b8a, src.read(1))
    item = json.loads(cog.item_paths[0].read_text())
    assert item["properties"]["s2:processing_baseline"] == "05.10" and item["properties"]["platform"] == "sentinel-2a"
    assert item["assets"]["nir08"]["raster:bands"][0] | {"statistics": None} == item["assets"]["nir08"]["raster:bands"][0] | {
        "scale": 0.0001, "offset": -0.1, "nodata": 0.0, "statistics": None}
    assert {"blue", "rededge1", "swir22", "scl", "visual"} <= set(item["assets"])


def test_default_world_needs_context_where_a_pixel_cannot_tell(default_scene):
    """Built-up (roofs, gardens, streets), orchards (tree cover of crowns on grass) and cropland against grassland:
    a random forest on one pixel's spectrum confuses them; the same forest given each pixel's 7x7 neighbourhood
    (local mean and spread of every band) tells them apart far better. Water and forest need no context."""
    from scipy import ndimage
    from sklearn.ensemble import RandomForestClassifier

    classes, image = default_scene
    reflectance = image.astype(np.float32) / 10_000
    local_mean = np.stack([ndimage.uniform_filter(b, 7) for b in reflectance])
    local_spread = np.sqrt(np.stack([ndimage.uniform_filter(b * b, 7) for b in reflectance]) - local_mean**2 + 1e-8)
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 1000, (2, 40_000))
    train, test = slice(0, 20_000), slice(20_000, None)
    labels = classes[rows, cols]

    def iou_by_class(features: np.ndarray) -> dict[int, float]:
        x = features[:, rows, cols].T
        forest = RandomForestClassifier(n_estimators=30, max_depth=16, random_state=0, n_jobs=1).fit(x[train], labels[train])
        predicted, truth = forest.predict(x[test]), labels[test]
        return {c: ((predicted == c) & (truth == c)).sum() / max(((predicted == c) | (truth == c)).sum(), 1) for c in CLASS_CODES}

    pixel = iou_by_class(reflectance)
    context = iou_by_class(np.concatenate([reflectance, local_mean, local_spread]))
    assert pixel[80] > 0.8 and pixel[10] > 0.6  # spectra still decide water and forest
    assert pixel[50] < 0.5 < context[50] and context[50] - pixel[50] > 0.25  # built-up is a texture, not a spectrum
    assert context[40] - pixel[40] > 0.02 and context[30] - pixel[30] > 0.03  # fields have stripes, meadows do not
    assert np.mean(list(context.values())) - np.mean(list(pixel.values())) > 0.04  # 0.07 here; a network gains more


def test_village_roofs_show_bare_soil_and_orchards_grass_between_crowns():
    """What a built-up or orchard pixel shows is not its label: `surfaces` says which spectra render it."""
    landcover = generate_landcover((400, 400), np.random.default_rng([3, 0]))
    built = landcover.classes == 50
    shown = np.unique(landcover.surfaces[built], return_counts=True)
    shares = dict(zip(shown[0].tolist(), (shown[1] / built.sum()).tolist(), strict=True))
    # roofs as bare soil (55 % of plots; 0.27 of the label with the streets and the boundary noise), gardens as grass
    assert shares.get(60, 0) > 0.2 and shares.get(30, 0) > 0.1
    # crop rows where the ground is cropland (labels at parcel boundaries are noisy: a neighbour's class)
    assert (landcover.rows[landcover.classes == 40] != 0).mean() > 0.9 and (landcover.rows[landcover.surfaces != 40] == 0).all()
