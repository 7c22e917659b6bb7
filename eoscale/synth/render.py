"""Rendering a land-cover map into Sentinel-2 L2A reflectance: mixing, texture, sensor blur, noise, clouds.

The steps follow the path of light and of the instrument:
1. every region gets the mixture spectrum of the class its surface shows (`spectra.region_spectra`; a
   village's roofs show bare soil, its gardens grass: `LandCover.surfaces`);
2. within a region, spatially correlated texture varies brightness and vegetation cover, and crop rows
   stripe the fields;
3. cloud shadows dim the surface to its diffuse illumination;
4. the sensor's point-spread function blurs the 10 m image, so pixels on a boundary become linear
   mixtures of both sides, as real 10 m pixels straddling a field edge are;
5. the 20 m bands are averaged over 2x2 blocks of the 10 m rendering (same origin);
6. sensor noise is added at each band's own resolution, and reflectance is scaled by 10,000 to uint16;
7. clouds (and, in some scenes, the edge of the satellite's swath) become nodata 0 in every band.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from eoscale.bands import NODATA, REFLECTANCE_SCALE, SENTINEL2_L2A
from eoscale.synth.landcover import CLASS_CODES, LandCover
from eoscale.synth.noise import fbm, quantile_mask
from eoscale.synth.spectra import CLASS_MIXTURES, endmember_library, region_spectra

# Gaussian PSF of the 10 m bands, in pixels: sigma = 0.55 px gives an MTF of ~0.22 at Nyquist, inside the
# 0.15-0.3 that the Sentinel-2 MSI requirements set for its 10 m bands.
PSF_SIGMA_PX = 0.55
# Noise-equivalent reflectance per band (B02..B12): a few 1e-3, the instrument's noise (MSI SNR of roughly
# 100-200 at reference radiance) plus the scatter that atmospheric correction adds to L2A reflectance.
NOISE_REFLECTANCE = (0.003, 0.0025, 0.0025, 0.003, 0.003, 0.003, 0.002, 0.0025, 0.003, 0.004)
# Vegetation cover amplitude of crop rows and tramlines (a fraction of cover, against soil).
CROP_ROW_COVER = 0.12
# A cloud shadow leaves only diffuse skylight: roughly a third to a half of full illumination.
SHADOW_ILLUMINATION = 0.4


def render_scene(landcover: LandCover, rng: np.random.Generator, *, nodata_fraction: float) -> list[np.ndarray]:
    """uint16 scaled reflectance for each band of `SENTINEL2_L2A`, at its own resolution.

    10 m bands have the land cover's shape; 20 m bands have `coarse_shape(shape)`. Nodata pixels are 0 in
    every band, and the nodata mask is the same at both resolutions (it is drawn on the 20 m grid).
    """
    shape = landcover.classes.shape
    index = np.zeros(256, np.intp)
    index[list(CLASS_CODES)] = np.arange(len(CLASS_CODES))
    classes = index[landcover.classes if landcover.surfaces is None else landcover.surfaces]  # what shows, not the label

    table = region_spectra(CLASS_CODES, landcover.n_regions, rng)
    reflectance = np.moveaxis(table[classes, landcover.regions], -1, 0).copy()  # (band, y, x)

    texture = np.array([CLASS_MIXTURES[c].texture for c in CLASS_CODES], np.float32)[classes]
    vigour = np.array([CLASS_MIXTURES[c].vigour for c in CLASS_CODES], np.float32)[classes]
    brightness = 1.0 + texture * fbm(shape, (2.0, 6.0), rng)
    library = endmember_library()
    greening = library.mean("vegetation") - library.mean("soil")
    reflectance *= brightness * np.float32(rng.uniform(0.96, 1.04))  # scene-wide: date and sun angle
    cover = vigour * fbm(shape, (3.0, 12.0), rng)
    if landcover.rows is not None:  # tramlines and crop rows: stripes of more and less vegetation cover
        cover += CROP_ROW_COVER * landcover.rows
    reflectance += cover[None] * greening[:, None, None]

    clouds, shadows = cloud_masks(coarse_shape(shape), rng, nodata_fraction)
    reflectance[:, upsample(shadows, shape)] *= SHADOW_ILLUMINATION
    np.maximum(reflectance, 0.0, out=reflectance)

    clouds_fine = upsample(clouds, shape)
    out = []
    for b, band in enumerate(SENTINEL2_L2A):
        image = ndimage.gaussian_filter(reflectance[b], PSF_SIGMA_PX, mode="nearest")
        mask = clouds_fine
        if band.resolution_m == 20:
            image, mask = block_mean(image), clouds
        image = image + NOISE_REFLECTANCE[b] * rng.standard_normal(image.shape, dtype=np.float32)
        out.append(to_uint16(image, mask))
    return out


def cloud_masks(shape: tuple[int, int], rng: np.random.Generator, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodata (clouds, and in some scenes a swath-edge wedge) and cloud shadow masks on the 20 m grid.

    A scene's cloud cover varies around `fraction` (0.3x to 1.7x it), so the set averages about
    `fraction`; shadows are the clouds displaced away from the sun (to the north-west, morning overpass).
    """
    none = np.zeros(shape, bool)
    if fraction <= 0:
        return none, none
    cover = min(0.95, fraction * rng.uniform(0.3, 1.7))
    clouds = quantile_mask(fbm(shape, (60.0, 20.0, 6.0), rng), cover)
    dy, dx = int(rng.integers(4, 16)), int(rng.integers(4, 16))
    shadows = np.zeros(shape, bool)
    shadows[: shape[0] - dy, : shape[1] - dx] = clouds[dy:, dx:]
    shadows &= ~clouds
    if rng.random() < 0.3:
        clouds |= swath_edge(shape, rng)
    return clouds, shadows


def swath_edge(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """The nodata wedge beyond the edge of the satellite's swath: one side of a line tilted 5-15 degrees."""
    height, width = shape
    y, x = np.ogrid[0:height, 0:width]
    tilt = math.tan(math.radians(rng.uniform(5, 15)))
    start = rng.uniform(0.7, 0.95) * width
    if rng.random() < 0.5:  # right edge, leaning in towards the bottom
        return x > start - tilt * y
    return x < (width - start) + tilt * y


def coarse_shape(shape: tuple[int, int]) -> tuple[int, int]:
    """The 20 m grid of a 10 m grid with the same origin: half the pixels, rounded up to cover odd sizes."""
    return math.ceil(shape[0] / 2), math.ceil(shape[1] / 2)


def block_mean(image: np.ndarray) -> np.ndarray:
    """Mean over 2x2 blocks; at an odd edge, the mean of the pixels that exist (edge pixels are repeated)."""
    height, width = image.shape
    padded = np.pad(image, ((0, height % 2), (0, width % 2)), mode="edge")
    return padded.reshape(padded.shape[0] // 2, 2, padded.shape[1] // 2, 2).mean(axis=(1, 3), dtype=np.float32)


def upsample(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour 20 m -> 10 m, cropped to `shape`."""
    return np.repeat(np.repeat(image, 2, axis=0), 2, axis=1)[: shape[0], : shape[1]]


def to_uint16(reflectance: np.ndarray, nodata: np.ndarray) -> np.ndarray:
    """Scaled reflectance as uint16: valid pixels are at least 1, so only nodata is ever 0."""
    scaled = np.rint(reflectance * REFLECTANCE_SCALE).clip(1, 65535).astype(np.uint16)
    scaled[nodata] = NODATA
    return scaled
