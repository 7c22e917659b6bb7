#!/usr/bin/env bash
# The main job on the embedded default data: synthetic Sentinel-2 scenes → a sharded Zarr tile store.
# Everything lands in runs/quickstart/ (rerunning replaces it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=runs/quickstart
eoscale() { .venv/bin/eoscale "$@"; }
echo "== 1/3 eoscale synth: 5 synthetic Sentinel-2 L2A scenes (10 bands, UTM 32N) + WorldCover labels (EPSG:3035)"
eoscale synth "$out/data" --overwrite
echo "== 2/3 eoscale ingest: scenes + labels → sharded Zarr v3 tile store"
eoscale ingest --scenes "$out/data/scenes/*.tif" --labels "$out/data/labels/*.tif" \
    --classes "$out/data/classes.csv" --output "$out/tiles.zarr" --overwrite
echo "== 3/3 eoscale info"
eoscale info "$out/tiles.zarr"
echo
echo "done: scenes in $out/data, tile store in $out/tiles.zarr (open it with xarray.open_zarr)"
