"""`eoscale info STORE`: what a tile store holds, and whether it is complete."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from eoscale.errors import IncompleteStoreError
from eoscale.paths import Paths
from eoscale.sensors import get_sensor, recorded_sensor
from eoscale.store import schema


def describe(path: str) -> dict:
    """A summary of the store: tiles, shards, bands, statistics, class counts per split, size on disk."""
    from eoscale.store.open import open_store

    ds = open_store(path)
    attrs = ds.attrs
    class_counts = ds[schema.CLASS_COUNTS].values
    per_split = {}
    for name, (start, stop) in attrs[schema.ATTR_SPLITS].items():
        per_split[name] = {"tiles": stop - start, "pixels_per_class": class_counts[start:stop].sum(axis=0).tolist()}
    images = Path(path) / schema.IMAGES
    return {
        "path": str(path),
        "complete": bool(attrs[schema.ATTR_COMPLETE]),
        "tiles": int(ds.sizes[schema.TILE]),
        "time_steps": int(ds.sizes[schema.TIME]),  # dates a tile (1 for a single-date store, and stores of version 1)
        "tile_size": attrs[schema.ATTR_TILE_SIZE],
        "shard_tiles": attrs[schema.ATTR_SHARD_TILES],
        "shards": -(-int(ds.sizes[schema.TILE]) // attrs[schema.ATTR_SHARD_TILES]),
        "sensor": recorded_sensor(attrs.get(schema.ATTR_SENSOR), attrs[schema.ATTR_BANDS]),
        **({"sensors": attrs[schema.ATTR_SENSORS]} if attrs.get(schema.ATTR_SENSORS) else {}),  # several: groups
        "bands": attrs[schema.ATTR_BANDS],
        "wavelengths_nm": attrs[schema.ATTR_WAVELENGTHS],
        "statistics": attrs[schema.ATTR_STATISTICS],
        "classes": attrs[schema.ATTR_CLASSES],
        "splits": per_split,
        "scenes": [{"id": s["id"], "epsg": s["epsg"], "size": [s["width"], s["height"]]} for s in attrs[schema.ATTR_SCENES]],
        "unmapped_label_codes": attrs.get(schema.ATTR_UNMAPPED, {}),
        "masked_pixels": attrs.get(schema.ATTR_MASKED, []),  # stores before eoscale recorded it have none
        "targets": _targets(attrs),
        "bytes_on_disk": sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()),
        "shard_files": sum(1 for f in images.rglob("*") if f.is_file() and f.name != "zarr.json"),
        "dates": _time_steps(ds),
    }


def _time_steps(ds) -> list[dict]:
    """Per time step: the dates its tiles hold (ISO, NaT left out), their mean valid share, the tiles masked on it
    (no pixel with data that date), and for composites the mean clear observations."""
    dates = ds[schema.DATES].values.astype("datetime64[D]")
    valid = ds[schema.DATE_VALID].values
    observations = ds[schema.OBSERVATIONS].values if schema.OBSERVATIONS in ds.coords else None
    out = []
    for k in range(dates.shape[1]):
        known = dates[:, k][~np.isnat(dates[:, k])]
        out.append({"step": k, "dates": [str(d) for d in np.unique(known)],
                    "mean_valid": float(valid[:, k].mean()) if len(valid) else 0.0,
                    "masked_tiles": int((valid[:, k] == 0).sum()),
                    **({"mean_observations": float(observations[:, k].mean())} if observations is not None else {})})
    return out

def _targets(attrs: dict) -> dict | None:
    """The per-pixel values a store holds beside its labels (`ingest --targets`): kind, name, units, nodata (NaN
    in the store) and their statistics; None for a store of class labels only."""
    if attrs.get(schema.ATTR_TARGET_KIND) is None:
        return None
    return {"kind": attrs[schema.ATTR_TARGET_KIND], "name": attrs.get(schema.ATTR_TARGET_NAME),
            "units": attrs.get(schema.ATTR_TARGET_UNITS), "nodata": "NaN",
            "statistics": attrs.get(schema.ATTR_TARGET_STATISTICS, {})}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", action=Paths, metavar="STORE", help="a tile store written by 'eoscale ingest'")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--check", action="store_true",
                        help="also read every shard whole, verifying its index checksum and every tile's codec "
                             "(a damaged shard is named; exit 2)")


def run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    try:
        info = describe(args.store)
    except IncompleteStoreError as err:
        # 'info' answers "is it complete?" too, so say it plainly and fail like any reader would
        print(f"incomplete: {err}")
        return 2
    if args.check:
        from eoscale.store.open import check_shards

        info["shards_checked"] = check_shards(args.store)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if args.check:
        print(f"checked: all {info['shards_checked']} shard files (images and labels) read whole and verified")
    console = Console()
    crs_names = ", ".join(sorted({f"EPSG:{s['epsg']}" for s in info["scenes"]}))
    console.print(
        f"[bold]{info['path']}[/]: complete, {info['tiles']} tiles of {info['tile_size']}×{info['tile_size']} px "
        f"in {info['shards']} shards of {info['shard_tiles']}, {info['bytes_on_disk'] / 1e6:.1f} MB on disk; "
        f"{len(info['scenes'])} scenes ({crs_names})"
    )
    titles = [get_sensor(g["name"]).title for g in info.get("sensors", [{"name": info["sensor"]}])]
    # several sensors: each band's statistics over the pixels where its own sensor has data
    bands = Table(title=f"{' + '.join(titles)} bands (statistics over valid pixels"
                        f"{', each sensor its own' if len(titles) > 1 else ''})")
    for col in ("band", "nm", "mean", "std", "p02", "p98"):
        bands.add_column(col, justify="right")
    stats = info["statistics"]
    for i, name in enumerate(info["bands"]):
        nm = info["wavelengths_nm"][i]
        bands.add_row(name, f"{nm:.0f}" if nm else "-", *(f"{stats[k][i]:.0f}" for k in ("mean", "std", "p02", "p98")))
    console.print(bands)
    classes = Table(title="classes: labelled pixels per split")
    classes.add_column("index", justify="right")
    classes.add_column("code", justify="right")
    classes.add_column("name")
    for name, split in info["splits"].items():
        classes.add_column(f"{name} ({split['tiles']} tiles)", justify="right")
    for c in info["classes"]:
        counts = [info["splits"][s]["pixels_per_class"][c["index"]] for s in info["splits"]]
        totals = [max(1, int(np.sum(info["splits"][s]["pixels_per_class"]))) for s in info["splits"]]
        classes.add_row(str(c["index"]), str(c["code"]), f"[{c['color']}]■[/] {c['name']}",
                        *(f"{n} ({100 * n / t:.1f}%)" for n, t in zip(counts, totals, strict=True)))
    console.print(classes)
    if info["masked_pixels"]:
        masked = Table(title="pixels without data in the tiles (labels ignored there), per scene and why")
        for col, justify in (("scene", "left"), ("no data where", "left"), ("tile pixels", "right"),
                             ("masked by mask/alpha", "right"), ("masked by nodata", "right")):
            masked.add_column(col, justify=justify)
        for m in info["masked_pixels"]:
            total = max(1, m["pixels"])
            masked.add_row(m["scene"], m["validity"], str(m["pixels"]),
                           *(f"{m[k]} ({100 * m[k] / total:.1f}%)" for k in ("by_mask", "by_nodata")))
        console.print(masked)
    if any(step["dates"] for step in info["dates"]):
        steps = Table(title=f"time steps ({info['time_steps']} a tile): dates, valid share, tiles masked that step")
        for col, justify in (("step", "right"), ("dates", "left"), ("mean valid", "right"), ("masked tiles", "right")):
            steps.add_column(col, justify=justify)
        for step in info["dates"]:
            shown = ", ".join(step["dates"][:4]) + (f", … ({len(step['dates'])})" if len(step["dates"]) > 4 else "")
            steps.add_row(str(step["step"]), shown or "-", f"{step['mean_valid']:.2f}", str(step["masked_tiles"]))
        console.print(steps)
    if info["targets"]:
        t = info["targets"]
        units = f" {t['units']}" if t["units"] else ""
        stats = ", ".join((f"{k} {v:,}" if k == "valid_pixels" else f"{k} {v:.3g}{units}") for k, v in t["statistics"].items()
                          if isinstance(v, int | float))
        console.print(f"targets: {t['kind']} '{t['name'] or 'value'}'{f' ({units.strip()})' if units else ''}, "
                      f"nodata {t['nodata']}; {stats}")
    if info["unmapped_label_codes"]:
        console.print(f"label codes not in the class table (ignored): {info['unmapped_label_codes']}")
    return 0
