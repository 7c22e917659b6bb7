"""An ingest killed with SIGKILL and rerun ends with a store identical to an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from eoscale.ingest.plan import make_plan, window_valid_fraction
from tests.rasters import CLASSES_CSV, write_labels, write_scene


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_kill_and_resume_gives_an_identical_store(tmp_path):
    scenes, labels = [], []
    for i in range(2):  # at tile 16 in shards of 4 tiles: about 120 shards, of which the kill leaves 20 or a few more
        scene = tmp_path / f"scene{i}.tif"
        classes = write_scene(scene, height=240, width=256, seed=i, origin=(310_000.0 + 6_000 * i, 5_650_000.0))
        write_labels(tmp_path / f"scene{i}_lc.tif", scene, classes)
        scenes.append(str(scene))
        labels.append(str(tmp_path / f"scene{i}_lc.tif"))
    (tmp_path / "classes.csv").write_text(CLASSES_CSV)

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "eoscale", "ingest", "--scenes", *scenes, "--labels", *labels,
                "--classes", str(tmp_path / "classes.csv"), "--output", str(out), "--tile-size", "16",
                "--shard-tiles", "4", "--workers", "2", "-q"]

    reference = tmp_path / "reference.zarr"
    subprocess.run(command(reference), check=True, capture_output=True)

    out = tmp_path / "resumed.zarr"
    progress = tmp_path / "resumed.zarr.partial" / "progress"
    victim = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(progress.glob("shard-*.npz"))) < 20:
        time.sleep(0.02)
    os.killpg(victim.pid, signal.SIGKILL)  # the CLI and its Dask workers, without any chance to clean up
    victim.wait()
    written = len(list(progress.glob("shard-*[0-9].npz")))
    total_shards = len(list((reference / "images" / "c").iterdir()))
    assert 0 < written < total_shards, "the kill should land midway"
    assert not out.exists()

    finished = subprocess.run(command(out), check=True, capture_output=True, text=True)
    assert "kept from an earlier run" in finished.stderr
    assert tree(out) == tree(reference)
    assert not (tmp_path / "resumed.zarr.partial").exists()


def test_window_valid_fraction_matches_a_direct_count():
    rng = np.random.default_rng(1)
    valid = rng.random((70, 90)) > 0.3
    got = window_valid_fraction(valid, 16, 12)
    for i, r in enumerate(range(0, 70 - 16 + 1, 12)):
        for j, c in enumerate(range(0, 90 - 16 + 1, 12)):
            assert got[i, j] == pytest.approx(valid[r : r + 16, c : c + 16].mean())


def test_plan_splits_are_spatial_blocks_and_contiguous():
    grids = [np.ones((20, 24), dtype=np.float32), np.ones((16, 16), dtype=np.float32)]
    grids[0][:3, :5] = 0.1
    plan = make_plan(grids, tile_size=32, stride=32, shard_tiles=16, min_valid=0.5,
                     fractions=(0.7, 0.2, 0.1), split_block=4, seed=3)
    assert len(plan) == 20 * 24 + 16 * 16 - 15 and plan.dropped_nodata == 15
    # neighbouring tiles of one block share a split
    for s in (0, 1):
        mine = plan.scene == s
        block = (plan.row_off[mine] // 32 // 4) * 100 + plan.col_off[mine] // 32 // 4
        for b in np.unique(block):
            assert len(np.unique(plan.split[mine][block == b])) == 1
    shares = np.bincount(plan.split, minlength=3) / len(plan)
    np.testing.assert_allclose(shares, [0.7, 0.2, 0.1], atol=0.05)
    assert (np.diff(plan.split) >= 0).all()  # each split is one contiguous range
    again = make_plan(grids, tile_size=32, stride=32, shard_tiles=16, min_valid=0.5,
                      fractions=(0.7, 0.2, 0.1), split_block=4, seed=3)
    np.testing.assert_array_equal(plan.split, again.split)
