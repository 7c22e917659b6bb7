"""`eoscale lineage MAP`: where a land-cover map comes from, and what changed since it was made.

    eoscale lineage maps/scene_landcover.tif
    eoscale lineage maps/scene_item.json --json
    eoscale lineage maps/scene_landcover.tif --tracking-uri http://mlflow.cluster:5000

Prints the chain map → its scenes → checkpoint (→ adapter) → training run → tile store → the store's input
files, each with its status: OK (same sha256 / fingerprint as recorded), CHANGED, MISSING, unknown (never
recorded: a checkpoint or store from before lineage), and for the training run FOUND or NOT FOUND in its
tracking store. The store's fingerprint is checked by reading every file of the store (see
`eoscale.catalog.digest`). Exit 0 when every recorded file is unchanged, 1 when one changed or is missing (a
run that is not found is reported, not counted: tracking stores move), 2 for a map without lineage.
"""

from __future__ import annotations

import argparse
import json

from eoscale.paths import Paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("map", action=Paths, metavar="MAP", help="a map written by 'eoscale predict' (<scene>_landcover.tif) or "
                                                    "its STAC Item (<scene>_item.json)")
    parser.add_argument("--json", action="store_true", help="print the chain as JSON")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="look the training run up here instead of the tracking store the checkpoint records")


def run(args: argparse.Namespace) -> int:
    from eoscale.maps.lineage import format_chain, trace

    chain = trace(args.map, tracking_uri=args.tracking_uri)
    print(json.dumps(chain.to_dict(), indent=1) if args.json else format_chain(chain))
    return 1 if chain.changed else 0
