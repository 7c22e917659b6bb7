#!/usr/bin/env bash
# The main job on the embedded default data, end to end (pipelines/quickstart.yaml): synthetic Sentinel-2
# scenes → a sharded Zarr tile store (scene 4 held out) → a ResNet-18 + FPN trained on its labels → a
# land-cover map of the held-out scene → its accuracy against the scene's truth → the runs compared in MLflow.
# A few minutes on 2 CPU cores.
# Everything lands in runs/quickstart/ (rerunning replaces it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=runs/quickstart
if [ -e "$out" ]; then
    echo "== replacing the earlier quick start in $out"
    rm -rf "$out"
fi
started=$SECONDS
PATH="$PWD/.venv/bin:$PATH" eoscale pipeline run pipelines/quickstart.yaml
store="$PWD/$out/mlflow.db"
echo
echo "done in $((SECONDS - started)) s:"
echo "  scenes             $out/data/scenes/  (scene_004 was held out of the store)"
echo "  tile store         $out/tiles.zarr  (eoscale info $out/tiles.zarr)"
echo "  model              $out/fit/checkpoints/last.ckpt  (ResNet-18 + FPN; eoscale predict --checkpoint …)"
echo "  land-cover map     $out/maps/scene_004_landcover.tif  (Cloud-Optimized GeoTIFF; gdalinfo, QGIS)"
echo "  confidence         $out/maps/scene_004_confidence.tif"
echo "  quick-look         $out/maps/scene_004_quicklook.png"
echo "  class areas        $out/maps/scene_004_areas.csv"
echo "  STAC item          $out/maps/scene_004_item.json  (eoscale lineage $out/maps/scene_004_landcover.tif)"
echo "  accuracy, areas    $out/assessment/  (assessment.md: against scene_004's synthetic truth, Olofsson et al. 2014)"
echo "  run comparison     $out/compare/  (comparison.md, PNG plots)"
echo "  MLflow store       $store  (artifacts in $out/mlartifacts/)"
echo "open the runs in the MLflow UI:"
echo "  .venv/bin/mlflow ui --backend-store-uri sqlite:///$store --port 5000    # then http://127.0.0.1:5000"
