"""The lineage of a land-cover map, checked: map → checkpoint → training run → tile store → scenes.

`eoscale predict` writes the chain into every map (the COG tag `EOSCALE_LINEAGE`, compact JSON) and into its
STAC Item (`properties["eoscale:lineage"]`, `eoscale.catalog.stac`):

    {"eoscale_version", "checkpoint": {path, size, sha256}, "adapter": {name, path, size, sha256} | None,
     "training_run": {run_id, tracking_uri, experiment_id} | None,
     "store": {path, fingerprint, scenes: [{scene, role, path, size, sha256}]} | None,
     "trained_with": eoscale version of the fit, "scenes": [{path, size, sha256}]  (the map's own input),
     "static": [{path, size, sha256}]  (the DEM its static layers came from; absent without them)}

`trace` reads it back and compares every file with what it is now: the map with the checksum in its Item, the
map's scenes, the checkpoint and adapter with their sha256, the store with its fingerprint (every file of it
read again), the store's input files with their sha256; the training run is looked up in its tracking store.
A link that was never recorded (a checkpoint or store from before lineage) is `unknown`, not an error.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eoscale.catalog.digest import (
    CHANGED,
    MISSING,
    OK,
    UNKNOWN,
    check_record,
    file_sha256,
    path_sha256,
    store_fingerprint,
)
from eoscale.catalog.stac import LINEAGE, checksum_of
from eoscale.errors import InputError, InputNotFoundError

LINEAGE_TAG = "EOSCALE_LINEAGE"
FOUND, NOT_FOUND = "FOUND", "NOT FOUND"
ITEM_SUFFIX = "_item.json"
MAP_SUFFIXES = ("_landcover.tif", "_change.tif")  # maps whose Item is <scene>_item.json (a value map's: <name>_item.json)


@dataclass
class Link:
    """One link of the chain: what it is, where, what was recorded, what it is now, and whether they agree."""

    kind: str  # map, scene, static layers' DEM, checkpoint, adapter, training run, store, store input
    path: str | None
    status: str  # OK, CHANGED, MISSING, unknown; FOUND or NOT FOUND for the training run
    recorded: str | None = None  # digest (or run id) recorded when the map was made
    now: str | None = None  # the same, now
    detail: str = ""
    depth: int = 0  # 1: a file of the link above (a map's scene, a store's input)


@dataclass
class Chain:
    map: str
    item: str | None
    links: list[Link] = field(default_factory=list)

    @property
    def changed(self) -> list[Link]:
        """The links whose file changed or went away since the map was made."""
        return [link for link in self.links if link.status in (CHANGED, MISSING)]

    def to_dict(self) -> dict:
        return {"map": self.map, "item": self.item, "ok": not self.changed, "links": [asdict(k) for k in self.links]}


def item_path(map_path: Path) -> Path:
    """Where `eoscale predict` writes a map's STAC Item: `<scene>_item.json` beside `<scene>_landcover.tif` (or a
    change map's `<scene>_change.tif`), `<scene>_values_item.json` beside `<scene>_values.tif`."""
    name = map_path.name
    suffix = next((s for s in MAP_SUFFIXES if name.endswith(s)), None)
    stem = name[: -len(suffix)] if suffix else map_path.stem
    return map_path.with_name(stem + ITEM_SUFFIX)


def map_asset(item: dict) -> dict:
    """The Item's asset of the map itself: the one with the "data" role (`landcover`, `change` or `values`); an Item
    without one is no eoscale map's (KeyError)."""
    assets = item["assets"]
    for key in ("landcover", "change", "values"):
        if key in assets and "data" in (assets[key].get("roles") or ["data"]):
            return assets[key]
    return next(a for a in assets.values() if "data" in (a.get("roles") or []))


def read_lineage(path: str | Path) -> tuple[Path, dict, Path | None, dict | None]:
    """(map, lineage, Item path, Item) of a map, or of its STAC Item; the lineage from the map's tags, else from the
    Item. A file without lineage is an `InputError` (one line)."""
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"no map at {str(path)!r}")
    item_file, item = None, None
    if path.suffix == ".json":
        item_file = path
        try:
            item = json.loads(path.read_text())
            href = map_asset(item)["href"]
        except (ValueError, KeyError, TypeError, StopIteration):
            raise InputError(f"{str(path)!r} is not the STAC Item of an eoscale map (no asset of the map's data)") from None
        path = (item_file.parent / href).resolve() if not Path(href).is_absolute() else Path(href)
    else:
        candidate = item_path(path)
        if candidate.is_file():
            item_file = candidate
            try:
                item = json.loads(candidate.read_text())
            except ValueError:
                item = None
    lineage = _tag_lineage(path) if path.exists() else None
    if lineage is None and item is not None:
        lineage = (item.get("properties") or {}).get(LINEAGE)
    if not lineage:
        raise InputError(f"{str(path)!r} carries no lineage (no {LINEAGE_TAG} tag, no STAC Item with {LINEAGE}): "
                         f"it was not made by 'eoscale predict', or by one older than lineage")
    return path, lineage, item_file, item


def _tag_lineage(path: Path) -> dict | None:
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning, RasterioIOError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)  # a PNG, say: it has no lineage either
            with rasterio.open(path) as src:
                text = src.tags().get(LINEAGE_TAG)
    except RasterioIOError:
        raise InputError(f"{str(path)!r} is not a raster that eoscale can read") from None
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise InputError(f"{str(path)!r} has a damaged {LINEAGE_TAG} tag (not JSON)") from None


def trace(path: str | Path, *, tracking_uri: str | None = None) -> Chain:
    """The checked chain of the map (or Item) at `path`; `tracking_uri` overrides the training run's recorded one."""
    map_path, lineage, item_file, item = read_lineage(path)
    digests: dict[str, str] = {}  # a file that is in two links (the map's scene is also the store's) is read once

    def digest(p: Path) -> str:
        key = str(p)
        if key not in digests:
            digests[key] = path_sha256(p)
        return digests[key]

    chain = Chain(str(map_path), str(item_file) if item_file else None)
    chain.links.append(_map_link(map_path, item))
    for record in lineage.get("scenes") or []:
        chain.links.append(_file_link("scene", record, digest, depth=1))
    for record in lineage.get("static") or []:
        chain.links.append(_file_link("static layers' DEM", record, digest, depth=1))
    chain.links.append(_file_link("checkpoint", lineage.get("checkpoint"), digest))
    if lineage.get("adapter"):
        chain.links.append(_file_link("adapter", lineage["adapter"], digest,
                                      detail=f"adapter {lineage['adapter'].get('name')!r}"))
    chain.links.append(_run_link(lineage.get("training_run"), tracking_uri))
    store = lineage.get("store")
    chain.links.append(_store_link(store))
    for record in (store or {}).get("scenes") or []:
        chain.links.append(_file_link("store input", record, digest, depth=1, detail=record.get("role") or ""))
    return chain


def _map_link(map_path: Path, item: dict | None) -> Link:
    if not map_path.is_file():
        return Link("map", str(map_path), MISSING)
    now = file_sha256(map_path)
    try:
        recorded = checksum_of(map_asset(item)) if item else None
    except (KeyError, TypeError, StopIteration):
        recorded = None
    status = UNKNOWN if recorded is None else OK if recorded == now else CHANGED
    return Link("map", str(map_path), status, recorded, now, "" if item else "no STAC Item beside it")


def _file_link(kind: str, record: dict | None, digest, *, depth: int = 0, detail: str = "") -> Link:
    status, now = check_record(record, digest=lambda p: digest(Path(p)))
    return Link(kind, (record or {}).get("path"), status, (record or {}).get("sha256"), now, detail, depth)


def _run_link(run: dict | None, tracking_uri: str | None) -> Link:
    if not run or not run.get("run_id"):
        return Link("training run", None, UNKNOWN, detail="the checkpoint does not record its MLflow run")
    uri = tracking_uri or run.get("tracking_uri")
    if not uri:
        return Link("training run", None, UNKNOWN, run["run_id"],
                    detail="the checkpoint does not record its tracking store: pass --tracking-uri")
    from eoscale.track.store import describe_run

    found = describe_run(uri, run["run_id"])
    if not found["found"]:
        return Link("training run", uri, NOT_FOUND, run["run_id"], detail=found["reason"])
    datasets = ", ".join(f"{d['name']} ({d['digest']})" for d in found["datasets"])
    detail = f"experiment {found['experiment']!r}, {found['status']}" + (f"; trained on {datasets}" if datasets else "")
    return Link("training run", uri, FOUND, run["run_id"], run["run_id"], detail)


def _store_link(store: dict | None) -> Link:
    if not store or not store.get("path"):
        return Link("store", None, UNKNOWN, detail="the checkpoint does not record its tile store")
    path = Path(store["path"])
    if not path.is_dir():
        return Link("store", str(path), MISSING, store.get("fingerprint"))
    now = store_fingerprint(path)
    recorded = store.get("fingerprint")
    status = UNKNOWN if not recorded else OK if recorded == now else CHANGED
    detail = "" if recorded else "the store was ingested before stores had a fingerprint"
    return Link("store", str(path), status, recorded, now, detail)


def format_chain(chain: Chain) -> str:
    """The chain as text, one link a line, in order: map → checkpoint → training run → store → scenes."""
    lines = []
    for link in chain.links:
        label = ("  └ " if link.depth else "") + link.kind
        digest = _short(link.now or link.recorded)
        if link.status == CHANGED:
            digest = f"recorded {_short(link.recorded)}, now {_short(link.now)}"
        parts = [f"{label:<16}", f"{link.status:<9}", link.path or "-"]
        if digest:
            parts.append(f"[{digest}]")
        if link.detail:
            parts.append(f"({link.detail})")
        lines.append(" ".join(parts))
    changed = chain.changed
    lines.append(f"{len(changed)} link(s) changed since the map was made" if changed
                 else "every recorded file is as it was when the map was made")
    return "\n".join(lines)


def _short(value: str | None) -> str:
    return "" if not value else value[:12] + ("…" if len(value) > 12 else "")
