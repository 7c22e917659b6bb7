"""Synthetic Sentinel-1 backscatter of a land-cover map, written as the Planetary Computer distributes RTC products.

    sar/S1A_IW_GRDH_1SDV_<start>_<stop>_<orbit>_<datatake>_<id>/
        vv.tif vh.tif                     γ0 linear power, float32 COGs at 10 m on the scene's grid, nodata 0
        S1A_IW_GRDH_1SDV_…_rtc.json       the STAC Item: assets vv, vh (sar:polarizations, raster:bands unit
                                          "linear"), properties platform, sar:*, sat:orbit_state, sat:relative_orbit

What C band sees of each class (`BACKSCATTER_DB`, VV and VH in dB; after Ulaby & Long, "Microwave Radar and
Radiometric Remote Sensing" (2014), and the class means Sentinel-1 land-cover studies report over Europe): open water
is a mirror that sends the pulse away (VV below −20 dB, VH below −25 dB, a little brighter where wind roughens it);
built-up returns by double bounce off walls and ground (VV brightest, VV/VH ratio high); forest scatters in its volume
of branches and leaves, which depolarises (VH relatively high, VV/VH ratio the lowest); crops and grass lie between,
each field at its own level (growth stage, moisture); bare soil and quarries are smooth and dry (dark VH); wetlands
mix water and vegetation.

Speckle is multiplicative: the intensity of a pixel is its mean times a gamma variate of unit mean and shape ENL
(`ENL`: 4.4, an IW GRD high-resolution product's equivalent number of looks), drawn independently per polarisation.
Scenes whose optical twin lost a wedge beyond its swath edge lose one here too (nodata 0), with a strip of border noise
(power below −35 dB) along it, as GRD products carry. Each scene draws from its own stream (seed, index, 1): adding
radar leaves the optical scenes as they were.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pystac
import rasterio
from affine import Affine
from rio_stac.stac import create_stac_item, get_projection_info, get_raster_info

from eoscale.sensors.sentinel1 import C_BAND_NM, db_to_power
from eoscale.synth.cog import COG_PROFILE
from eoscale.synth.landcover import BARE, BUILT, CROP, GRASS, SHRUB, TREE, WATER, WETLAND, LandCover
from eoscale.synth.noise import fbm, smooth_noise
from eoscale.synth.render import swath_edge
from eoscale.synth.scene import SCENE_CRS

# (VV, VH) mean backscatter in dB, and the spread of one region's level (fields, stands) around it
BACKSCATTER_DB = {
    TREE: (-7.5, -13.0), SHRUB: (-9.0, -15.5), GRASS: (-11.0, -18.0), CROP: (-10.0, -17.0),
    BUILT: (-3.0, -11.5), BARE: (-13.5, -22.5), WATER: (-23.0, -29.0), WETLAND: (-14.0, -21.0),
}
REGION_SPREAD_DB = {TREE: 0.6, SHRUB: 0.8, GRASS: 1.2, CROP: 2.0, BUILT: 1.5, BARE: 1.0, WATER: 1.0, WETLAND: 1.2}
ENL = 4.4  # equivalent number of looks of IW GRDH
BORDER_NOISE_DB = -40.0  # the strip along a swath edge (below the format's -35 dB floor)
FIRST_PASS = dt.datetime(2024, 6, 2, 17, 15, 24, tzinfo=dt.UTC)  # an evening (ascending) pass, a day after the optical
EXTENSIONS = [
    "https://stac-extensions.github.io/sar/v1.0.0/schema.json",
    "https://stac-extensions.github.io/sat/v1.0.0/schema.json",
    "https://stac-extensions.github.io/raster/v1.1.0/schema.json",
]
POLARISATION_TITLES = {"vv": "VV: vertical transmit, vertical receive", "vh": "VH: vertical transmit, horizontal receive"}


def backscatter(landcover: LandCover, rng: np.random.Generator, *, swath_edge: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(VV, VH) linear power (float32, nodata 0) of a land-cover map: class levels, one level a region, texture,
    wind on water, speckle (module docstring); `swath_edge` (y, x) True beyond the swath: nodata, with border noise
    beside it."""
    classes = landcover.classes
    shape = classes.shape
    codes = np.array(sorted(BACKSCATTER_DB), np.uint8)
    lookup = np.zeros(256, np.intp)
    lookup[codes] = np.arange(len(codes))
    which = lookup[classes]
    mean = np.array([BACKSCATTER_DB[c] for c in codes], np.float32)  # (class, pol)
    spread = np.array([REGION_SPREAD_DB[c] for c in codes], np.float32)
    region_offset = rng.standard_normal(landcover.n_regions).astype(np.float32)
    level = mean[which] + (spread[which] * region_offset[landcover.regions])[..., None]  # (y, x, pol)
    level += (0.8 * fbm(shape, (3.0, 10.0), rng))[..., None]  # texture within a region (moisture, canopy gaps)
    wind = 2.0 * smooth_noise(shape, 150.0, rng)  # wind roughens open water: a few dB over kilometres
    level[classes == WATER] += np.maximum(wind[classes == WATER], 0.0)[:, None]
    power = []
    for pol in range(2):
        speckle = rng.gamma(ENL, 1.0 / ENL, shape).astype(np.float32)
        power.append(db_to_power(level[..., pol]) * speckle)
    if swath_edge is not None and swath_edge.any():
        from scipy import ndimage

        strip = (ndimage.distance_transform_edt(~swath_edge) <= rng.integers(8, 20)) & ~swath_edge
        for image in power:
            image[strip] = db_to_power(BORDER_NOISE_DB + rng.standard_normal(int(strip.sum())).astype(np.float32))
            image[swath_edge] = 0.0
    return power[0].astype(np.float32), power[1].astype(np.float32)


def pass_of(index: int) -> dict:
    """When and from where scene `index` is seen: alternate ascending (evening) and descending (morning) passes over
    the Jülich area (relative orbits 88 and 37), six days apart."""
    ascending = index % 2 == 0
    start = FIRST_PASS + dt.timedelta(days=6 * index) - (dt.timedelta(hours=11, minutes=56) if not ascending else dt.timedelta())
    absolute = 53_900 + 89 * index  # 175 orbits a 12-day cycle: 6 days is about 87.5 of them
    return {"start": start, "stop": start + dt.timedelta(seconds=25), "orbit_state": "ascending" if ascending else
            "descending", "relative_orbit": 88 if ascending else 37, "absolute_orbit": absolute}


def product_id(index: int) -> str:
    """The ESA product name of scene `index`'s pass (S1A_IW_GRDH_1SDV_<start>_<stop>_<orbit>_<datatake>_<id>)."""
    when = pass_of(index)
    datatake = (0x069000 + 0x1A3 * index) & 0xFFFFFF
    return (f"S1A_IW_GRDH_1SDV_{when['start']:%Y%m%dT%H%M%S}_{when['stop']:%Y%m%dT%H%M%S}_"
            f"{when['absolute_orbit']:06d}_{datatake:06X}_{(0x1F2B + 7 * index) & 0xFFFF:04X}")


def write_sentinel1(root: Path, index: int, landcover: LandCover, transform: Affine, *, seed: int,
                    edge_share: float = 0.5) -> dict:
    """Write scene `index`'s backscatter as an RTC-like COG folder with its STAC Item under `root` (about `edge_share`
    of the scenes with a swath edge and its border noise); returns {"folder", "bands": {band: file}, "item"} relative
    to `root`."""
    rng = np.random.default_rng([seed, index, 1])
    edge = swath_edge(landcover.classes.shape, rng) if rng.random() < edge_share else None
    vv, vh = backscatter(landcover, rng, swath_edge=edge)
    return write_product(root, product_id(index), pass_of(index), vv, vh, transform)


def write_product(root: Path, name: str, when: dict, vv: np.ndarray, vh: np.ndarray, transform: Affine) -> dict:
    """Write one pass's backscatter (`vv`, `vh` linear power) as the RTC-like COG folder `name` with its STAC Item
    under `root`, dated `when` (as `pass_of` gives it); returns {"folder", "bands": {band: file}, "item"} relative
    to `root`."""
    folder = root / name
    folder.mkdir(parents=True)
    tags = {"orbit_state": when["orbit_state"], "relative_orbit": str(when["relative_orbit"]),
            "backscatter": "gamma0 (terrain-flattened)", "platform": "sentinel-1a"}
    files = {}
    for key, image in (("vv", vv), ("vh", vh)):
        files[key.upper()] = f"{name}/{key}.tif"
        with rasterio.open(root / files[key.upper()], "w", **{**COG_PROFILE, "predictor": 3}, width=image.shape[1],
                           height=image.shape[0], count=1, dtype="float32", crs=SCENE_CRS, transform=transform,
                           nodata=0.0) as dst:
            dst.write(image[None])
            dst.set_band_unit(1, "linear")
            dst.set_band_description(1, key.upper())
            dst.update_tags(**tags, ACQUISITIONDATETIME=f"{when['start']:%Y-%m-%dT%H:%M:%S}")
    item = write_sentinel1_item(folder, f"{name}_rtc", when)
    return {"folder": name, "bands": files, "item": str(item.relative_to(root))}


def write_sentinel1_item(folder: Path, item_id: str, when: dict) -> Path:
    """The Planetary Computer-like `sentinel-1-rtc` Item of a folder of vv.tif and vh.tif."""
    assets = {}
    for key in ("vv", "vh"):
        with rasterio.open(folder / f"{key}.tif") as src:
            raster, projection = get_raster_info(src), get_projection_info(src)
        for band in raster:
            band.pop("histogram", None)
            band["unit"] = "linear"
        assets[key] = pystac.Asset(
            href=f"./{key}.tif", media_type=pystac.MediaType.COG, title=POLARISATION_TITLES[key], roles=["data"],
            description=f"Terrain-corrected gamma naught values of signal transmitted with vertical polarization and "
                        f"received with {'vertical' if key == 'vv' else 'horizontal'} polarization with radiometric "
                        f"terrain correction applied.",
            extra_fields={"raster:bands": raster, "sar:polarizations": [key.upper()],
                          "proj:shape": projection["shape"], "proj:transform": projection["transform"]})
    properties = {
        "platform": "SENTINEL-1A", "constellation": "Sentinel-1", "sar:instrument_mode": "IW",
        "sar:frequency_band": "C", "sar:center_frequency": round(299_792_458 / C_BAND_NM, 3),
        "sar:polarizations": ["VV", "VH"], "sar:product_type": "GRD", "sar:resolution_range": 20,
        "sar:resolution_azimuth": 22, "sar:pixel_spacing_range": 10, "sar:pixel_spacing_azimuth": 10,
        "sar:looks_equivalent_number": ENL, "sat:orbit_state": when["orbit_state"],
        "sat:relative_orbit": when["relative_orbit"], "sat:absolute_orbit": when["absolute_orbit"],
        "s1:processing_level": "1", "s1:product_timeliness": "Fast-24h",
    }
    item = create_stac_item(str(folder / "vv.tif"), input_datetime=when["start"], id=item_id, assets=assets,
                            with_proj=True, properties=properties, extensions=list(EXTENSIONS),
                            collection="sentinel-1-rtc", geom_densify_pts=21, geom_precision=7)
    item.common_metadata.start_datetime, item.common_metadata.end_datetime = when["start"], when["stop"]
    path = folder / f"{item_id}.json"
    path.write_text(json.dumps(item.to_dict(include_self_link=False, transform_hrefs=False), indent=2) + "\n")
    return path
