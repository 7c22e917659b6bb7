"""The frozen item list: what a search found, written once and read by every later step (`stage`, `ingest --items`,
`predict --items`), so a run is reproducible and the API is asked once.

Two forms, by the file's suffix: an ItemCollection JSON (`.json`, readable by any STAC tool and by `--stac`) or
stac-geoparquet (`.parquet`, compact for thousands of Items; TorchGeo's STAC dataset reads the same). Both carry the
search that made them (`eoscale:search`: the API, collections, area, dates, filters, when, how many matched): the JSON
as a member of the ItemCollection, the Parquet file in its schema metadata.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pystac

from eoscale.errors import InputError, InputNotFoundError, OutputExistsError

SEARCH_KEY = "eoscale:search"
SUFFIXES = (".json", ".geojson", ".parquet")


def _check_suffix(path: Path) -> None:
    if path.suffix.lower() not in SUFFIXES:
        raise InputError(f"item list {str(path)!r}: name it .json (an ItemCollection) or .parquet (stac-geoparquet)")


def write_list(items: list[pystac.Item], path: str | os.PathLike, search: dict, *, overwrite: bool = False) -> Path:
    """Write the frozen list to `path` (its suffix picks the form), atomically: a reader never sees half of it."""
    path = Path(path)
    _check_suffix(path)
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{str(path)!r} exists: give another --output or --overwrite to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    dicts = [item.to_dict(include_self_link=False, transform_hrefs=False) for item in items]
    if path.suffix.lower() == ".parquet":
        _write_parquet(dicts, tmp, search)
    else:
        collection = {"type": "FeatureCollection", "features": dicts, SEARCH_KEY: search}
        tmp.write_text(json.dumps(collection, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def _write_parquet(dicts: list[dict], path: Path, search: dict) -> None:
    import pyarrow.parquet as pq
    from stac_geoparquet.arrow import parse_stac_items_to_arrow

    if not dicts:  # stac-geoparquet infers the schema from the items: an empty list has none
        raise InputError("the search found no items: a stac-geoparquet list needs at least one; widen the search")
    table = parse_stac_items_to_arrow(dicts).read_all()
    metadata = {**(table.schema.metadata or {}), SEARCH_KEY.encode(): json.dumps(search).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path)


def read_list(path: str | os.PathLike) -> tuple[list[pystac.Item], dict]:
    """(Items, the search that made them) of a frozen list; a missing or unreadable file is a one-line error."""
    path = Path(path)
    _check_suffix(path)
    if not path.is_file():
        raise InputNotFoundError(f"no item list at {str(path)!r}: write one with 'eoscale search'")
    try:
        if path.suffix.lower() == ".parquet":
            dicts, search = _read_parquet(path)
        else:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("type") != "FeatureCollection":
                raise ValueError("it is not an ItemCollection (a FeatureCollection of Items)")
            dicts, search = data.get("features", []), data.get(SEARCH_KEY) or {}
        items = [pystac.Item.from_dict(d, preserve_dict=False) for d in dicts]
    except (OSError, ValueError, KeyError, TypeError, pystac.STACError) as err:
        raise InputError(f"item list {str(path)!r} cannot be read ({type(err).__name__}: {err}): write it again "
                         f"with 'eoscale search'") from None
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise InputError(f"item list {str(path)!r} names an item twice: {sorted({i for i in ids if ids.count(i) > 1})}")
    return items, search


def _read_parquet(path: Path) -> tuple[list[dict], dict]:
    import pyarrow.parquet as pq
    from stac_geoparquet.arrow import stac_table_to_items

    table = pq.read_table(path)
    search = json.loads((table.schema.metadata or {}).get(SEARCH_KEY.encode(), b"{}"))
    return list(stac_table_to_items(table)), search
