"""Synthetic change: a second date of each scene with known land-cover changes, and the change labels.

`eoscale synth --change` writes, beside each scene (the first date, the same pixels as without the option), the
same place a year later (`scenes/<id>_after.tif`), its land cover (`labels/<id>_after_landcover.tif`) and the
change between the two (`labels/<id>_change.tif`, codes of `CHANGE_TABLE`, in the label rasters' CRS and
resolution). Each date carries its acquisition date in its GeoTIFF tags (`ACQUISITIONDATETIME`), which is where
eoscale reads a plain GeoTIFF's date from (`eoscale.raster.scene.tiff_date`), never a file time.

The changes are the ones change maps are asked for (Olofsson et al. 2014's deforestation example; the European
land-cover change accounts):

    forest loss            clear-cuts inside forest stands: tree cover -> bare soil (a fresh cut) or grassland
    new built-up           settlements growing at their edges into cropland and grassland
    cropland expansion     whole grassland parcels ploughed
    water gain / loss      floods over low land beside water; water bodies shrinking to wetland and mud

Changes are rare (a few per cent of a scene, as in real pairs), come as objects of realistic size (clear-cuts of
1-10 ha, parcels, settlement edges), and the second date is a new acquisition: its own spectra, noise and clouds,
so that unchanged land does not look the same byte for byte and a model must tell change from a different day.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from scipy import ndimage

from eoscale.classes import ClassTable, LandCoverClass
from eoscale.synth.landcover import BARE, BUILT, CROP, GRASS, TREE, WATER, WETLAND, LandCover, blob_mask

STABLE, FOREST_LOSS, NEW_BUILT, CROP_EXPANSION, WATER_GAIN, WATER_LOSS = 1, 2, 3, 4, 5, 6
CHANGE_TABLE = ClassTable((
    LandCoverClass(STABLE, "no change", "#d9d9d9"),
    LandCoverClass(FOREST_LOSS, "forest loss", "#e31a1c"),
    LandCoverClass(NEW_BUILT, "new built-up", "#6a3d9a"),
    LandCoverClass(CROP_EXPANSION, "cropland expansion", "#ff7f00"),
    LandCoverClass(WATER_GAIN, "water gain", "#1f78b4"),
    LandCoverClass(WATER_LOSS, "water loss", "#b15928"),
))
CHANGE_TABLE_FILE = "change_classes.csv"
FIRST_DATE = dt.date(2023, 6, 14)  # scene i's first date; its second is a year and a few days later
SECOND_DATE = dt.date(2024, 6, 20)


def change_landcover(before: LandCover, rng: np.random.Generator) -> tuple[LandCover, np.ndarray]:
    """The land cover a year after `before`, and the change code of every pixel (`CHANGE_TABLE`; 0 where the
    first date has no class). Regions are kept: a changed pixel takes its new class's spectra in its region."""
    classes = before.classes.copy()
    shape = classes.shape
    area_km2 = shape[0] * shape[1] * 1e-4
    change = np.where(before.classes > 0, STABLE, 0).astype(np.uint8)

    def apply(mask: np.ndarray, new_class: np.ndarray | int, code: int) -> None:
        classes[mask] = new_class if np.isscalar(new_class) else np.asarray(new_class)[mask]
        change[mask] = code

    # forest loss: clear-cuts of 1-10 ha (radius 6-18 px) centred in forest, only forest pixels change
    forest = before.classes == TREE
    for _ in range(_count(rng, area_km2 / 8, forest)):
        centre = _pick(forest, rng)
        cut = blob_mask(shape, centre, rng.uniform(6, 18), rng, roughness=0.25) & forest & (change == STABLE)
        apply(cut, BARE if rng.random() < 0.6 else GRASS, FOREST_LOSS)

    # new built-up: settlements grow at their edge into farmland
    built = before.classes == BUILT
    farmland = np.isin(before.classes, (CROP, GRASS))
    edge = ndimage.binary_dilation(built, iterations=3) & farmland
    for _ in range(_count(rng, area_km2 / 10, edge)):
        centre = _pick(edge, rng)
        grow = blob_mask(shape, centre, rng.uniform(5, 14), rng, roughness=0.3) & farmland & (change == STABLE)
        apply(grow, BUILT, NEW_BUILT)

    # cropland expansion: whole grassland regions (parcels) ploughed
    grass_regions = np.unique(before.regions[before.classes == GRASS])
    if grass_regions.size:
        chosen = rng.choice(grass_regions, size=max(1, int(round(grass_regions.size * 0.08))), replace=False)
        ploughed = np.isin(before.regions, chosen) & (before.classes == GRASS) & (change == STABLE)
        apply(ploughed, CROP, CROP_EXPANSION)

    # water: floods over low land beside water, and shrinking water bodies (to wetland or mud)
    water = before.classes == WATER
    shore = ndimage.binary_dilation(water, iterations=2) & ~water
    for _ in range(_count(rng, area_km2 / 15, shore)):
        centre = _pick(shore, rng)
        flood = blob_mask(shape, centre, rng.uniform(4, 10), rng) & np.isin(before.classes, (GRASS, CROP, WETLAND))
        apply(flood & (change == STABLE), WATER, WATER_GAIN)
    inner_edge = water & ~ndimage.binary_erosion(water, iterations=3)
    for _ in range(_count(rng, area_km2 / 15, inner_edge)):
        centre = _pick(inner_edge, rng)
        dry = blob_mask(shape, centre, rng.uniform(4, 10), rng) & water & (change == STABLE)
        apply(dry, WETLAND if rng.random() < 0.5 else BARE, WATER_LOSS)

    after = LandCover(classes=classes, regions=before.regions, n_regions=before.n_regions)
    return after, change


def _count(rng: np.random.Generator, mean: float, where: np.ndarray) -> int:
    """How many objects of one kind: Poisson around `mean` (at least one), none where there is no room."""
    return 0 if not where.any() else max(1, int(rng.poisson(mean)))


def _pick(mask: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    ys, xs = np.nonzero(mask)
    i = int(rng.integers(len(ys)))
    return float(ys[i]), float(xs[i])


def date_tags(date: dt.date) -> dict[str, str]:
    """GeoTIFF tags that carry a scene's acquisition date where `tiff_date` reads it."""
    return {"ACQUISITIONDATETIME": f"{date.isoformat()}T10:30:00Z"}


def dates_of(index: int) -> tuple[dt.date, dt.date]:
    """Scene `index`'s two dates: a few days apart between scenes, as neighbouring orbits are."""
    shift = dt.timedelta(days=5 * index)
    return FIRST_DATE + shift, SECOND_DATE + shift


def change_areas(change: np.ndarray, pixel_area_m2: float) -> dict[str, float]:
    """Hectares of each change class in a change-code raster (the truth a change map's areas are checked on)."""
    counts = np.bincount(change.ravel(), minlength=max(CHANGE_TABLE.codes) + 1)
    return {c.name: float(counts[c.code] * pixel_area_m2 / 1e4) for c in CHANGE_TABLE.classes}


def write_change_table(folder: Path) -> Path:
    path = folder / CHANGE_TABLE_FILE
    CHANGE_TABLE.save(path)
    return path
