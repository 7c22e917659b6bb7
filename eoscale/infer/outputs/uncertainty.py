"""The layers that say how sure a class map is: `predict --uncertainty entropy|margin` and `--probabilities`.

Per scene, beside the class map (`eoscale.infer.outputs.classes` writes them from the same blended blocks):

    <scene>_uncertainty.tif     COG, uint8 0–100: how unsure the model is, in percent (nodata 255, average overviews)
                                entropy: Shannon entropy of the class probabilities / log C (0 certain, 100 all
                                classes equally likely); margin: 1 − (top-1 − top-2 probability), as sits'
                                `sits_uncertainty(type = "margin")` (0 certain, 100 a tie)
    <scene>_probabilities.tif   COG of one band a class (band descriptions = class names), uint8 0–200: the
                                probability × 200 (scale 0.005 in the band metadata, so GDAL and rasterio read
                                probabilities; nodata 255, average overviews)

The probabilities are the checkpoint's calibrated ones (the contract's temperature, `eoscale calibrate`); both layers
are made block by block in the parts like the class map and copied into COGs by rows, so memory does not grow with
the scene. The measures themselves are `eoscale.models.uncertainty`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio

from eoscale.infer.config import UNCERTAINTY  # noqa: E402  (the flag's choices, defined without torch)
from eoscale.infer.outputs.rasters import BLOCKSIZE, Georef, Piece, _rows
from eoscale.models.uncertainty import entropy, margin

UNCERTAINTY_NODATA = 255
PROBABILITY_STEPS = 200  # a stored probability is round(p × 200): 0.005 a step, and 255 stays free for nodata
PROBABILITY_NODATA = 255
UNCERTAINTY_SUFFIX, PROBABILITIES_SUFFIX = ".uncertainty", ".probabilities"
DESCRIPTIONS = {
    "entropy": "uncertainty: entropy of the class probabilities / log(classes), percent",
    "margin": "uncertainty: 1 - (top-1 - top-2 class probability), percent",
}


def uncertainty(probs: np.ndarray, kind: str) -> np.ndarray:
    """How unsure each pixel is, 0 (certain) .. 1, from its class probabilities `(classes, y, x)`."""
    if kind == "entropy":
        return entropy(probs)
    if kind == "margin":
        return 1.0 - margin(probs)
    raise ValueError(f"uncertainty {kind!r} is not one of {', '.join(UNCERTAINTY[1:])}")


def uncertainty_rows(probs: np.ndarray, valid: np.ndarray, kind: str) -> np.ndarray:
    """A block's stored uncertainty: percent, uint8, `UNCERTAINTY_NODATA` where the input has nodata."""
    percent = np.clip(np.round(uncertainty(probs, kind) * np.float32(100)), 0, 100).astype(np.uint8)
    percent[~valid] = UNCERTAINTY_NODATA
    return percent


def probability_rows(probs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """A block's stored probabilities `(rows, classes, columns)` (row by row, as a part file holds rows), uint8."""
    stored = np.clip(np.round(probs * np.float32(PROBABILITY_STEPS)), 0, PROBABILITY_STEPS).astype(np.uint8)
    stored[:, ~valid] = PROBABILITY_NODATA
    return stored.transpose(1, 0, 2)


def write_probabilities_cog(pieces: list[Piece], dst: Path, georef: Georef, class_names: list[str], *,
                            tags: dict | None = None) -> None:
    """The pieces' probability rows (`piece.path` + `.probabilities`) as a multi-band COG at `dst`: a tiled,
    band-interleaved staging GeoTIFF filled `BLOCKSIZE` rows of one piece at a time, then copied by GDAL's COG driver
    (as `eoscale.infer.outputs.rasters.write_cog` does for one band)."""
    from rasterio import shutil as rio_shutil

    classes = len(class_names)
    staging = dst.with_name(dst.name + ".tiled.tif")
    profile = dict(driver="GTiff", width=georef.width, height=georef.height, count=classes, dtype="uint8",
                   nodata=PROBABILITY_NODATA, crs=georef.crs, transform=georef.transform, tiled=True,
                   blockxsize=BLOCKSIZE, blockysize=BLOCKSIZE, interleave="band", BIGTIFF="IF_SAFER")
    try:
        with rasterio.open(staging, "w", **profile) as out:
            for piece in pieces:
                row = piece.row
                for strip in _rows(piece.path.with_suffix(PROBABILITIES_SUFFIX), piece.columns * classes, "uint8",
                                   BLOCKSIZE):
                    bands = strip.reshape(-1, classes, piece.columns).transpose(1, 0, 2)
                    out.write(bands, window=rasterio.windows.Window(piece.col, row, piece.columns, bands.shape[1]))
                    row += bands.shape[1]
            out.update_tags(**(tags or {}), OVERVIEW_RESAMPLING="AVERAGE", EOSCALE_PROBABILITY_SCALE=str(1 / PROBABILITY_STEPS))
            out.scales = (1.0 / PROBABILITY_STEPS,) * classes
            out.offsets = (0.0,) * classes
            for band, name in enumerate(class_names, start=1):
                out.set_band_description(band, name)
        with rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS"):
            rio_shutil.copy(staging, dst, driver="COG", COMPRESS="DEFLATE", BLOCKSIZE=BLOCKSIZE,
                            OVERVIEW_RESAMPLING="AVERAGE", NUM_THREADS="ALL_CPUS", BIGTIFF="IF_SAFER")
    finally:
        staging.unlink(missing_ok=True)
