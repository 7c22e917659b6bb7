"""A STAC API search (pystac-client): collections, an area (a bbox or the union of a vector file's shapes), a date
range and property filters, to the Items a frozen list holds (`eoscale.acquire.frozen`).

Filters are STAC's query extension (`eo:cloud_cover<20`): sent to an API that declares it, and always applied to the
answer too, so an API without the extension gives the same list.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from dataclasses import asdict, dataclass, field

import pystac

from eoscale import __version__
from eoscale.errors import InputError, InputNotFoundError

OPERATORS = {"<=": ("lte", operator.le), ">=": ("gte", operator.ge), "!=": ("neq", operator.ne),
             "<": ("lt", operator.lt), ">": ("gt", operator.gt), "=": ("eq", operator.eq)}
_FILTER = re.compile(r"^\s*([\w:.\-]+)\s*(<=|>=|!=|<|>|=)\s*(.+?)\s*$")
QUERY_CONFORMANCE = "item-search#query"


@dataclass(frozen=True)
class Filter:
    """One property filter, `name op value` (a number where the value reads as one)."""

    name: str
    op: str
    value: float | str

    def __call__(self, properties: dict) -> bool:
        have = properties.get(self.name)
        if have is None:
            return False
        try:
            return OPERATORS[self.op][1](have, self.value)
        except TypeError:
            return False


def parse_filter(text: str) -> Filter:
    """`eo:cloud_cover<20` as a Filter; a one-line error for anything else."""
    match = _FILTER.match(text)
    if not match:
        raise InputError(f"--filter {text!r} is not NAME OP VALUE with OP one of {', '.join(OPERATORS)} "
                         f"(e.g. 'eo:cloud_cover<20')")
    name, op, value = match.groups()
    try:
        number: float | str = float(value)
    except ValueError:
        number = value.strip("'\"")
    return Filter(name, op, number)


@dataclass(frozen=True)
class Search:
    """What to ask the API (the frozen list records it)."""

    api: str
    collections: list[str]
    datetime: str | None = None
    bbox: list[float] | None = None
    intersects: dict | None = None
    filters: list[Filter] = field(default_factory=list)
    max_items: int | None = None

    def record(self, matched: int) -> dict:
        """The search as the frozen list records it."""
        facts = asdict(self)
        facts["filters"] = [f"{f.name}{f.op}{f.value:g}" if isinstance(f.value, float) else f"{f.name}{f.op}{f.value}"
                            for f in self.filters]
        return {**facts, "matched": matched, "searched": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "eoscale": __version__}


def parse_bbox(text: str) -> list[float]:
    """`W,S,E,N` in degrees (EPSG:4326)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 4 or not (-180 <= values[0] <= 180 and -180 <= values[2] <= 180 and -90 <= values[1] <= values[3] <= 90):
        raise InputError(f"--bbox {text!r} is not WEST,SOUTH,EAST,NORTH in degrees (e.g. 6.0,50.8,6.5,51.1)")
    return values


def area_geometry(path: str) -> dict:
    """The union of the shapes of a vector file (GeoJSON, GeoPackage, any OGR format) in EPSG:4326, as GeoJSON."""
    import os

    import geopandas

    if not os.path.exists(path):
        raise InputNotFoundError(f"--area {path!r} does not exist: give a GeoJSON or GeoPackage file of the area")
    try:
        frame = geopandas.read_file(path)
    except Exception as err:  # noqa: BLE001 (pyogrio raises its own classes for every format's faults)
        raise InputError(f"--area {path!r} cannot be read as a vector file ({type(err).__name__}: {err})") from None
    if frame.empty or frame.crs is None:
        raise InputError(f"--area {path!r} holds no shapes or no CRS: give a file with the area's polygons and its CRS")
    shape = frame.to_crs("EPSG:4326").union_all()
    return shape.__geo_interface__


def search(query: Search, *, timeout: float = 60.0) -> list[pystac.Item]:
    """The Items of the API that match `query`, in the API's order, filters applied."""
    from pystac_client import Client
    from pystac_client.exceptions import APIError
    from pystac_client.stac_api_io import StacApiIO
    from urllib3.util.retry import Retry

    from eoscale.acquire.retry import RETRIED_STATUS

    # pystac-client's default retries only connection errors; an API's 429 and 5xx pass too if one waits (POST
    # searches included; Retry-After honoured)
    retry = Retry(total=None, connect=2, read=2, status=5, backoff_factor=1.0, status_forcelist=sorted(RETRIED_STATUS), allowed_methods=None,
                  respect_retry_after_header=True, raise_on_status=False)
    try:
        client = Client.open(query.api, stac_io=StacApiIO(max_retries=retry, timeout=timeout))
    except (APIError, OSError, ValueError, pystac.STACError) as err:
        raise InputError(f"--api {query.api!r} does not answer as a STAC API ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''}): check the URL and the network") from None
    sends_query = client.conforms_to("QUERY") if hasattr(client, "conforms_to") else False
    query_ext = {f.name: {OPERATORS[f.op][0]: f.value} for f in query.filters} if sends_query and query.filters else None
    try:
        found = client.search(collections=query.collections, bbox=query.bbox, intersects=query.intersects,
                              datetime=query.datetime, query=query_ext, max_items=query.max_items).item_collection()
    except (APIError, OSError) as err:
        raise InputError(f"the search at {query.api} failed ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    return [item for item in found if all(f(item.properties) for f in query.filters)]
