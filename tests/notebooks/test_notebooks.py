"""Every notebook under notebooks/ runs top to bottom on small inputs, and is stored without outputs.

The inputs are built here: a tiny tile store by the real ingest (`tests.stores.make_store`), a SQLite
MLflow store with runs of known figures (`tests.mlflow_runs.log_known_runs`), and a small land-cover COG
with a confidence COG, tagged and coloured as `eoscale predict` writes them. The notebooks run in a kernel of
this interpreter (a kernelspec written for the test), so a fresh CI machine needs nothing registered.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.notebooks.runner import run_notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def write_map(folder: Path) -> Path:
    """A 120×150 class map in UTM 32N with the test class table, and its confidence map, as COGs."""
    import rasterio
    from rasterio.transform import from_origin
    from rio_cogeo.cogeo import cog_translate
    from rio_cogeo.profiles import cog_profiles

    from eoscale.infer.outputs import MapEncoding, map_tags
    from tests.checkpoints import TABLE
    from tests.rasters import class_map

    folder.mkdir(parents=True, exist_ok=True)
    encoding = MapEncoding.from_table(TABLE)
    index = class_map(120, 150, seed=1)
    codes = encoding.values[index]
    codes[:20, :30] = encoding.nodata
    confidence = (40 + 15 * index + np.arange(150)[None, :] % 20).astype(np.uint8)
    confidence[:20, :30] = 255
    tags, band_tags = map_tags(TABLE, encoding, {"EOSCALE_CHECKPOINT": "test.ckpt"})
    base = dict(driver="GTiff", height=120, width=150, count=1, crs="EPSG:32632",
                transform=from_origin(310_000, 5_650_000, 10, 10))
    outputs = {}
    for name, data, nodata in (("landcover", codes, encoding.nodata), ("confidence", confidence, 255)):
        plain = folder / f"plain_{name}.tif"
        with rasterio.open(plain, "w", dtype=data.dtype.name, nodata=nodata, **base) as dst:
            dst.write(data, 1)
            if name == "landcover":
                dst.write_colormap(1, encoding.colormap(TABLE))
                dst.update_tags(**tags)
                dst.update_tags(1, **band_tags)
        outputs[name] = folder / f"scene_000_{name}.tif"
        cog_translate(plain, outputs[name], cog_profiles.get("deflate"), quiet=True, overview_resampling="mode",
                      forward_band_tags=True)
    return outputs["landcover"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    from tests.mlflow_runs import log_known_runs
    from tests.stores import make_store

    root = tmp_path_factory.mktemp("notebook-inputs")
    store = make_store(root / "store", size=96)
    uri = f"sqlite:///{root / 'mlflow' / 'mlflow.db'}"
    (root / "mlflow").mkdir()
    log_known_runs(uri, artifacts=root / "mlflow" / "mlartifacts")
    landcover = write_map(root / "maps")
    return {"EOSCALE_STORE": str(store), "MLFLOW_TRACKING_URI": uri, "EOSCALE_MAP": str(landcover)}


def test_notebooks_are_stored_without_outputs():
    import nbformat

    assert [p.name for p in NOTEBOOKS] == ["01_tile_store.ipynb", "02_compare_runs.ipynb", "03_landcover_map.ipynb"]
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs: clear them"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, inputs, kernel, tmp_path, monkeypatch):
    outputs = run_notebook(path, inputs, kernel, tmp_path, monkeypatch)
    text = "\n".join(_text(o) for o in outputs)
    for expected in EXPECTED[path.stem]:
        assert expected in text, f"{path.name}: {expected!r} not in its outputs"


# what each notebook prints or shows of the inputs built above
EXPECTED = {
    # describe() of the 96 px two-scene store cut into 32 px tiles, and the class names of its balance table
    "01_tile_store": ("tiles of 32 px", "2 scenes", "Tree cover", "Permanent water bodies"),
    # the comparison table: the three known runs and the crashed one
    "02_compare_runs": ("4 runs", "ddp-1", "ddp-2", "ddp-4", "crashed"),
    # the map's header line (150 x 120 px in UTM 32N), its class table, and the confidence summary
    "03_landcover_map": ("scene_000_landcover.tif: 150 x 120 px, EPSG:32632", "Tree cover", "mean confidence"),
}


def _text(output) -> str:
    """A code cell output's text: a stream's, or a result's text/plain."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return output.get("data", {}).get("text/plain", "")
