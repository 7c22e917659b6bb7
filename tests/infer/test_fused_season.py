"""`predict` of a place from its raw Sentinel-2 and Sentinel-1 scenes, each sensor on its own dates, with a checkpoint
of both sensors and several dates (`eoscale.raster.fused_season`): one stack a place whose steps are the union of the
sensors' dates, each sensor present on its own dates only and absent (its channels 0) on the others; a place seen only
by radar maps with `--missing-sensor dropout` and is refused in one line without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rio_cogeo.cogeo import cog_validate

from eoscale.bands import SENTINEL2_NAMES
from eoscale.cli import main
from eoscale.infer.predict import read_strip
from eoscale.infer.windows import WindowGrid
from eoscale.inputs.spec import infer
from eoscale.raster.fused_season import season_steps
from eoscale.raster.reader import SceneReader
from eoscale.raster.sources import open_scene
from eoscale.raster.stack import StackReader, stack_scenes
from eoscale.sensors.groups import parse_groups
from eoscale.synth import synthesize
from tests.checkpoints import TILE, make_season_checkpoint

SIZE = 64
RADAR = ("VV", "VH")
SENSORS = [{"name": "sentinel-2", "bands": list(SENTINEL2_NAMES)}, {"name": "sentinel-1", "bands": list(RADAR)}]
BANDS = (*SENTINEL2_NAMES, *RADAR)
MEAN = tuple([1500.0] * len(SENTINEL2_NAMES) + [9000.0, 8400.0])
STD = tuple([1000.0] * len(SENTINEL2_NAMES) + [400.0, 400.0])
RADAR_DATES = ("2024-02-14", "2024-05-01")  # the first is also an optical date (synth's season, seed 3), not the second


def _radar_on(source: Path, folder: Path, day: str) -> Path:
    """A copy of the radar scene `source` (its Item's folder) acquired on `day`."""
    target = folder / f"S1A_{day.replace('-', '')}"
    shutil.copytree(source, target)
    (item_path,) = target.glob("*.json")
    item = json.loads(item_path.read_text())
    item["id"] = target.name
    for key in ("datetime", "start_datetime", "end_datetime"):
        item["properties"][key] = f"{day}T17:15:24Z"
    item_path.unlink()
    (target / f"{target.name}.json").write_text(json.dumps(item))
    return target


@pytest.fixture(scope="module")
def season(tmp_path_factory) -> dict:
    """One place: 3 optical dates (Feb, Jul, Nov) and 2 radar dates (Feb, May) on the same 64 px grid."""
    root = tmp_path_factory.mktemp("fused-season")
    optical = synthesize(root / "s2", scenes=1, size=SIZE, seed=3, dates=3, nodata_fraction=0)
    radar = synthesize(root / "s1", scenes=1, size=SIZE, seed=4, sensors=("s2", "s1"))
    (root / "sar").mkdir()
    radars = [_radar_on(radar.sar_items[0].parent, root / "sar", day) for day in RADAR_DATES]
    return {"optical": list(optical.scene_paths), "radar": radars}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_season_checkpoint(tmp_path_factory.mktemp("ckpt") / "season.ckpt", time_steps=4, bands=BANDS,
                                  mean=MEAN, std=STD, sensors=SENSORS)


def _opened(season: dict) -> tuple[list, list]:
    return [open_scene(str(p)) for p in season["optical"]], [open_scene(str(p)) for p in season["radar"]]


def test_each_sensor_is_present_on_its_own_dates_only(season, tmp_path):
    # guards: predict paired each optical date with the nearest radar scene (a radar scene stood for dates it did
    # not see, and a radar-only date was not a step)
    optical, radar = _opened(season)
    groups = parse_groups(SENSORS, BANDS)
    steps = season_steps([*radar, *optical], groups, 4, folder=tmp_path / "work")
    (stack,) = stack_scenes(steps, 4, require="any")
    assert [str(d) for d in stack.dates] == ["2024-02-14", "2024-05-01", "2024-07-03", "2024-11-20"]
    assert stack.id == optical[0].id and stack.transform == optical[0].transform
    spec = infer(bands=BANDS, sensor="sentinel-2", record=SENSORS, steps=4, tile_size=32,
                 nodata=0).with_statistics((0.0,) * 12, (1.0,) * 12)  # values as read
    grid = WindowGrid.make(SIZE, SIZE, window=32, overlap=0.0)
    seen = np.zeros((4, 12, SIZE, SIZE), np.float32)
    with StackReader(stack) as reader:
        for row in range(grid.rows.count):
            windows = read_strip(reader, grid, row, spec=spec).windows.numpy()
            for k, window in enumerate(windows):
                seen[:, :, row * 32:(row + 1) * 32, k * 32:(k + 1) * 32] = window.reshape(4, 12, 32, 32)

    def own(scene):
        with SceneReader(scene) as alone:
            block = alone.read_masked(0, 0, SIZE, SIZE)
        return np.where(block.valid, block.pixels, 0).astype(np.float32)

    # optical channels: each optical date's own pixels, 0 on the radar-only date
    for step, scene in ((0, optical[0]), (2, optical[1]), (3, optical[2])):
        np.testing.assert_array_equal(seen[step, :10], own(scene))
    assert (seen[1, :10] == 0).all()
    # radar channels: each radar date's own pixels (some of them under its swath's edge: 0), 0 on optical-only dates
    for step, scene in ((0, radar[0]), (1, radar[1])):
        want = own(scene)
        assert want.any() and not want.all()
        np.testing.assert_array_equal(seen[step, 10:], want)
    assert (seen[2:, 10:] == 0).all()


@pytest.mark.slow  # two predicts (about 12 s on 2 cores)
def test_a_place_of_both_sensors_maps_from_its_raw_scenes(season, checkpoint, tmp_path, capsys):
    inputs = [*map(str, season["optical"]), *map(str, season["radar"])]
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *inputs, "--output", str(tmp_path / "maps"),
                 "--window", str(TILE), "--device", "cpu", "--no-progress"]) == 0
    said = capsys.readouterr().err  # predict's log names the scenes of each sensor the place was made of
    assert "sentinel-1 2 (" in said and "sentinel-2 3 (" in said, said
    (landcover,) = (tmp_path / "maps").glob("*_landcover.tif")  # one map of the place, on its first optical grid
    assert landcover.name == f"{season['optical'][0].stem}_landcover.tif"
    assert cog_validate(str(landcover), quiet=True)[0]
    with rasterio.open(landcover) as src, rasterio.open(season["optical"][0]) as first:
        assert (src.crs, src.transform, src.shape) == (first.crs, first.transform, first.shape)
        assert not src.read(1, masked=True).mask.any()
    # more dates than the checkpoint's 4: refused in one line
    extra = _radar_on(season["radar"][0], tmp_path, "2024-09-09")
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *inputs, str(extra), "--output",
                 str(tmp_path / "five"), "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "5 date(s)" in err and "at most 4" in err, err


@pytest.mark.slow  # two predicts (about 6 s on 2 cores)
def test_a_season_seen_only_by_radar_maps_with_dropout_and_is_refused_without(season, checkpoint, tmp_path, capsys):
    # guards: predict refused a place without a Sentinel-2 scene ("no sentinel-2 scene given"), dropout or not
    radar = list(map(str, season["radar"]))
    out = tmp_path / "refused"
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *radar, "--output", str(out),
                 "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no sentinel-2 data" in err and "--missing-sensor dropout" in err, err
    assert not out.exists()
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", *radar, "--output", str(tmp_path / "maps"),
                 "--window", str(TILE), "--device", "cpu", "--no-progress", "--missing-sensor", "dropout"]) == 0
    first = open_scene(radar[0])
    (landcover,) = (tmp_path / "maps").glob("*_landcover.tif")
    assert landcover.name == f"{first.id}_landcover.tif"
    with SceneReader(first) as reader, SceneReader(open_scene(radar[1])) as other:
        seen = reader.read_masked(0, 0, SIZE, SIZE).valid | other.read_masked(0, 0, SIZE, SIZE).valid
    with rasterio.open(landcover) as src:
        assert (src.crs, src.transform) == (first.crs, first.transform)
        mapped = src.read(1, masked=True)
    assert seen.any() and (~mapped.mask == seen).all()  # classes wherever a radar date sees the ground, only there
