"""Land-cover maps for synthetic scenes: spatially coherent ESA WorldCover classes on a 10 m grid.

The landscape is modelled on the Lower Rhine Bay around Jülich and built in layers, later layers on top:
cropland parcels in rotated strip blocks, striped by tramlines; meadow orchards on some parcels; irregular
natural grassland; forest blobs with shrubland at their edges and in clearings; bare open-pit and quarry
areas; villages; lakes and a meandering river; herbaceous wetland near the water; roads (built-up) and farm
tracks (bare). Sizes are in pixels of 10 m and do not depend on the scene size, so a small scene is a
cut-out of the same landscape, not a shrunken one.

It is a world where context matters, as it does in real imagery: several classes cannot be told apart by
one pixel's spectrum, only by their neighbourhood. A village is a texture of roofs (bare-soil spectra),
gardens (grass) and streets, labelled built-up as a whole; a green crop field and a meadow share spectra,
but the field has straight edges and stripes; an orchard (tree cover) is tree crowns on grass in rows; a bare
field and a quarry differ in shape. Labels carry the uncertainty of reference maps at class boundaries.

Besides the class map, `generate_landcover` returns what each pixel shows (`surfaces`) and a region map (a
field parcel, a forest stand or a house per id) so that the renderer can give every region its own spectrum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from eoscale.synth.noise import fbm, quantile_mask, smooth_noise

TREE, SHRUB, GRASS, CROP, BUILT, BARE, WATER, WETLAND = 10, 20, 30, 40, 50, 60, 80, 90
# The ESA WorldCover codes a synthetic map uses (snow, mangroves and moss do not occur near Jülich).
CLASS_CODES: tuple[int, ...] = (TREE, SHRUB, GRASS, CROP, BUILT, BARE, WATER, WETLAND)


@dataclass(frozen=True)
class LandCover:
    """A class map, what each pixel is physically made of, and the regions that get their own spectra.

    `classes` is the label (what a land-cover map should say); `surfaces` is the class whose spectrum the pixel
    shows. They differ where only the neighbourhood tells the class: a village's roofs show bare-soil spectra
    and its gardens grassland ones, yet the village is built-up; an orchard is tree cover (WorldCover counts
    orchards as trees) made of tree crowns on grass. `rows` is the vegetation-cover pattern of crop rows and
    tramlines (-1..1, 0 off cropland), which the renderer turns into stripes.
    """

    classes: np.ndarray  # (height, width) uint8 WorldCover codes: the labels
    regions: np.ndarray  # (height, width) int32 region ids in 0..n_regions-1
    n_regions: int
    surfaces: np.ndarray | None = None  # (height, width) uint8 WorldCover codes whose spectra render; None: classes
    rows: np.ndarray | None = None  # (height, width) float32 crop-row pattern; None: none


# How the default world is made; each is a share of the scene or a size in 10 m pixels.
VILLAGES_PER_KM2 = 0.12  # the Börde's villages lie 2-4 km apart
GRASSLAND_SHARE = 0.12  # natural and semi-natural grassland: irregular meadows, not parcels
ORCHARD_SHARE = 0.05  # of the farmland parcels: orchards (tree rows on grass), labelled tree cover
PLOT_SPACING = 2.2  # village plots about 20-25 m across: a house, a garden or a yard each
ROOF_SHARE = 0.55  # of village plots, houses and sheds; the rest are gardens
ROOF_SPECTRA = 512  # roofs draw their (bare-soil) spectra from this many regions
BOUNDARY_LABEL_NOISE = 0.3  # share of boundary pixels whose label takes a neighbour's class


def generate_landcover(shape: tuple[int, int], rng: np.random.Generator) -> LandCover:
    """A land-cover map of `shape` (height, width) pixels of 10 m, drawn from `rng`."""
    height, width = shape
    area_km2 = height * width * 1e-4

    parcel_ids, n_parcels, blocks = field_parcels(shape, rng)
    classes = np.full(shape, CROP, np.uint8)
    surfaces = np.full(shape, CROP, np.uint8)
    rows = crop_rows(shape, parcel_ids, n_parcels, rng)
    orchard = rng.random(n_parcels) < ORCHARD_SHARE
    orchards = orchard[parcel_ids]
    classes[orchards] = TREE
    surfaces[orchards] = np.where(orchard_crowns(shape, parcel_ids, n_parcels, rng), TREE, GRASS)[orchards]

    grass = quantile_mask(fbm(shape, (70.0, 25.0, 8.0), rng), GRASSLAND_SHARE)
    classes[grass] = surfaces[grass] = GRASS

    forest = quantile_mask(fbm(shape, (90.0, 30.0, 8.0), rng), rng.uniform(0.15, 0.3))
    classes[forest] = surfaces[forest] = TREE
    shrub = shrub_mask(forest, rng)
    classes[shrub] = surfaces[shrub] = SHRUB

    for _ in range(max(1, rng.poisson(area_km2 / 100))):  # open pits and quarries
        centre = (rng.uniform(0, height), rng.uniform(0, width))
        pit = blob_mask(shape, centre, rng.uniform(15, 60), rng)
        classes[pit] = surfaces[pit] = BARE

    settlement = np.zeros(shape, bool)
    centres = []
    for _ in range(max(1, rng.poisson(area_km2 * VILLAGES_PER_KM2))):  # villages of 250 m to 1 km
        centre = (rng.uniform(0.1, 0.9) * height, rng.uniform(0.1, 0.9) * width)
        centres.append(centre)
        settlement |= blob_mask(shape, centre, rng.uniform(12, 50), rng, roughness=0.3)
    village, plots = village_fabric(shape, rng)
    classes[settlement] = BUILT
    surfaces[settlement] = village[settlement]
    parks = quantile_mask(smooth_noise(shape, 8.0, rng), 0.06) & settlement  # parks and wooded gardens
    park_trees = smooth_noise(shape, 6.0, rng) > 0.3
    classes[parks] = surfaces[parks] = np.where(park_trees, TREE, GRASS)[parks]

    water = np.zeros(shape, bool)
    has_river = min(shape) >= 100 and rng.random() < 0.85
    if has_river:
        water |= river_mask(shape, rng)
    for _ in range(rng.poisson(area_km2 / 60) + (0 if has_river else 1)):
        centre = (rng.uniform(0, height), rng.uniform(0, width))
        water |= blob_mask(shape, centre, rng.uniform(6, 30), rng, roughness=0.35)

    wetland = wetland_mask(water, rng) & ~np.isin(classes, (BUILT, TREE))
    classes[wetland] = surfaces[wetland] = WETLAND
    classes[water] = surfaces[water] = WATER

    roads = road_mask(shape, centres, rng)
    tracks = (blocks != np.roll(blocks, 1, axis=0)) | (blocks != np.roll(blocks, 1, axis=1))
    tracks &= smooth_noise(shape, 60.0, rng) > 0.3
    farmland = (classes == CROP) & ~settlement
    classes[tracks & farmland] = surfaces[tracks & farmland] = BARE
    classes[roads & ~water] = surfaces[roads & ~water] = BUILT
    rows[classes != CROP] = 0.0

    regions, n_regions = _regions(classes, parcel_ids, n_parcels, shape, rng)
    roofs = settlement & (surfaces == BARE) & (classes == BUILT)
    regions[roofs] = n_regions + plots[roofs] % ROOF_SPECTRA  # every house its own roof
    labels = boundary_label_noise(classes, rng)
    return LandCover(classes=labels, regions=regions, n_regions=n_regions + ROOF_SPECTRA, surfaces=surfaces, rows=rows)


def crop_rows(shape: tuple[int, int], parcel_ids: np.ndarray, n_parcels: int, rng: np.random.Generator) -> np.ndarray:
    """Crop rows, tramlines and drill patterns of each parcel: stripes 20-45 m apart at the parcel's own angle.

    Single crop rows are far below 10 m, but tramlines (every 18-36 m), alternating strips and harvest swaths
    show in 10 m imagery as stripes, which grassland never has.
    """
    angle = rng.uniform(0, np.pi, n_parcels)[parcel_ids]
    period = rng.uniform(2.0, 4.5, n_parcels)[parcel_ids]
    strength = rng.uniform(0.4, 1.0, n_parcels)[parcel_ids]
    y, x = np.indices(shape, dtype=np.float32)
    across = y * np.cos(angle) - x * np.sin(angle)
    return (strength * np.cos(2 * np.pi * across / period)).astype(np.float32)


def orchard_crowns(shape: tuple[int, int], parcel_ids: np.ndarray, n_parcels: int, rng: np.random.Generator) -> np.ndarray:
    """Where orchard trees stand: crowns 10-15 m across in rows 20-35 m apart (meadow orchards), per parcel."""
    angle = rng.uniform(0, np.pi, n_parcels)[parcel_ids]
    spacing = rng.uniform(2.0, 3.5, n_parcels)[parcel_ids]
    y, x = np.indices(shape, dtype=np.float32)
    along = (x * np.cos(angle) + y * np.sin(angle)) / spacing
    across = (y * np.cos(angle) - x * np.sin(angle)) / spacing
    near = lambda t: np.abs(t - np.round(t)) < 0.3  # noqa: E731  (within a third of a spacing of a row)
    return near(along) & near(across) & (rng.random(shape) < 0.9)


def village_fabric(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """What a village is made of, pixel by pixel: (surface codes, plot id per pixel).

    Plots of about 20-25 m (Voronoi cells) hold a house, whose roof shows a bare-soil spectrum (clay tiles and
    concrete look like loess soil at 10 m) or a garden (grass, some trees); paved streets cross them every
    60-100 m. No single pixel says "built-up": the mixture of roofs, gardens and streets does.
    """
    plots, n_plots = voronoi(shape, PLOT_SPACING, rng)
    draw = rng.random(n_plots)
    kind = np.where(draw < ROOF_SHARE, BARE, GRASS).astype(np.uint8)
    garden_trees = (kind == GRASS) & (rng.random(n_plots) < 0.3)
    kind[garden_trees] = TREE
    surfaces = kind[plots]
    angle = rng.uniform(0, np.pi)
    spacing = rng.uniform(6.0, 10.0)
    y, x = np.indices(shape, dtype=np.float32)
    along = (x * np.cos(angle) + y * np.sin(angle)) / spacing
    across = (y * np.cos(angle) - x * np.sin(angle)) / spacing
    streets = (np.abs(along - np.round(along)) * spacing < 0.5) | (np.abs(across - np.round(across)) * spacing < 0.5)
    surfaces[streets] = BUILT
    return surfaces, plots


def boundary_label_noise(classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Labels as a photo-interpreter draws them: a share of the pixels on a class boundary take a neighbour's class.

    Boundaries in reference maps are uncertain by about a pixel; the truth is still what the scene shows,
    away from the edges.
    """
    padded = np.pad(classes, 1, mode="edge")
    height, width = classes.shape
    shifted = [padded[1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width] for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1))]
    boundary = np.zeros(classes.shape, bool)
    for other in shifted:
        boundary |= other != classes
    flip = boundary & (rng.random(classes.shape) < BOUNDARY_LABEL_NOISE)
    pick = rng.integers(0, 4, classes.shape)
    out = classes.copy()
    for i, other in enumerate(shifted):
        take = flip & (pick == i)
        out[take] = other[take]
    return out


def voronoi(shape: tuple[int, int], spacing: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Voronoi cells around jittered-grid seeds `spacing` pixels apart: (cell id per pixel, number of ids)."""
    height, width = shape
    ny, nx = math.ceil(height / spacing) + 1, math.ceil(width / spacing) + 1
    sy = ((np.arange(ny)[:, None] + rng.uniform(-0.5, 0.5, (ny, nx))) * spacing).astype(int).clip(0, height - 1)
    sx = ((np.arange(nx)[None, :] + rng.uniform(-0.5, 0.5, (ny, nx))) * spacing).astype(int).clip(0, width - 1)
    seeds = np.zeros(shape, np.int32)
    seeds[sy.ravel(), sx.ravel()] = np.arange(1, ny * nx + 1, dtype=np.int32)
    index = ndimage.distance_transform_edt(seeds == 0, return_distances=False, return_indices=True)
    return seeds[index[0], index[1]] - 1, ny * nx


def field_parcels(shape: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, int, np.ndarray]:
    """Farmland parcels: (parcel id per pixel, number of parcels, block id per pixel).

    Blocks (Voronoi cells about 1 km across, bounded by roads and tracks) are cut into strips of their own
    orientation, 80-250 m wide and 250-800 m long, like the consolidated fields of the Jülich Börde.
    """
    blocks, n_blocks = voronoi(shape, 90.0, rng)
    angle = rng.uniform(0, np.pi, n_blocks)
    strip_width = rng.uniform(8, 25, n_blocks)
    strip_length = rng.uniform(25, 80, n_blocks)
    y, x = np.indices(shape, dtype=np.float32)
    cos, sin = np.cos(angle)[blocks], np.sin(angle)[blocks]
    along = (x * cos + y * sin) / strip_length[blocks]
    across = (y * cos - x * sin) / strip_width[blocks]
    along_i = np.floor(along).astype(np.int64)
    across_i = np.floor(across).astype(np.int64)
    along_i -= along_i.min()
    across_i -= across_i.min()
    key = (blocks * (int(along_i.max()) + 1) + along_i) * (int(across_i.max()) + 1) + across_i
    _, parcel_ids = np.unique(key, return_inverse=True)
    parcel_ids = parcel_ids.reshape(shape).astype(np.int32)
    return parcel_ids, int(parcel_ids.max()) + 1, blocks


def shrub_mask(forest: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shrubland: a ragged belt 20-80 m wide along forest edges, and clearings regrowing inside forests."""
    distance_out = ndimage.distance_transform_edt(~forest)
    belt_width = 2.0 + 3.0 * (1.0 + smooth_noise(forest.shape, 25.0, rng)).clip(0, 2)
    belt = (distance_out > 0) & (distance_out <= belt_width) & (smooth_noise(forest.shape, 15.0, rng) > -0.3)
    clearings = forest & quantile_mask(smooth_noise(forest.shape, 20.0, rng), 0.04)
    return belt | clearings


def blob_mask(
    shape: tuple[int, int], centre: tuple[float, float], radius: float, rng: np.random.Generator, *, roughness: float = 0.4
) -> np.ndarray:
    """A lobed blob of about `radius` pixels around `centre` (lakes, villages, pits)."""
    height, width = shape
    reach = int(radius * (1.0 + 2.0 * roughness)) + 2
    y0, y1 = max(0, int(centre[0]) - reach), min(height, int(centre[0]) + reach)
    x0, x1 = max(0, int(centre[1]) - reach), min(width, int(centre[1]) + reach)
    mask = np.zeros(shape, bool)
    if y0 >= y1 or x0 >= x1:
        return mask
    y, x = np.ogrid[y0:y1, x0:x1]
    distance = np.hypot(y - centre[0], x - centre[1]) / radius
    lobes = smooth_noise((y1 - y0, x1 - x0), max(4.0, radius / 2), rng)
    mask[y0:y1, x0:x1] = distance + roughness * lobes < 1.0
    return mask


def river_mask(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A river 20-60 m wide that meanders across the whole scene (like the Rur)."""
    height, width = shape
    angle = rng.uniform(0, np.pi)
    y, x = np.indices(shape, dtype=np.float32)
    y -= height / 2
    x -= width / 2
    along = x * np.cos(angle) + y * np.sin(angle)
    across = y * np.cos(angle) - x * np.sin(angle) - rng.uniform(-0.25, 0.25) * min(shape)
    centre = np.zeros(shape, np.float32)
    slope = np.zeros(shape, np.float32)
    for _ in range(3):  # meanders of several wavelengths
        wavelength, amplitude, phase = rng.uniform(150, 700), rng.uniform(8, 45), rng.uniform(0, 2 * np.pi)
        k = 2 * np.pi / wavelength
        centre += amplitude * np.sin(k * along + phase)
        slope += amplitude * k * np.cos(k * along + phase)
    half_width = rng.uniform(1.0, 3.0)
    # distance to the centre line measured across it, not along the y axis of the rotated frame
    return np.abs(across - centre) / np.sqrt(1.0 + slope**2) <= half_width


def wetland_mask(water: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Herbaceous wetland: patches of floodplain and lake shore within 30-200 m of open water."""
    if not water.any():
        return np.zeros(water.shape, bool)
    distance = ndimage.distance_transform_edt(~water)
    reach = 3.0 + 8.5 * (1.0 + smooth_noise(water.shape, 30.0, rng)).clip(0, 2)
    return (distance > 0) & (distance <= reach) & (smooth_noise(water.shape, 12.0, rng) > 0.0)


def road_mask(shape: tuple[int, int], centres: list[tuple[float, float]], rng: np.random.Generator) -> np.ndarray:
    """Roads: each village linked to its nearest earlier one, and one through road edge to edge."""
    height, width = shape
    mask = np.zeros(shape, bool)
    for i in range(1, len(centres)):
        nearest = min(range(i), key=lambda j: math.dist(centres[i], centres[j]))
        mask |= segment_mask(shape, centres[i], centres[nearest], 1.2)
    edge = rng.integers(2)
    start = (0.0, rng.uniform(0, width)) if edge == 0 else (rng.uniform(0, height), 0.0)
    end = (height - 1.0, rng.uniform(0, width)) if edge == 0 else (rng.uniform(0, height), width - 1.0)
    via = centres[0] if centres else ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
    mask |= segment_mask(shape, start, via, 2.0) | segment_mask(shape, via, end, 2.0)
    return mask


def segment_mask(shape: tuple[int, int], p0: tuple[float, float], p1: tuple[float, float], width: float) -> np.ndarray:
    """Pixels whose centres lie within `width / 2` of the segment p0-p1 (points as (row, col))."""
    mask = np.zeros(shape, bool)
    pad = int(math.ceil(width)) + 1
    y0, y1 = max(0, int(min(p0[0], p1[0])) - pad), min(shape[0], int(max(p0[0], p1[0])) + pad + 1)
    x0, x1 = max(0, int(min(p0[1], p1[1])) - pad), min(shape[1], int(max(p0[1], p1[1])) + pad + 1)
    if y0 >= y1 or x0 >= x1:
        return mask
    y, x = np.ogrid[y0:y1, x0:x1]
    dy, dx = p1[0] - p0[0], p1[1] - p0[1]
    t = np.clip(((y - p0[0]) * dy + (x - p0[1]) * dx) / max(dy * dy + dx * dx, 1e-9), 0.0, 1.0)
    mask[y0:y1, x0:x1] = np.hypot(y - p0[0] - t * dy, x - p0[1] - t * dx) <= width / 2
    return mask


def _regions(
    classes: np.ndarray, parcel_ids: np.ndarray, n_parcels: int, shape: tuple[int, int], rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Cropland takes its parcel as region; everything else a stand (Voronoi cell about 500 m across)."""
    stands, n_stands = voronoi(shape, 50.0, rng)
    farmland = classes == CROP
    regions = np.where(farmland, parcel_ids, stands + n_parcels).astype(np.int32)
    return regions, n_parcels + n_stands
