"""`pipelines/season-fused.yaml`, as a user runs it: synth a season of Sentinel-2, Sentinel-1 and a DEM → ingest
--time-series --composite --static of four places (the fifth held out) → fit a U-TAE on the 16 channels. It runs in a
scratch folder (configs/ linked, the pipeline copied with its training shortened), never in the checkout's runs/."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from eoscale.cli import main
from eoscale.store import schema
from eoscale.store.open import open_store
from tests.processes import ROOT, VENV, run_cli

PIPELINE = ROOT / "pipelines" / "season-fused.yaml"
STEPS = 4  # the pipeline's 200, cut for the suite's time


def test_the_fused_season_pipeline_dry_run(capsys):
    assert main(["pipeline", "run", str(PIPELINE), "--dry-run"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["== 1/3 synth", "== 2/3 ingest", "== 3/3 fit"]
    assert "--dates 6" in lines[0] and "--sensors s2,s1,dem" in lines[0]
    assert "--time-series --composite 56d" in lines[1] and "--static" in lines[1]
    assert "place_00[0-3]" in lines[1] and "place_004" not in lines[1]  # place 4 held out of the store
    assert "--config configs/temporal_utae.yaml" in lines[2]


@pytest.mark.slow
def test_the_fused_season_pipeline_fits_on_both_sensors_and_the_dem(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "pipelines").mkdir()
    pipeline = yaml.safe_load(PIPELINE.read_text())
    fit = pipeline["steps"][2]
    assert "--trainer.max_steps 200" in fit["command"]
    fit["command"] = fit["command"].replace("--trainer.max_steps 200", f"--trainer.max_steps {STEPS}").replace(
        "--trainer.val_check_interval 100", f"--trainer.val_check_interval {STEPS}")
    (tmp_path / "pipelines" / "season-fused.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    started = time.perf_counter()
    done = run_cli(["pipeline", "run", "pipelines/season-fused.yaml"], tmp_path, timeout=900,
                   env={"PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    print(f"fused season pipeline: {time.perf_counter() - started:.0f} s")
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "runs" / "season-fused"
    store = open_store(out / "tiles.zarr")
    assert [g["name"] for g in store.attrs[schema.ATTR_SENSORS]] == ["sentinel-2", "sentinel-1", "copdem"]
    # places 0-3 (each named after its first optical scene, place_00i_<date>), place 4 held out
    assert sorted(s["place"][:9] for s in store.attrs[schema.ATTR_SCENES]) == [f"place_00{i}" for i in range(4)]
    assert list((out / "fit").rglob("last.ckpt"))
