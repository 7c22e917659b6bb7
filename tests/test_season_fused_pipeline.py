"""`pipelines/season-fused.yaml`, as a user runs it: synth a season of Sentinel-2, Sentinel-1 and a DEM → ingest
--time-series --composite --static of four places (the fifth held out) → fit a U-TAE on the 16 channels → predict the
held-out place from its raw scenes (its optical dates, the folder of every radar pass, its DEM) → assess the map
against the place's truth → compare the runs.

It runs in a scratch folder (pipelines/ linked, configs/ copied with the overlay's training shortened: every command,
file and MLflow record is the same, only the model learns less), never in the checkout's runs/.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from eoscale.cli import main
from eoscale.store import schema
from eoscale.store.open import open_store
from tests.processes import ROOT, VENV, run_cli

PIPELINE = ROOT / "pipelines" / "season-fused.yaml"
STEPS_NAMES = ["synth", "ingest", "fit", "predict", "assess", "compare"]
STEPS = 60  # the overlay's 200 (configs/quickstart/season-fused.yaml), cut for the suite's time
# Overall accuracy of place 4's map (census against its truth) after STEPS steps: 0.327 measured here (seed 0, 83 s for
# the whole test); the same pipeline's untrained network (1 step, warm-up 4) 0.174, and mapping every pixel as the
# place's commonest class would score 0.195 (40 steps: 0.247; the overlay's 200: 0.474). The floor lies above both.
OA_FLOOR = 0.25


def test_the_fused_season_pipeline_dry_run(capsys):
    assert main(["pipeline", "run", str(PIPELINE), "--dry-run"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"== {i}/6 {name}" for i, name in enumerate(STEPS_NAMES, 1)]
    assert "--dates 6" in lines[0] and "--sensors s2,s1,dem" in lines[0]
    assert "--time-series --composite 56d" in lines[1] and "--static" in lines[1]
    assert "place_00[0-3]" in lines[1] and "place_004" not in lines[1]  # place 4 held out of the store
    assert "--config configs/temporal_utae.yaml --config configs/quickstart/season-fused.yaml" in lines[2]
    # the held-out place from its raw scenes: its optical dates, every radar pass of the region, its DEM
    assert "'runs/season-fused/data/scenes/place_004/*.tif' 'runs/season-fused/data/sar/*'" in lines[3]
    assert "--static 'runs/season-fused/data/dem/place_004/*.tif'" in lines[3]
    assert "--reference runs/season-fused/data/labels/place_004_landcover.tif" in lines[4]


@pytest.mark.slow
def test_the_fused_season_pipeline_maps_a_held_out_place_from_its_raw_scenes(tmp_path):
    import rasterio
    from rio_cogeo.cogeo import cog_validate

    (tmp_path / "pipelines").symlink_to(ROOT / "pipelines")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    overlay_path = tmp_path / "configs" / "quickstart" / "season-fused.yaml"
    overlay = yaml.safe_load(overlay_path.read_text())
    assert overlay["trainer"]["max_steps"] > STEPS
    overlay["trainer"].update(max_steps=STEPS, val_check_interval=STEPS, limit_val_batches=2)
    overlay["model"]["init_args"]["warmup_steps"] = 4
    overlay_path.write_text(yaml.safe_dump(overlay, sort_keys=False))
    started = time.perf_counter()
    done = run_cli(["pipeline", "run", "pipelines/season-fused.yaml"], tmp_path, timeout=900,
                   env={"PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    print(f"fused season pipeline: {time.perf_counter() - started:.0f} s")
    # guards: predict given the folder of every radar pass refused the passes over places 0-3 as places without
    # optical data (synth writes all places' passes into one sar/ folder, as a user's download holds a region's)
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "runs" / "season-fused"
    store = open_store(out / "tiles.zarr")
    assert [g["name"] for g in store.attrs[schema.ATTR_SENSORS]] == ["sentinel-2", "sentinel-1", "copdem"]
    assert sorted(s["place"][:9] for s in store.attrs[schema.ATTR_SCENES]) == [f"place_00{i}" for i in range(4)]

    landcover = out / "maps" / "place_004_20240214_landcover.tif"
    assert cog_validate(str(landcover), quiet=True)[0]
    place = out / "data" / "scenes" / "place_004"
    with rasterio.open(landcover) as src, rasterio.open(place / "place_004_20240214.tif") as first:
        assert (src.crs, src.transform, src.shape) == (first.crs, first.transform, first.shape)
        lineage = json.loads(src.tags()["EOSCALE_LINEAGE"])
    # made from both sensors: every optical date of place 4 and exactly the radar passes over it (synth's manifest)
    read = {Path(r["path"]).relative_to(out / "data").as_posix() for r in lineage["scenes"]}
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    passes = [p for p in manifest["sentinel1"] if p["place"] == "place_004"]
    assert len(passes) == 3 and len(manifest["sentinel1"]) == 15
    assert {path for path in read if path.startswith("scenes/")} == {f"scenes/place_004/{p.name}"
                                                                     for p in place.glob("*.tif")}
    assert {path for p in passes for path in p["bands"].values()} <= read
    others = {path for p in manifest["sentinel1"] if p["place"] != "place_004" for path in p["bands"].values()}
    assert not read & others  # the passes over places 0-3 were left out, and predict said so
    assert "left out 12 scene(s) that overlap none of the sentinel-2 scenes given" in done.stderr
    # and its DEM, the source of its static layers (the lineage named none)
    assert [Path(r["path"]).relative_to(out / "data").parts[:2] for r in lineage["static"]] == [("dem", "place_004")]

    assessment = json.loads((out / "assessment" / "assessment.json").read_text())
    print(f"place 4's overall accuracy after {STEPS} steps: {assessment['overall_accuracy']['estimate']:.3f}")
    assert assessment["kind"] == "census"
    assert assessment["overall_accuracy"]["estimate"] > OA_FLOOR, assessment["overall_accuracy"]
    assert (out / "compare" / "comparison.md").is_file()
