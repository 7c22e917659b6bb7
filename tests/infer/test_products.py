"""`eoscale predict` on real product layouts: a Sentinel-2 L2A SAFE product maps like its bands on the reflectance
scale; a Sentinel-2 model refuses Landsat bands unless the user maps them (`--band-map`)."""

from __future__ import annotations

import numpy as np
import rasterio

from eoscale.cli import main
from eoscale.synth import synthesize
from tests.checkpoints import make_checkpoint
from tests.infer.test_bad_input import _args, _fails
from tests.products import safe_product, write_rgb
from tests.rasters import read_map, write_scene


def test_predict_maps_safe_products_of_both_baselines_alike(checkpoint, tmp_path):
    from eoscale.infer.run import PredictConfig, predict

    products = []
    for baseline in ("03.01", "05.10"):
        root = synthesize(tmp_path / baseline, scenes=1, size=64, seed=2, layout="safe", baseline=baseline,
                          nodata_fraction=0.0)
        products.append(safe_product(root.out_dir))
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(p) for p in products], output=str(tmp_path / "maps"),
                          progress=False))
    old, new = (tmp_path / "maps" / f"{p.name.removesuffix('.SAFE')}_landcover.tif" for p in products)
    with rasterio.open(new) as src:
        assert (src.height, src.width) == (64, 64) and src.crs.to_epsg() == 32632
    np.testing.assert_array_equal(read_map(old), read_map(new))


def test_sentinel2_model_refuses_landsat_bands_unless_mapped(tmp_path, capsys):
    # a Landsat 9 C2 L2 folder as `eoscale synth --layout landsat` writes it (48 px of 30 m)
    landsat = synthesize(tmp_path / "ls", scenes=1, size=144, seed=1, layout="landsat").scene_paths[0]
    four = make_checkpoint(tmp_path / "four.ckpt", bands=("B02", "B03", "B04", "B8A"))
    line = _fails(capsys, _args(four, landsat, tmp_path / "out"), "Landsat 8/9 OLI bands", "Sentinel-2 MSI",
                  "--band-map")
    assert "SR_B5" in line
    assert not (tmp_path / "out").exists()
    _fails(capsys, [*_args(four, landsat, tmp_path / "out"), "--band-map", "SR_B2=B02,SR_B9=B03"], "SR_B9")
    assert main(["predict", *_args(four, landsat, tmp_path / "out"), "--band-map",
                 "SR_B2=B02,SR_B3=B03,SR_B4=B04,SR_B5=B8A"]) == 0
    assert read_map(tmp_path / "out" / f"{landsat.name}_landcover.tif").shape == (48, 48)


def test_generic_rgbn_model_maps_rgbn_scenes_and_refuses_sentinel2_ones(tmp_path, capsys):
    rgbn = write_rgb(tmp_path / "aerial.tif", size=48, nir=True)
    model = make_checkpoint(tmp_path / "rgbn.ckpt", bands=("RED", "GREEN", "BLUE", "NIR"))
    assert main(["predict", *_args(model, rgbn, tmp_path / "out"), "--band-names", "red,green,blue,nir"]) == 0
    assert read_map(tmp_path / "out" / "aerial_landcover.tif").shape == (48, 48)
    capsys.readouterr()
    s2 = tmp_path / "s2.tif"
    write_scene(s2, height=40, width=40, band_names=["B04", "B03", "B02", "B08"])
    _fails(capsys, _args(model, s2, tmp_path / "out2"), "Sentinel-2 MSI bands", "generic RGB/RGBN camera", "--band-map")


def test_predict_maps_a_cog_stac_item_like_its_safe_product(checkpoint, tmp_path, capsys):
    """`eoscale predict --stac ITEM` on a scene's Sentinel-2 COGs gives its SAFE product's map; an item whose asset
    is remote is one line."""
    for layout in ("safe", "cog"):
        synthesize(tmp_path / layout, scenes=1, size=64, seed=2, layout=layout, nodata_fraction=0.0)
    (item,) = (tmp_path / "cog" / "scenes").glob("*/*.json")
    product = safe_product(tmp_path / "safe")
    from eoscale.infer.run import PredictConfig, predict

    # one run maps both (the Python API takes scene paths and STAC items together)
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(product)], stac=[str(item)],
                          output=str(tmp_path / "maps"), progress=False))
    np.testing.assert_array_equal(read_map(tmp_path / "maps" / "S2A_32ULB_20240601_0_L2A_landcover.tif"),
                                  read_map(tmp_path / "maps" / f"{product.name.removesuffix('.SAFE')}_landcover.tif"))
    remote = item.with_name("remote.json")
    remote.write_text(item.read_text().replace('"./B8A.tif"', '"https://sentinel-cogs.s3.amazonaws.com/B8A.tif"'))
    _fails(capsys, ["--checkpoint", str(checkpoint), "--stac", str(remote), "--output", str(tmp_path / "c"),
                    "--no-progress"], "'nir08'", "download the assets first")
    assert not (tmp_path / "c").exists()
