"""A synthetic season (`eoscale synth --dates N`): N dated acquisitions of each place through one year.

Each place is one land-cover map (`eoscale.synth.landcover`, refined into the season's classes of
`eoscale.synth.phenology`: cropland parcels become winter cereal or maize, forest stands deciduous or evergreen) seen
on the days `phenology.season_days(N)` of 2024. Every region (a field, a stand) draws its endmember spectra once for
the year and a few days' shift of its calendar; on each date the class calendars give the endmember fractions, so a
field's spectrum follows its crop through the year. Each date then gets its own clouds (with their shadows),
illumination, sensor blur and noise, as `eoscale.synth.render` renders one scene.

Clouds are written as each layout marks them: nodata 0 in every band of a multi-band file; for Sentinel-2 SAFE
products and COG folders, bright cloud tops in the bands that the SCL layer marks as cloud (class 8), so that only
the mask says where the surface is hidden. Some places miss some dates (an acquisition lost to a failed download or
to the swath), at least one place in a season of four dates or more.

Layout of a season (paths relative to the set):

    scenes/place_000/place_000_20240214.tif          multiband: 10 bands at 10 m, ACQUISITIONDATETIME tag
    scenes/place_000/S2A_MSIL2A_20240214T103031_…SAFE safe: a Sentinel-2 L2A product a date (MTD PRODUCT_START_TIME)
    scenes/place_000/S2A_32ULB_20240214_0_L2A/        cog: COGs and a STAC Item whose `datetime` is the date
    dates.csv                                         every scene with its date and place (path,date,place)
    labels/place_000_landcover.tif                    the season's class codes (EPSG:3035, 20 m)

Place i's date j depends only on (seed, i, j, size and the cloud fraction).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import ndimage

from eoscale.bands import REFLECTANCE_SCALE, SENTINEL2_L2A
from eoscale.errors import InputError
from eoscale.synth.cog import write_cog
from eoscale.synth.landcover import BARE as WC_BARE
from eoscale.synth.landcover import BUILT as WC_BUILT
from eoscale.synth.landcover import CROP as WC_CROP
from eoscale.synth.landcover import GRASS as WC_GRASS
from eoscale.synth.landcover import SHRUB as WC_SHRUB
from eoscale.synth.landcover import TREE as WC_TREE
from eoscale.synth.landcover import WATER as WC_WATER
from eoscale.synth.landcover import WETLAND as WC_WETLAND
from eoscale.synth.landcover import generate_landcover
from eoscale.synth.noise import fbm, quantile_mask
from eoscale.synth.phenology import (
    BARE,
    BUILT,
    DECIDUOUS,
    EVERGREEN,
    GRASSLAND,
    MAIZE,
    PHASE_JITTER_DAYS,
    SEASON_CLASSES,
    SHRUB,
    WATER,
    WETLAND,
    WINTER_CEREAL,
    class_fractions,
    season_days,
)
from eoscale.synth.render import (
    NOISE_REFLECTANCE,
    PSF_SIGMA_PX,
    SHADOW_ILLUMINATION,
    block_mean,
    coarse_shape,
    to_uint16,
    upsample,
)
from eoscale.synth.safe import write_safe
from eoscale.synth.scene import scene_transform, write_labels, write_multiband
from eoscale.synth.spectra import KINDS, endmember_library

SEASON_LAYOUTS = ("multiband", "safe", "cog")
YEAR = 2024
SENSING_TIME = dt.time(10, 30, 31)  # Sentinel-2's overpass over the Rhineland, about 10:30 local solar time
DATES_FILE = "dates.csv"
CEREAL_SHARE = 0.55  # of cropland parcels (the rest maize), as in the Jülich Börde's rotations
DECIDUOUS_SHARE = 0.6  # of forest stands (the rest conifers)
OVERCAST_CHANCE = 0.15  # a date under nearly complete cloud
SEASON_CLOUD_FRACTION = 0.2  # the mean share of a date under cloud (`eoscale synth --dates` default)
# WorldCover class of the single-date map -> season class (cropland and tree cover are split by region below)
_FROM_WORLDCOVER = {WC_GRASS: GRASSLAND, WC_SHRUB: SHRUB, WC_BUILT: BUILT, WC_BARE: BARE, WC_WATER: WATER,
                    WC_WETLAND: WETLAND}


def place_id(place: int) -> str:
    return f"place_{place:03d}"


def mgrs_tile(place: int) -> str:
    """A Sentinel-2 tile name for place `place` (the first one 32ULB, as the single-date products)."""
    letters = "BCDEFGHJKLMNPQRSTUVWXYZA"
    return f"T32U{'LMNPQ'[place // len(letters) % 5]}{letters[place % len(letters)]}"


def acquisition_dates(dates: int) -> list[dt.datetime]:
    """The sensing times of a season of `dates` acquisitions in `YEAR`."""
    start = dt.datetime.combine(dt.date(YEAR, 1, 1), SENSING_TIME)
    return [start + dt.timedelta(days=int(day) - 1) for day in season_days(dates)]


def missing_dates(place: int, dates: int, seed: int) -> set[int]:
    """Which of the `dates` acquisitions place `place` lacks: about one in ten, always one of place 0's from four
    dates on, never the first or the last, and never more than a third."""
    if dates < 4:
        return set()
    rng = np.random.default_rng([seed, place, 1])
    lost = {int(j) for j in np.flatnonzero(rng.random(dates) < 0.1) if 0 < j < dates - 1}
    if place == 0 and not lost:
        lost = {int(rng.integers(1, dates - 1))}
    return set(sorted(lost)[: dates // 3])


def season_landcover(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """(season class codes, region ids, number of regions) of one place: the WorldCover map with its cropland
    parcels split into winter cereal and maize and its forest stands into deciduous and evergreen, region by region."""
    cover = generate_landcover(shape, rng)
    cereal = rng.random(cover.n_regions) < CEREAL_SHARE
    deciduous = rng.random(cover.n_regions) < DECIDUOUS_SHARE
    classes = np.zeros(shape, np.uint8)
    for code, season in _FROM_WORLDCOVER.items():
        classes[cover.classes == code] = season
    crop, tree = cover.classes == WC_CROP, cover.classes == WC_TREE
    classes[crop] = np.where(cereal[cover.regions], WINTER_CEREAL, MAIZE)[crop]
    classes[tree] = np.where(deciduous[cover.regions], DECIDUOUS, EVERGREEN)[tree]
    return classes, cover.regions, cover.n_regions


def region_endmembers(n_regions: int, rng: np.random.Generator) -> np.ndarray:
    """(region, kind, band) float32: the endmember spectra each region holds all year, drawn from the same pools
    whatever the region's class (so classes in the same state on a date look alike)."""
    library = endmember_library()
    pools = library.spectra
    canopies = np.flatnonzero((library.vegetation_lai >= 2.0) & (library.vegetation_lai <= 8.0))
    out = np.empty((n_regions, len(KINDS), len(SENTINEL2_L2A)), np.float32)
    for k, kind in enumerate(KINDS):
        if kind == "vegetation":
            out[:, k] = pools[kind][canopies[rng.integers(len(canopies), size=n_regions)]]
        elif kind == "water":
            turbidity = rng.beta(1.5, 2.5, size=(n_regions, 1)).astype(np.float32)
            out[:, k] = (1 - turbidity) * pools[kind][0] + turbidity * pools[kind][1]
        else:
            out[:, k] = pools[kind][rng.integers(len(pools[kind]), size=n_regions)]
            if kind == "soil":
                out[:, k] *= rng.uniform(0.8, 1.0, size=(n_regions, 1)).astype(np.float32)
    return out


class Place:
    """One place of a season: its classes, regions and their year-long properties, rendered date by date."""

    def __init__(self, index: int, shape: tuple[int, int], seed: int) -> None:
        rng = np.random.default_rng([seed, index, 0])
        self.index, self.shape = index, shape
        self.classes, self.regions, n_regions = season_landcover(shape, rng)
        self.endmembers = region_endmembers(n_regions, rng)
        self.phase = np.clip(rng.normal(0.0, PHASE_JITTER_DAYS / 2, n_regions), -PHASE_JITTER_DAYS, PHASE_JITTER_DAYS)
        self.abundance = rng.uniform(0.9, 1.1, size=(n_regions, len(KINDS))).astype(np.float32)
        self.brightness = (1.0 + 0.05 * fbm(shape, (2.0, 6.0), rng)).astype(np.float32)
        self.seed = seed

    def reflectance(self, day: int) -> np.ndarray:
        """Surface reflectance (band, y, x) float32 on day of year `day`, before clouds and the sensor."""
        codes = SEASON_CLASSES.codes
        index = np.zeros(256, np.intp)
        index[codes] = np.arange(len(codes))
        table = np.empty((len(codes), len(self.phase), len(SENTINEL2_L2A)), np.float32)
        for c, code in enumerate(codes):
            fractions = class_fractions(code, day + self.phase) * self.abundance
            fractions /= fractions.sum(axis=1, keepdims=True)
            table[c] = np.einsum("rk,rkb->rb", fractions, self.endmembers)
        return np.moveaxis(table[index[self.classes], self.regions], -1, 0) * self.brightness

    def render(self, date: int, day: int, cloud_fraction: float) -> tuple[list[np.ndarray], np.ndarray]:
        """Date `date` (its index in the season, on day of year `day`): uint16 bands at their resolutions (as
        `render.render_scene` renders them, with no nodata: each layout writes the clouds its own way) and the cloud
        mask on the 20 m grid."""
        rng = np.random.default_rng([self.seed, self.index, 2, date])
        reflectance = self.reflectance(day) * np.float32(rng.uniform(0.97, 1.03))
        clouds, shadows = date_clouds(coarse_shape(self.shape), rng, cloud_fraction)
        reflectance[:, upsample(shadows, self.shape)] *= SHADOW_ILLUMINATION
        np.maximum(reflectance, 0.0, out=reflectance)
        none = np.zeros(self.shape, bool)
        out = []
        for b, band in enumerate(SENTINEL2_L2A):
            image = ndimage.gaussian_filter(reflectance[b], PSF_SIGMA_PX, mode="nearest")
            if band.resolution_m == 20:
                image = block_mean(image)
            image = image + NOISE_REFLECTANCE[b] * rng.standard_normal(image.shape, dtype=np.float32)
            out.append(to_uint16(image, none[: image.shape[0], : image.shape[1]]))
        return out, clouds


def date_clouds(shape: tuple[int, int], rng: np.random.Generator, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Clouds and their shadows on the 20 m grid of one date: cover about `fraction` (0.2x to 1.8x it), and now and
    then (`OVERCAST_CHANCE`) nearly overcast."""
    none = np.zeros(shape, bool)
    overcast = rng.random() < OVERCAST_CHANCE
    if fraction <= 0:
        return none, none
    cover = 0.9 if overcast else min(0.9, fraction * rng.uniform(0.2, 1.8))
    clouds = quantile_mask(fbm(shape, (60.0, 20.0, 6.0), rng), cover)
    dy, dx = int(rng.integers(4, 16)), int(rng.integers(4, 16))
    shadows = np.zeros(shape, bool)
    shadows[: shape[0] - dy, : shape[1] - dx] = clouds[dy:, dx:]
    return clouds, shadows & ~clouds


def write_season(
    root: Path, *, places: int, dates: int, shape: tuple[int, int], seed: int, layout: str, cloud_fraction: float,
    baseline: str, on_scene: Callable[[int, str], None] | None = None,
) -> list[dict]:
    """Write `places` places × `dates` dates (less the missing ones) under `root` in `layout`, their label rasters
    and `DATES_FILE`; returns one manifest record a scene (id, place, date, files, labels, bounds)."""
    (root / "scenes").mkdir(exist_ok=True)
    (root / "labels").mkdir(exist_ok=True)
    sensing = acquisition_dates(dates)
    days = season_days(dates)
    records: list[dict] = []
    for p in range(places):
        place = Place(p, shape, seed)
        pid = place_id(p)
        transform = scene_transform(p, shape)
        folder = root / "scenes" / pid
        folder.mkdir()
        labels = f"labels/{pid}_landcover.tif"
        write_labels(root / labels, place.classes, transform, SEASON_CLASSES, {"scene_id": pid, "source": "eoscale synth"})
        west, north = transform.c, transform.f
        bounds = [west, north - shape[0] * 10.0, west + shape[1] * 10.0, north]
        lost = missing_dates(p, dates, seed)
        for j, when in enumerate(sensing):
            if j in lost:
                continue
            bands, clouds = place.render(j, int(days[j]), cloud_fraction)
            record = {"id": f"{pid}_{when:%Y%m%d}", "place": pid, "date": when.date().isoformat()}
            record.update(_write_date(root, folder, pid, p, j, when, bands, clouds, transform, layout, baseline, seed))
            record.update(labels=labels, bounds=bounds)
            records.append(record)
            if on_scene is not None:
                on_scene(len(records) - 1, record["id"])
    with (root / DATES_FILE).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "date", "place"])
        for r in records:
            writer.writerow([r.get("image") or r.get("product") or r["item"], r["date"], r["place"]])
    return records


def _write_date(root: Path, folder: Path, pid: str, p: int, j: int, when: dt.datetime, bands: list[np.ndarray],
                clouds: np.ndarray, transform, layout: str, baseline: str, seed: int) -> dict:
    """Write one dated scene; returns its manifest fields (relative paths)."""
    if layout == "multiband":
        bands = [np.where(c, np.uint16(0), b) for b, c in
                 ((b, clouds if b.shape == clouds.shape else upsample(clouds, b.shape)) for b in bands)]
        path = folder / f"{pid}_{when:%Y%m%d}.tif"
        tags = {"scene_id": path.stem, "place": pid, "generator": "eoscale synth --dates (synthetic Sentinel-2 L2A)",
                "seed": str(seed), "reflectance_scale": str(REFLECTANCE_SCALE),
                "ACQUISITIONDATETIME": f"{when.isoformat()}Z"}
        write_multiband(path, bands, bands[0].shape, transform, tags)
        return {"image": str(path.relative_to(root))}
    sensing = f"{when:%Y%m%dT%H%M%S}"
    if layout == "safe":
        written = write_safe(folder, j, bands, transform, baseline=baseline, sensing=sensing, tile=mgrs_tile(p),
                             cloud=clouds)
        return {"product": f"scenes/{pid}/{written['product']}",
                "bands": {band: f"scenes/{pid}/{path}" for band, path in written["bands"].items()}}
    written = write_cog(folder, j, bands, transform, baseline=baseline, sensing=sensing, tile=mgrs_tile(p),
                        cloud=clouds)
    return {"folder": f"scenes/{pid}/{written['folder']}", "item": f"scenes/{pid}/{written['item']}",
            "bands": {band: f"scenes/{pid}/{path}" for band, path in written["bands"].items()}}


def check_season(dates: object, layout: str) -> None:
    """The arguments a season takes: a whole number of dates, at least 1, in a layout that records dates."""
    if isinstance(dates, bool) or not isinstance(dates, (int, np.integer)) or not 1 <= dates <= 366:
        raise InputError(f"dates={dates!r}: give a whole number of dates a place, 1 to 366")
    if layout not in SEASON_LAYOUTS:
        raise InputError(f"--dates with --layout {layout}: a season is written as {', '.join(SEASON_LAYOUTS)}; "
                         f"choose one of them")
