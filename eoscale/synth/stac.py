"""STAC Items beside synthetic scenes, as the archives that distribute the real products write them.

- Sentinel-2 L2A COGs (`eoscale.synth.cog`), after Element 84's Earth Search `sentinel-2-l2a` Items: assets keyed by
  common name (`blue`, `rededge1`, `nir08`, `swir16`, …) with `eo:bands` (name, common name, wavelengths in µm) and
  `raster:bands` (nodata 0, scale 0.0001, offset -0.1 from processing baseline 04.00), `scl`, `aot`, `wvp`, `visual`;
  properties `platform`, `constellation`, `s2:processing_baseline`.
- Landsat Collection 2 Level-2 folders (`eoscale.synth.landsat`), after USGS's `landsat-c2l2-sr` Items
  (`…_SR_stac.json`): assets `coastal` … `swir22` whose `eo:bands` name `SR_B1` … `SR_B7`, `raster:bands` scale 2.75e-5
  and offset -0.2, `qa_pixel`, and the MTL files.

rio-stac builds each Item (geometry, bbox and the projection extension from the reference band) and each asset's
raster information; hrefs are relative to the Item, which lies in the scene's folder.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pystac
import rasterio
from rio_stac.stac import create_stac_item, get_projection_info, get_raster_info

from eoscale.raster.stac import LANDSAT_ASSETS, SENTINEL2_ASSETS
from eoscale.sensors import LANDSAT_OLI, SENSORS, SENTINEL2

EXTENSIONS = [f"https://stac-extensions.github.io/{name}/v1.1.0/schema.json" for name in ("eo", "raster")]
COG = "image/tiff; application=geotiff; profile=cloud-optimized"
# the archives' asset keys (Earth Search's for Sentinel-2, USGS's for Landsat), as eoscale reads them
SENTINEL2_ASSET = {band: key for key, band in SENTINEL2_ASSETS.items()}
LANDSAT_ASSET = {band: key for key, band in LANDSAT_ASSETS.items()}
COMMON_NAME = {key: key.rstrip("123") if key.startswith("rededge") else key for key in SENTINEL2_ASSETS}


def _raster_asset(path: Path, *, title: str, roles: list[str], eo: list[dict] | None = None,
                  scale: float | None = None, offset: float | None = None) -> pystac.Asset:
    """A raster asset of `path` (href relative to its folder, where the Item lies) with its raster and projection
    facts (rio-stac's, with the product's scale and offset)."""
    with rasterio.open(path) as src:
        raster = get_raster_info(src)
        projection = get_projection_info(src)
        resolution = abs(src.transform.a)
    for band in raster:
        band.pop("histogram", None)
        band["spatial_resolution"] = resolution
        if scale is not None:
            band["scale"], band["offset"] = scale, offset
    extra = {"gsd": resolution, "proj:shape": projection["shape"], "proj:transform": projection["transform"],
             "raster:bands": raster, **({"eo:bands": eo} if eo else {})}
    return pystac.Asset(href=f"./{path.name}", media_type=COG if path.suffix == ".tif" else pystac.MediaType.GEOTIFF,
                        title=title, roles=roles, extra_fields=extra)


def _write_item(folder: Path, item_id: str, reference: Path, assets: dict[str, pystac.Asset], *, sensing: dt.datetime,
                properties: dict, name: str) -> Path:
    item = create_stac_item(str(reference), input_datetime=sensing, id=item_id, assets=assets, with_proj=True,
                            properties=properties, extensions=list(EXTENSIONS), geom_densify_pts=21, geom_precision=7)
    path = folder / name
    path.write_text(json.dumps(item.to_dict(include_self_link=False, transform_hrefs=False), indent=2) + "\n")
    return path


def write_sentinel2_item(folder: Path, item_id: str, *, sensing: dt.datetime, baseline: str, offset: int) -> Path:
    """The Earth Search-like Item of a COG folder (`offset`: what its DNs carry, 1000 from baseline 04.00)."""
    bands = {b.name: b for b in SENSORS[SENTINEL2].table("sentinel-2a")}
    assets = {}
    for band in SENSORS[SENTINEL2].default_bands:
        key = SENTINEL2_ASSET[band]
        number = band.removeprefix("B").lstrip("0")
        title = f"{key.capitalize()} (band {number})"
        eo = [{"name": key, "common_name": COMMON_NAME[key], "description": title,
               "center_wavelength": round(bands[band].wavelength_nm / 1000, 4),
               "full_width_half_max": round(bands[band].bandwidth_nm / 1000, 4)}]
        assets[key] = _raster_asset(folder / f"{band}.tif", title=f"{title} - {int(bands[band].resolution_m)}m",
                                    roles=["data", "reflectance"], eo=eo, scale=0.0001, offset=-offset / 10_000)
    assets["scl"] = _raster_asset(folder / "SCL.tif", title="Scene classification map (SCL)", roles=["data"])
    assets["aot"] = _raster_asset(folder / "AOT.tif", title="Aerosol optical thickness (AOT)", roles=["data"],
                                  scale=0.001, offset=0.0)
    assets["wvp"] = _raster_asset(folder / "WVP.tif", title="Water vapour (WVP)", roles=["data"], scale=0.001,
                                  offset=0.0)
    assets["visual"] = _raster_asset(folder / "TCI.tif", title="True color image", roles=["visual"])
    properties = {"platform": "sentinel-2a", "constellation": "sentinel-2", "instruments": ["msi"],
                  "mgrs:utm_zone": 32, "mgrs:latitude_band": "U", "mgrs:grid_square": "LB",
                  "s2:processing_baseline": baseline, "s2:product_type": "S2MSI2A",
                  "earthsearch:boa_offset_applied": False}
    return _write_item(folder, item_id, folder / "B02.tif", assets, sensing=sensing, properties=properties,
                       name=f"{item_id}.json")


def write_landsat_item(folder: Path, product_id: str, metadata: dict) -> Path:
    """The USGS-like Item (`<product>_SR_stac.json`) of a C2 L2 folder (`metadata`: its MTL's groups)."""
    bands = {b.name: b for b in SENSORS[LANDSAT_OLI].table("landsat-9")}
    image = metadata["IMAGE_ATTRIBUTES"]
    assets = {}
    for band, key in LANDSAT_ASSET.items():
        eo = [{"name": band, "common_name": COMMON_NAME[key], "description": bands[band].description,
               "center_wavelength": round(bands[band].wavelength_nm / 1000, 4),
               "full_width_half_max": round(bands[band].bandwidth_nm / 1000, 4)}]
        assets[key] = _raster_asset(folder / f"{product_id}_{band}.TIF", title=f"{bands[band].description} ({band})",
                                    roles=["data", "reflectance"], eo=eo, scale=2.75e-5, offset=-0.2)
    assets["qa_pixel"] = _raster_asset(folder / f"{product_id}_QA_PIXEL.TIF", title="Pixel Quality Assessment Band",
                                       roles=["cloud", "cloud-shadow", "snow-ice", "water-mask"])
    for suffix, media in (("MTL.txt", "text/plain"), ("MTL.xml", "application/xml"), ("ANG.txt", "text/plain")):
        assets[suffix] = pystac.Asset(href=f"./{product_id}_{suffix}", media_type=media, roles=["metadata"])
    sensing = dt.datetime.fromisoformat(f"{image['DATE_ACQUIRED']}T{image['SCENE_CENTER_TIME'][:15]}+00:00")
    properties = {"platform": "LANDSAT_9", "instruments": ["OLI", "TIRS"], "eo:cloud_cover": image["CLOUD_COVER"],
                  "landsat:wrs_path": f"{image['WRS_PATH']:03d}", "landsat:wrs_row": f"{image['WRS_ROW']:03d}",
                  "landsat:collection_number": "02", "landsat:correction": "L2SP"}
    return _write_item(folder, f"{product_id}_SR", folder / f"{product_id}_SR_B2.TIF", assets, sensing=sensing,
                       properties=properties, name=f"{product_id}_SR_stac.json")
