"""Small, imbalanced, noisy label sets like a real analyst's (issue 38): a test bed for training, not a default.

A real label set is one or a few scenes of few bands with a national land-cover map as labels: two classes hold
~90 % of the pixels, several hold under 1 %, and the labels are a little off at class boundaries (another
sensor's grid, generalised polygons). `write_imbalanced` writes such a case as ordinary inputs of `eoscale ingest`:

    paths = write_imbalanced("runs/imb", seed=0)       # scene.tif (4 bands, 30 m), labels.tif, classes.csv
    eoscale ingest --scenes runs/imb/scene*.tif --labels runs/imb/labels*.tif --classes runs/imb/classes.csv \\
        --tile-size 64 --output runs/imb/tiles.zarr

The scene is Landsat-like: blue, green, red and NIR surface reflectance (`SR_B2` … `SR_B5`, uint16 at
×10000, 30 m, UTM 32N). The classes are the US national land-cover map's eight: forest and shrubland dominate
(about 50 % and 40 %), herbaceous and cultivated land take a few per cent, developed, barren and wetlands about 1 %
or less and water about 0.2 %. Pixels alone do not tell every class apart, as in real scenes: shrubland is a mix of
tree crowns and soil whose pixels overlap forest's and barren's; cultivated fields have herbaceous spectra but are
homogeneous parcels with straight edges; developed land mixes roofs, roads and gardens. Spatial context (texture,
shape) separates them, which a per-pixel forest cannot use. Reflectances are blurred over boundaries (mixed
pixels), and the label raster is the class map displaced by a smooth random field of up to ~1.5 px (boundary noise).
The same seed writes the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from scipy import ndimage

from eoscale.synth.noise import quantile_mask, smooth_noise

BANDS = ("SR_B2", "SR_B3", "SR_B4", "SR_B5")  # blue, green, red, NIR (Landsat 8/9 OLI)
# (code, name, colour, mean reflectance in blue, green, red, NIR): NLCD's classes and colours
CLASSES = (
    (11, "Open water", "#476ba1", (0.06, 0.07, 0.05, 0.03)),
    (21, "Developed", "#de3021", (0.10, 0.11, 0.12, 0.20)),
    (31, "Barren", "#b3aea3", (0.12, 0.15, 0.19, 0.26)),
    (41, "Forest", "#38814e", (0.03, 0.05, 0.035, 0.30)),
    (52, "Shrubland", "#dcca8f", (0.05, 0.075, 0.08, 0.27)),
    (71, "Herbaceous", "#fde9aa", (0.05, 0.09, 0.07, 0.36)),
    (82, "Cultivated", "#aa7028", (0.05, 0.09, 0.07, 0.38)),
    (90, "Wetlands", "#ba2725", (0.04, 0.06, 0.05, 0.16)),
)
WATER, DEVELOPED, BARREN, FOREST, SHRUB, HERBACEOUS, CULTIVATED, WETLAND = range(8)
PIXEL = 30.0
CRS = "EPSG:32632"


@dataclass(frozen=True)
class ImbalancedSet:
    scenes: list[Path]
    labels: list[Path]
    classes: Path
    fractions: dict[str, float]  # each class's share of the labelled pixels, all scenes together


def class_map(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Class indices: forest and shrubland everywhere, patches of the others, a thin river."""
    h, w = shape
    classes = np.where(smooth_noise(shape, 40, rng) > -0.25, FOREST, SHRUB).astype(np.uint8)
    classes[quantile_mask(smooth_noise(shape, 12, rng), 0.04)] = HERBACEOUS
    fields = np.zeros(shape, dtype=bool)  # rectangular parcels in one corner of the scene
    for _ in range(max(1, h * w // 40_000)):
        r, c = rng.integers(0, h - 24), rng.integers(0, w - 24)
        fields[r : r + rng.integers(8, 24), c : c + rng.integers(8, 24)] = True
    classes[fields] = CULTIVATED
    town = quantile_mask(smooth_noise(shape, 10, rng), 0.012)
    classes[town] = DEVELOPED
    classes[quantile_mask(smooth_noise(shape, 4, rng), 0.005)] = BARREN
    river = np.abs(np.arange(w)[None, :] - (w * 0.6 + 0.15 * w * smooth_noise((h, 1), 60, rng))) < 1.0
    ponds = quantile_mask(smooth_noise(shape, 5, rng), 0.001)
    wet = ndimage.binary_dilation(river | ponds, iterations=1) & ~(river | ponds)
    classes[wet & (smooth_noise(shape, 3, rng) > -0.3)] = WETLAND
    classes[river | ponds] = WATER
    return classes


def reflectance(classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(4, H, W) reflectance: class spectra with texture, parcels and mixtures, blurred over boundaries."""
    means = np.asarray([c[3] for c in CLASSES], dtype=np.float32)
    shape = classes.shape
    image = means[classes].transpose(2, 0, 1).copy()
    # shrubland: tree crowns over soil, the crown cover varying pixel by pixel (overlaps forest and barren)
    cover = np.clip(0.55 + 0.25 * rng.standard_normal(shape), 0, 1).astype(np.float32)
    soil = means[BARREN][:, None, None]
    shrub = cover * means[FOREST][:, None, None] + (1 - cover) * soil
    image = np.where(classes == SHRUB, shrub, image)
    # cultivated: every parcel its own crop stage, flat inside (herbaceous varies pixel by pixel instead)
    parcels, _ = ndimage.label(classes == CULTIVATED)
    stage = rng.normal(0, 0.06, parcels.max() + 1).astype(np.float32)
    image[3] += np.where(classes == CULTIVATED, stage[parcels], 0)
    image[:3] -= np.where(classes == CULTIVATED, stage[parcels] * 0.15, 0)
    herb = classes == HERBACEOUS
    image += np.where(herb, 0.05 * rng.standard_normal(shape).astype(np.float32), 0)
    # developed: roofs and roads (bright) and gardens (vegetation), mixed pixel by pixel
    roofs = rng.random(shape) < 0.5
    built = np.where(roofs, means[BARREN][:, None, None] * 1.1, means[HERBACEOUS][:, None, None])
    image = np.where(classes == DEVELOPED, built, image)
    image *= 1 + 0.08 * smooth_noise(shape, 20, rng)  # illumination and moisture, smooth across the scene
    image += 0.012 * rng.standard_normal(image.shape).astype(np.float32)  # sensor noise
    image = ndimage.gaussian_filter(image, sigma=(0, 0.6, 0.6))  # mixed pixels at boundaries
    return np.clip(image, 0.001, 1.0)


def noisy_labels(classes: np.ndarray, rng: np.random.Generator, *, shift: float = 1.5) -> np.ndarray:
    """`classes` displaced by a smooth random field of up to about `shift` px: labels off at the boundaries."""
    h, w = classes.shape
    dy, dx = (shift * np.clip(smooth_noise(classes.shape, 15, rng), -1.5, 1.5) / 1.5 for _ in range(2))
    rows = np.clip(np.rint(np.arange(h)[:, None] + dy), 0, h - 1).astype(int)
    cols = np.clip(np.rint(np.arange(w)[None, :] + dx), 0, w - 1).astype(int)
    return classes[rows, cols]


def write_imbalanced(folder: str | Path, *, seed: int = 0, scenes: int = 1, size: int = 512) -> ImbalancedSet:
    """Write `scenes` scenes of `size`² px with their label rasters and the class table into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, labels, counts = [], [], np.zeros(len(CLASSES), dtype=np.int64)
    for index in range(scenes):
        rng = np.random.default_rng([seed, index])
        classes = class_map((size, size), rng)
        image = np.rint(reflectance(classes, rng) * 10_000).astype(np.uint16)
        label = noisy_labels(classes, rng)
        codes = np.asarray([c[0] for c in CLASSES], dtype=np.uint8)[label]
        transform = Affine.translation(300_000.0 + index * (size + 10) * PIXEL, 5_650_000.0) * Affine.scale(PIXEL, -PIXEL)
        profile = dict(driver="GTiff", height=size, width=size, crs=CRS, transform=transform, tiled=True,
                       blockxsize=256, blockysize=256, compress="deflate", nodata=0)
        scene, label_path = folder / f"scene{index}.tif", folder / f"labels{index}.tif"
        with rasterio.open(scene, "w", count=len(BANDS), dtype="uint16", **profile) as dst:
            dst.write(image)
            for band, name in enumerate(BANDS, start=1):
                dst.set_band_description(band, name)
        with rasterio.open(label_path, "w", count=1, dtype="uint8", **profile) as dst:
            dst.write(codes, 1)
        written.append(scene)
        labels.append(label_path)
        counts += np.bincount(label.ravel(), minlength=len(CLASSES))
    table = folder / "classes.csv"
    table.write_text("code,name,color\n" + "".join(f"{c[0]},{c[1]},{c[2]}\n" for c in CLASSES))
    fractions = {c[1]: float(n / counts.sum()) for c, n in zip(CLASSES, counts, strict=True)}
    return ImbalancedSet(written, labels, table, fractions)
