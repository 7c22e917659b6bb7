"""Two ingests into one output: one writes, the other stops with one line (issue 13, fault 9)."""

from __future__ import annotations

from filelock import FileLock

from eoscale.cli import main


def test_a_second_ingest_into_a_busy_output_stops_at_once(rasters, tmp_path, capsys):
    out = tmp_path / "tiles.zarr"
    args = ["ingest", "--scenes", str(rasters / "scenes" / "*.tif"), "--labels", str(rasters / "labels" / "*.tif"),
            "--classes", str(rasters / "classes.csv"), "--output", str(out), "--tile-size", "32", "--workers", "1"]
    with FileLock(str(tmp_path / "tiles.zarr.lock"), timeout=0):  # as a running ingest holds it
        assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another 'eoscale ingest' is writing" in err[0], err
    assert not out.exists() and not (tmp_path / "tiles.zarr.partial").exists()
    assert main(args) == 0 and out.is_dir()  # once it is free, the same command runs
    assert not (tmp_path / "tiles.zarr.lock").exists()


def test_verify_fingerprints_contents_not_times(rasters, tmp_path):
    """Issue 13, item 15: a copy that loses mtimes resumes under --verify; changed content never does."""
    import os
    import shutil

    from eoscale.ingest.run import _fingerprint
    from eoscale.raster.sources import open_scenes

    scene = tmp_path / "scene0.tif"
    shutil.copy(rasters / "scenes" / "scene0.tif", scene)
    scenes = open_scenes([str(scene)])
    before = {v: _fingerprint({}, scenes, [], verify=v) for v in (False, True)}
    os.utime(scene, (1, 1))  # as a copy without -p leaves it
    assert _fingerprint({}, scenes, [], verify=False) != before[False]
    assert _fingerprint({}, scenes, [], verify=True) == before[True]
    data = bytearray(scene.read_bytes())
    data[-1] ^= 1
    scene.write_bytes(bytes(data))
    assert _fingerprint({}, scenes, [], verify=True) != before[True]


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_overwrite_replaces_only_an_eoscale_store(rasters, tmp_path, capsys):
    """Issue 13, fault 2: `--output precious --overwrite` deleted a folder of the user's."""
    import shutil

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("field notes\n")
    shutil.copy(rasters / "scenes" / "scene0.tif", precious / "scene0.tif")
    before = _tree(precious)
    args = ["ingest", "--scenes", str(rasters / "scenes" / "*.tif"), "--labels", str(rasters / "labels" / "*.tif"),
            "--classes", str(rasters / "classes.csv"), "--tile-size", "32", "--workers", "1", "--overwrite"]
    assert main([*args, "--output", str(precious)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an eoscale tile store" in err[0] and "precious" in err[0], err
    assert _tree(precious) == before and not (tmp_path / "precious.partial").exists()
    # an earlier store of eoscale's is replaced as before
    store = tmp_path / "tiles.zarr"
    assert main([*args, "--output", str(store)]) == 0
    assert main([*args, "--output", str(store), "--seed", "3"]) == 0 and (store / "zarr.json").exists()
