"""Which pixels hold data, as GDAL reads each scene's files (issue 13, items 4 and 5): each scene's own nodata
value, its mask band or alpha band; a pixel is missing when every band is at nodata, not when one is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
import zarr
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin

from eoscale import schema
from eoscale.classes import IGNORE_INDEX
from eoscale.cli import main
from tests.rasters import CLASSES_CSV, CODES

H, W, T = 64, 96, 32  # six whole tiles a scene


def _write(path: Path, image: np.ndarray, *, origin: float, nodata: float | None, mask: np.ndarray | None = None,
           alpha: np.ndarray | None = None, names: list[str] | None = None) -> None:
    bands = np.concatenate([image, alpha[None]]) if alpha is not None else image
    profile = dict(driver="GTiff", height=H, width=W, count=len(bands), dtype=str(image.dtype), crs="EPSG:32632",
                   transform=from_origin(origin, 5_650_000.0, 10, 10), tiled=True, blockxsize=32, blockysize=32)
    if nodata is not None:
        profile["nodata"] = nodata
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(path, "w", **profile) as dst:
        dst.write(bands)
        if alpha is not None:
            dst.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
        if mask is not None:
            dst.write_mask(mask)
        for i, name in enumerate(names or []):
            dst.set_band_description(i + 1, name)


def _labels(path: Path, origin: float, seed: int) -> None:
    codes = CODES[np.random.default_rng(seed).integers(0, len(CODES), (H, W))]
    with rasterio.open(path, "w", driver="GTiff", height=H, width=W, count=1, dtype="uint8", nodata=0,
                       crs="EPSG:32632", transform=from_origin(origin, 5_650_000.0, 10, 10)) as dst:
        dst.write(codes[None])


def _ingest(tmp_path: Path, scenes: list[Path], *extra: str) -> Path:
    for i, scene in enumerate(scenes):
        with rasterio.open(scene) as src:
            _labels(tmp_path / f"{scene.stem}_lc.tif", src.transform.c, seed=i)
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)
    out = tmp_path / "tiles.zarr"
    code = main(["ingest", "--scenes", *map(str, scenes), "--labels", *(str(tmp_path / f"{s.stem}_lc.tif") for s in scenes),
                 "--classes", str(tmp_path / "classes.csv"), "--output", str(out), "--tile-size", str(T),
                 "--min-valid", "0.1", "--workers", "1", "--quiet", *extra])
    assert code == 0
    return out


def _missing_per_scene(store: Path) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per scene index: its grid of labels, of 'every band at the store's nodata', and of pixel values."""
    group = zarr.open_group(str(store), mode="r")
    images, labels = group[schema.IMAGES][:, 0], group[schema.LABELS][:]  # images: the one date
    nodata = group.attrs[schema.ATTR_NODATA]
    out = {}
    for s in np.unique(group[schema.SCENE][:]):
        lab = np.full((H, W), 254, dtype=np.uint8)
        img = np.zeros((images.shape[1], H, W), dtype=images.dtype)
        for k in np.flatnonzero(group[schema.SCENE][:] == s):
            r, c = int(group[schema.ROW_OFF][k]), int(group[schema.COL_OFF][k])
            lab[r : r + T, c : c + T], img[:, r : r + T, c : c + T] = labels[k], images[k]
        out[int(s)] = (lab, (img == nodata).all(axis=0), img)
    return out


def test_each_scene_keeps_its_own_nodata(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    box = (slice(0, 20), slice(0, 40))
    a = rng.integers(100, 5000, (4, H, W)).astype(np.uint16)
    a[:, box[0], box[1]] = 0
    b = rng.integers(100, 5000, (4, H, W)).astype(np.uint16)
    b[:, box[0], box[1]] = 65535
    names = ["B02", "B03", "B04", "B08"]
    _write(tmp_path / "a.tif", a, origin=310_000.0, nodata=0, names=names)
    _write(tmp_path / "b.tif", b, origin=320_000.0, nodata=65535, names=names)
    store = _ingest(tmp_path, [tmp_path / "a.tif", tmp_path / "b.tif"])
    expected = np.zeros((H, W), dtype=bool)
    expected[box] = True
    for lab, missing, img in _missing_per_scene(store).values():
        assert ((lab == IGNORE_INDEX) == expected).all()  # scene b's 65535 box is nodata too, not labelled ground
        assert (missing == expected).all() and img.max() < 65535  # written as the store's nodata, in every band
    attrs = zarr.open_group(str(store), mode="r").attrs
    assert max(attrs[schema.ATTR_STATISTICS]["max"]) < 5000 and min(attrs[schema.ATTR_STATISTICS]["min"]) >= 100
    masked = {m["scene"]: m for m in attrs[schema.ATTR_MASKED]}
    assert masked["b"] == {"scene": "b", "validity": "nodata 65535 in every band", "pixels": H * W,
                           "by_mask": 0, "by_nodata": 800}
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "200")  # rich's table in one line a row
    assert main(["info", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "nodata 65535 in every band" in shown and "800 (13.0%)" in shown


def test_one_dark_channel_is_data_not_nodata(tmp_path):
    rng = np.random.default_rng(1)
    rgb = rng.integers(1, 256, (3, H, W)).astype(np.uint8)
    flat = rgb.reshape(3, -1)
    dark = np.arange(0, H * W, 35)
    flat[dark % 3, dark] = 0  # one pixel in 35 has one channel at 0: a dark surface, still data
    rgb[:, 40:, 80:] = 0  # and a corner with no data at all
    _write(tmp_path / "rgb.tif", rgb, origin=310_000.0, nodata=0)
    store = _ingest(tmp_path, [tmp_path / "rgb.tif"], "--band-names", "B04,B03,B02")
    ((lab, missing, _),) = _missing_per_scene(store).values()
    expected = (rgb == 0).all(axis=0)
    assert expected.sum() == 24 * 16
    assert ((lab == IGNORE_INDEX) == expected).all()  # not one labelled pixel lost to a dark channel
    stats = zarr.open_group(str(store), mode="r").attrs[schema.ATTR_STATISTICS]
    assert stats["valid_pixels"] == [float(H * W - expected.sum())] * 3  # the dark zeros are counted: data


@pytest.mark.parametrize("kind", ["mask", "alpha"])
def test_a_mask_or_alpha_band_decides(tmp_path, capsys, kind):
    rng = np.random.default_rng(2)
    hidden = np.zeros((H, W), dtype=bool)
    hidden[10:30, 50:90] = True  # data values under it, but the file says they are not data
    rgb = rng.integers(1, 256, (3, H, W)).astype(np.uint8)
    flags = np.where(hidden, 0, 255).astype(np.uint8)
    if kind == "mask":
        _write(tmp_path / "s.tif", rgb, origin=310_000.0, nodata=None, mask=flags)
    else:
        _write(tmp_path / "s.tif", rgb, origin=310_000.0, nodata=None, alpha=flags)
    store = _ingest(tmp_path, [tmp_path / "s.tif"], "--band-names", "B04,B03,B02")  # the alpha band is no band
    ((lab, missing, _),) = _missing_per_scene(store).values()
    assert ((lab == IGNORE_INDEX) == hidden).all() and (missing == hidden).all()
    attrs = zarr.open_group(str(store), mode="r").attrs
    assert attrs[schema.ATTR_BANDS] == ["B04", "B03", "B02"]
    (masked,) = attrs[schema.ATTR_MASKED]
    assert masked["validity"] == "mask band of 1 file(s)" and masked["by_mask"] == hidden.sum() == 800
    capsys.readouterr()
    assert main(["info", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["masked_pixels"] == [masked]


def test_predict_maps_by_the_same_validity(tmp_path):
    from tests.checkpoints import make_checkpoint

    rng = np.random.default_rng(3)
    hidden = np.zeros((H, W), dtype=bool)
    hidden[5:25, 10:60] = True
    rgb = rng.integers(1, 256, (3, H, W)).astype(np.uint8)
    rgb[0, 40:, :] = 0  # a dark red channel under the mask's data: a class, not nodata
    _write(tmp_path / "s.tif", rgb, origin=310_000.0, nodata=None, mask=np.where(hidden, 0, 255).astype(np.uint8),
           names=["B04", "B03", "B02"])
    checkpoint = make_checkpoint(tmp_path / "m.ckpt", bands=("B04", "B03", "B02"))
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "s.tif"),
                 "--output", str(tmp_path / "maps"), "--no-progress"]) == 0
    with rasterio.open(tmp_path / "maps" / "s_landcover.tif") as src:
        landcover, nodata = src.read(1), src.nodata
    assert ((landcover == nodata) == hidden).all()
