"""The staging cache: where `eoscale stage` puts an item list's assets, and how the compute nodes find them offline.

```
CACHE/eoscale-cache.json                     the marker: eoscale made this folder (it writes into no other)
CACHE/items/<collection>/<item id>/red.tif   one file an asset, named by its key
CACHE/items/<collection>/<item id>/staged.json   what is downloaded so far: each asset's href, size and checksum
CACHE/items/<collection>/<item id>/item.json     the Item with local hrefs, written once all its assets are there
CACHE/stage-log.jsonl                        one line a run of `eoscale stage`: fetched, kept, retries, bytes, time
```
An Item is staged when its `item.json` exists; `ingest --items` and `predict --items` read those (through the STAC
reader, `eoscale.raster.formats.stac`), never the network. Each staged asset keeps its origin as an alternate href
(the alternate-assets extension) and its `file:size` and `file:checksum` as measured.

Which assets an Item needs: those its sensor reads (`eoscale.sensors`: the band assets by key or `eo:bands` name,
and the mask asset, SCL or QA_PIXEL), or the keys given with `--assets`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pystac

from eoscale import __version__
from eoscale.bands import normalise_band_name
from eoscale.errors import InputError, InputNotFoundError, OutputExistsError
from eoscale.sensors import SENSORS, get_sensor, sensor_of_platform

MARKER = "eoscale-cache.json"
ITEM_FILE, RECORD_FILE, LOG_FILE = "item.json", "staged.json", "stage-log.jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_cache(item_list: str | os.PathLike) -> Path:
    """The cache beside an item list when none is named: `items.parquet` → `items.cache/`."""
    path = Path(item_list)
    return path.with_name(path.stem + ".cache")


def open_cache(folder: str | os.PathLike, *, create: bool) -> Path:
    """The cache folder, made (with its marker) if `create`; a folder eoscale did not make is refused."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        return folder
    if not create:
        raise InputNotFoundError(f"no staging cache at {str(folder)!r}: stage the items there first with "
                                 f"'eoscale stage --items LIST --cache {folder}' (where there is internet)")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise OutputExistsError(f"--cache {str(folder)!r} exists and is not an eoscale cache (no {MARKER}): give a new "
                                f"or empty folder")
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / MARKER, {"eoscale": __version__, "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    return folder


def item_folder(cache: Path, item: pystac.Item) -> Path:
    """The folder of one Item's files (collection and id made safe as file names)."""
    return cache / "items" / _UNSAFE.sub("_", item.collection_id or "_") / _UNSAFE.sub("_", item.id)


def asset_file(key: str, asset: pystac.Asset) -> str:
    """An asset's file name in its Item's folder: its key and the suffix of its href."""
    suffix = Path(urlparse(asset.href).path).suffix
    return _UNSAFE.sub("_", key) + (suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else "")


def needed_assets(item: pystac.Item, keys: list[str] | None = None) -> list[str]:
    """The keys of the assets to stage for `item` (see the module docstring); a one-line error if it has none."""
    if keys:
        lowered = {k.lower(): k for k in item.assets}
        found = [lowered[k.lower()] for k in keys if k.lower() in lowered]
        if not found:
            raise InputError(f"STAC item {item.id!r} has none of the assets {', '.join(keys)} (--assets): it has "
                             f"{', '.join(item.assets)}")
        return found
    spec = get_sensor(_sensor(item))
    mask = spec.mask.asset if spec.mask is not None else None
    out = []
    for key, asset in item.assets.items():
        eo = asset.extra_fields.get("eo:bands") or []
        names = [key] + ([str(eo[0].get("name", ""))] if len(eo) == 1 else [])
        is_band = key.lower() in spec.assets or any(normalise_band_name(n) in spec.band_names for n in names)
        is_raster = _is_raster(asset) and "data" in (asset.roles or ["data"])
        if (is_band and is_raster) or key.lower() == mask or (spec.catch_all and is_raster):
            out.append(key)
    if not out:
        raise InputError(f"STAC item {item.id!r}: none of its assets ({', '.join(item.assets)}) is a band or mask of "
                         f"its sensor ({spec.name}): name the assets to stage with --assets")
    return out


def _sensor(item: pystac.Item) -> str:
    for value in (item.properties.get("platform"), item.properties.get("constellation")):
        if value and (sensor := sensor_of_platform(str(value))[0]) is not None:
            return sensor
    return next(s.name for s in SENSORS.values() if s.catch_all)


def _is_raster(asset: pystac.Asset) -> bool:
    media = (asset.media_type or "").lower()
    suffix = Path(urlparse(asset.href).path).suffix.lower()
    return "tiff" in media or "jp2" in media or suffix in (".tif", ".tiff", ".jp2")


def read_record(folder: Path) -> dict:
    """{asset key: {href, file, size, checksum}} of what is already staged in an Item's folder."""
    path = folder / RECORD_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}  # a record broken mid-write: the files are checked again


def write_record(folder: Path, record: dict) -> None:
    _write_json(folder / RECORD_FILE, record)


def write_staged_item(folder: Path, item: pystac.Item, record: dict) -> Path:
    """The Item with each staged asset's href local (its origin an alternate href, its size and checksum as
    measured), written atomically: its existence says the Item is staged."""
    data = item.to_dict(include_self_link=False, transform_hrefs=False)
    for key, facts in record.items():
        asset = data["assets"][key]
        asset.setdefault("alternate", {})["origin"] = {"href": facts["href"]}
        asset.update({"href": f"./{facts['file']}", "file:size": facts["size"], "file:checksum": facts["checksum"]})
    data["links"] = [link for link in data.get("links", []) if link.get("rel") not in ("self", "root", "parent")]
    return _write_json(folder / ITEM_FILE, data)


def staged_items(item_list: str | os.PathLike, cache: str | os.PathLike | None = None) -> list[str]:
    """The staged Item files of every Item of a frozen list (offline: reads the cache only); a one-line error naming
    the first Item that is not staged."""
    from eoscale.acquire.frozen import read_list

    items, _ = read_list(item_list)
    folder = open_cache(cache or default_cache(item_list), create=False)
    paths, missing = [], []
    for item in items:
        path = item_folder(folder, item) / ITEM_FILE
        (paths if path.is_file() else missing).append(str(path) if path.is_file() else item.id)
    if missing:
        raise InputNotFoundError(f"{len(missing)} of the {len(items)} items of {str(item_list)!r} are not staged in "
                                 f"{str(folder)!r} (first: {missing[0]!r}): run 'eoscale stage --items {item_list} "
                                 f"--cache {folder}' where there is internet; it fetches only what is missing")
    return paths


def append_log(cache: Path, facts: dict) -> None:
    with open(cache / LOG_FILE, "a") as f:
        f.write(json.dumps(facts) + "\n")


def stage_totals(cache: Path) -> dict[str, float]:
    """What every staging run into `cache` did, summed from its stage log (runs, fetched, kept, damaged, retries,
    seconds waited, bytes): what a run that reads the cache records of how its inputs came."""
    totals = dict.fromkeys(("runs", "fetched", "kept", "damaged", "retries", "waited_s", "bytes"), 0.0)
    path = cache / LOG_FILE
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            run = json.loads(line)
        except ValueError:
            continue
        totals["runs"] += 1
        for key in ("fetched", "kept", "damaged", "retries", "waited_s", "bytes"):
            totals[key] += float(run.get(key, 0))
    return totals


def _write_json(path: Path, data: dict) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path
