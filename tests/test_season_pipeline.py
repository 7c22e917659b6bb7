"""`pipelines/season.yaml` end to end, as a user runs it: synth --dates → ingest --time-series --composite →
fit a U-TAE → predict the held-out place's dated scenes as one stack → assess → compare.

It runs in a scratch folder (pipelines/ linked, configs/ copied with the season overlay's training shortened: every
command, file and MLflow record is the same, only the model learns less), so it never touches the checkout's runs/.
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
from tests.processes import ROOT, VENV, run_cli

STEPS = 10  # the README's 200 (configs/quickstart/season.yaml), cut for the suite's time
STEPS_NAMES = ["synth", "ingest", "fit", "predict", "assess", "compare"]


def test_the_season_pipeline_dry_run(capsys):
    assert main(["pipeline", "run", str(ROOT / "pipelines" / "season.yaml"), "--dry-run"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"== {i}/6 {name}" for i, name in enumerate(STEPS_NAMES, 1)]
    assert "--dates 6" in lines[0] and "--time-series --composite 56d" in lines[1]
    assert "place_00[0-3]" in lines[1] and "place_004" not in lines[1]  # place 4 held out of the store
    assert "eoscale fit --config configs/temporal_utae.yaml --config configs/quickstart/season.yaml" in lines[2]
    assert "--input 'runs/season/data/scenes/place_004/*.tif'" in lines[3]  # all its dates, one stack
    assert "--reference runs/season/data/labels/place_004_landcover.tif" in lines[4]


@pytest.mark.slow
def test_the_season_pipeline_maps_a_held_out_place_from_its_dates(tmp_path):
    import rasterio
    from rio_cogeo.cogeo import cog_validate

    (tmp_path / "pipelines").symlink_to(ROOT / "pipelines")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    overlay_path = tmp_path / "configs" / "quickstart" / "season.yaml"
    overlay = yaml.safe_load(overlay_path.read_text())
    assert overlay["trainer"]["max_steps"] > STEPS
    overlay["trainer"].update(max_steps=STEPS, val_check_interval=STEPS, limit_val_batches=2)
    overlay["model"]["init_args"]["warmup_steps"] = 2
    overlay_path.write_text(yaml.safe_dump(overlay, sort_keys=False))
    started = time.perf_counter()
    done = run_cli(["pipeline", "run", "pipelines/season.yaml"], tmp_path, timeout=900,
                   env={"PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    print(f"season pipeline: {time.perf_counter() - started:.0f} s")
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "runs" / "season"
    landcover = out / "maps" / "place_004_20240214_landcover.tif"
    assert cog_validate(str(landcover), quiet=True)[0]
    with rasterio.open(landcover) as src, rasterio.open(out / "data" / "scenes" / "place_004" /
                                                          "place_004_20240214.tif") as first:
        assert src.crs == first.crs and src.transform == first.transform and src.shape == first.shape
        assert len(set(src.read(1).ravel().tolist()) - {src.nodata}) >= 2  # a real map
        # of all the place's dates, one stack (a map of its first date alone passed the checks above)
        lineage = json.loads(src.tags()["EOSCALE_LINEAGE"])
    dates = sorted((out / "data" / "scenes" / "place_004").glob("*.tif"))
    assert len(dates) > 1 and sorted(Path(r["path"]).name for r in lineage["scenes"]) == [p.name for p in dates]
    assessment = json.loads((out / "assessment" / "assessment.json").read_text())
    assert assessment["kind"] == "census" and 0.0 <= assessment["overall_accuracy"]["estimate"] <= 1.0
    assert (out / "compare" / "comparison.md").is_file()
