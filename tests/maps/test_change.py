"""`eoscale change`: two class maps of one place (tests/maps/changes.py: forest lost to cropland, grassland built
over) become a valid change COG whose transition areas are the known changes, on map A's grid whatever map B's;
`sample` stratifies on its transitions and `assess` estimates them; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
from rasterio.enums import Resampling
from rasterio.warp import calculate_default_transform, reproject
from rio_cogeo.cogeo import cog_validate

from eoscale.classes import ClassTable, LandCoverClass
from eoscale.cli import main
from eoscale.maps.change import change_table
from tests.maps.changes import BUILT, CROPS, GRASS, NODATA, TABLE, TREES, change_pair
from tests.maps.maps import ORIGIN, write_map

C = len(TABLE)
OUTPUTS = ("change.tif", "transitions.csv", "transitions.json", "change_quicklook.png")


def code_of(a: int, b: int) -> int:
    return TABLE.codes.index(a) * C + TABLE.codes.index(b) + 1


def expected_codes(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    valid = (before != NODATA) & (after != NODATA)
    lut = np.zeros(256, dtype=np.int64)
    lut[TABLE.codes] = np.arange(C)
    return np.where(valid, lut[before] * C + lut[after] + 1, 0)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    p = change_pair()
    a = write_map(folder / "2018_landcover.tif", p.before, table=TABLE)
    b = write_map(folder / "2024_landcover.tif", p.after, table=TABLE)
    return p, a, b


@pytest.fixture(scope="module")
def changed(pair, tmp_path_factory):
    p, a, b = pair
    out = tmp_path_factory.mktemp("change") / "2018-2024"
    assert main(["change", str(a), str(b), "--output", str(out), "--window", "64"]) == 0
    return out


def test_the_change_map_is_a_valid_cog_of_the_known_transitions(pair, changed):
    p, a, _ = pair
    assert sorted(x.name for x in changed.iterdir()) == sorted(OUTPUTS)  # no .partial left
    valid, errors, _ = cog_validate(str(changed / "change.tif"))
    assert valid, errors
    with rasterio.open(changed / "change.tif") as src, rasterio.open(a) as src_a:
        assert src.crs == src_a.crs and src.transform == src_a.transform and src.shape == src_a.shape
        assert src.nodata == 0 and src.dtypes[0] == "uint8"
        np.testing.assert_array_equal(src.read(1), expected_codes(p.before, p.after))
        tags, colours = src.tags(), src.colormap(1)
        table = ClassTable.from_records(json.loads(tags["EOSCALE_CLASSES"]))
    assert tags["EOSCALE_TARGET"] == "change" and tags["EOSCALE_NODATA"] == "0"
    assert table.codes == list(range(1, C * C + 1))  # every transition: a reference may name one the map missed
    loss = code_of(TREES, CROPS)
    assert table.classes[loss - 1].name == "Tree cover → Cropland"
    assert json.loads(tags["EOSCALE_TRANSITIONS"])[loss - 1] == {"code": loss, "from": TREES, "to": CROPS}
    same = colours[code_of(TREES, TREES)][:3]
    assert max(same) - min(same) < 100  # unchanged: greyed
    assert colours[loss][:3] != colours[code_of(GRASS, BUILT)][:3]  # changes: a colour each
    assert colours[0] == (0, 0, 0, 0)
    assert (changed / "change_quicklook.png").read_bytes()[:4] == b"\x89PNG"


def test_transition_areas_are_the_known_changes(pair, changed):
    p, _, _ = pair
    summary = json.loads((changed / "transitions.json").read_text())
    found = {(r["from_code"], r["to_code"]): r for r in summary["transitions"]}
    assert {k: r["pixels"] for k, r in found.items()} == p.transitions()
    assert found[(TREES, CROPS)]["pixels"] == p.forest_loss.sum() > 500
    assert found[(GRASS, BUILT)]["pixels"] == p.new_built.sum() > 200
    assert found[(TREES, CROPS)]["hectares"] == pytest.approx(p.forest_loss.sum() * 0.01)  # 10 m pixels
    assert summary["changed_hectares"] == pytest.approx((p.forest_loss.sum() + p.new_built.sum()) * 0.01)
    rows = pd.read_csv(changed / "transitions.csv")
    assert rows.loc[rows["code"] == code_of(GRASS, BUILT), "hectares"].item() == pytest.approx(p.new_built.sum() * 0.01)


def test_map_b_on_another_grid_is_put_on_map_as(pair, tmp_path):
    p, a, _ = pair
    # B covers A from row 10, column 20 on (same CRS and resolution): the change map is A's grid cropped to it
    shifted = write_map(tmp_path / "b_landcover.tif", np.ascontiguousarray(p.after[10:, 20:]), table=TABLE,
                        origin=(ORIGIN[0] + 200, ORIGIN[1] - 100))
    assert main(["change", str(a), str(shifted), "--output", str(tmp_path / "shifted")]) == 0
    with rasterio.open(tmp_path / "shifted" / "change.tif") as src:
        assert src.shape == (p.before.shape[0] - 10, p.before.shape[1] - 20)
        assert (src.transform.c, src.transform.f) == (ORIGIN[0] + 200, ORIGIN[1] - 100)
        np.testing.assert_array_equal(src.read(1), expected_codes(p.before[10:, 20:], p.after[10:, 20:]))

    # B in another CRS (EPSG:3035, 12 m): nearest neighbour on A's grid, as GDAL's warp puts it there
    with rasterio.open(a) as src:
        transform, w, h = calculate_default_transform(src.crs, "EPSG:3035", src.width, src.height, *src.bounds,
                                                      resolution=12.0)
        laea = np.zeros((h, w), dtype=np.uint8)
        reproject(p.after, laea, src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                  dst_crs="EPSG:3035", resampling=Resampling.nearest, src_nodata=0, dst_nodata=0)
        back = np.zeros_like(p.after)  # the expected: B put back on A's grid
        reproject(laea, back, src_transform=transform, src_crs="EPSG:3035", dst_transform=src.transform,
                  dst_crs=src.crs, resampling=Resampling.nearest, src_nodata=0, dst_nodata=0)
        tags = {k: v for k, v in src.tags().items() if k.startswith("EOSCALE")}
    other = tmp_path / "laea_landcover.tif"
    with rasterio.open(other, "w", driver="GTiff", height=h, width=w, count=1, dtype="uint8", crs="EPSG:3035",
                       transform=transform, nodata=0) as dst:
        dst.write(laea, 1)
        dst.update_tags(**tags)
    assert main(["change", str(a), str(other), "--output", str(tmp_path / "laea")]) == 0
    assert cog_validate(str(tmp_path / "laea" / "change.tif"))[0]
    with rasterio.open(tmp_path / "laea" / "change.tif") as src:
        assert src.shape == p.before.shape
        np.testing.assert_array_equal(src.read(1), expected_codes(p.before, back))
    summary = json.loads((tmp_path / "laea" / "transitions.json").read_text())
    found = {(r["from_code"], r["to_code"]): r["pixels"] for r in summary["transitions"]}
    assert found[(GRASS, BUILT)] == pytest.approx(p.new_built.sum(), rel=0.2)  # 12 m pixels there and back


def refused(capsys, out: Path, *argv: str, match: str) -> None:
    assert main(["change", *argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err, err
    assert not out.exists()


def test_bad_input_is_one_line_exit_2_and_nothing_written(pair, changed, tmp_path, capsys):
    p, a, b = pair
    far = write_map(tmp_path / "far_landcover.tif", p.after, table=TABLE, origin=(ORIGIN[0] + 50_000, ORIGIN[1]))
    refused(capsys, tmp_path / "o1", str(a), str(far), match="do not overlap")
    recoloured = ClassTable(tuple(LandCoverClass(c.code, c.name, "#123456" if c.code == BUILT else c.color)
                                  for c in TABLE.classes))
    other = write_map(tmp_path / "other_landcover.tif", p.after, table=recoloured)
    refused(capsys, tmp_path / "o2", str(a), str(other), match="different class tables")
    values = write_map(tmp_path / "height.tif", p.after, table=TABLE)
    with rasterio.open(values, "r+") as dst:
        dst.update_tags(EOSCALE_TARGET="values")
    refused(capsys, tmp_path / "o3", str(a), str(values), match="holds 'values', not classes")
    refused(capsys, tmp_path / "o4", str(changed / "change.tif"), str(b), match="holds 'change', not classes")
    refused(capsys, tmp_path / "o5", str(a), str(tmp_path / "missing.tif"), match="does not exist")

    before = (changed / "change.tif").read_bytes()
    assert main(["change", str(a), str(b), "--output", str(changed)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert (changed / "change.tif").read_bytes() == before


def test_sample_stratifies_on_transitions_and_assess_estimates_them(pair, changed, tmp_path):
    p, _, _ = pair
    prefix = tmp_path / "s"
    assert main(["sample", str(changed / "change.tif"), "--n", "300", "--allocation", "min-per-class", "30",
                 "--seed", "3", "--output", str(prefix)]) == 0
    design = json.loads(prefix.with_name("s_design.json").read_text())
    strata = {s["code"]: s for s in design["strata"]}
    assert sorted(strata) == list(range(1, C * C + 1))
    present = {code_of(*k): n for k, n in p.transitions().items()}
    assert {c: s["pixels"] for c, s in strata.items() if s["pixels"]} == present
    assert all(strata[c]["n"] >= min(30, n) for c, n in present.items())  # rare changes get their minimum
    points = pd.read_csv(prefix.with_suffix(".csv"))
    loss = code_of(TREES, CROPS)
    # the reference says the map is right, except that a third of its forest-loss points are forest still
    reference = points["stratum"].to_numpy().copy()
    in_loss = np.flatnonzero(reference == loss)
    reference[in_loss[: len(in_loss) // 3]] = code_of(TREES, TREES)
    points["reference"] = reference
    points.to_csv(prefix.with_suffix(".csv"), index=False)
    assert main(["assess", str(changed / "change.tif"), "--reference", str(prefix.with_suffix(".csv")),
                 "--output", str(tmp_path / "a"), "--no-tracking"]) == 0
    report = json.loads((tmp_path / "a" / "assessment.json").read_text())
    row = next(c for c in report["classes"] if c["code"] == loss)
    assert row["name"] == "Tree cover → Cropland"
    assert row["users_accuracy"] == pytest.approx(1 - (len(in_loss) // 3) / len(in_loss))
    # only the loss stratum's points name forest loss, so the stratified estimate is its mapped area times its user's
    # accuracy ('area_ha < mapped_area_ha' held for any estimator that lowered it)
    assert row["area_ha"] == pytest.approx(row["mapped_area_ha"] * row["users_accuracy"])
    assert row["area_ha"] < row["mapped_area_ha"] and row["area_ha_ci95"] > 0


def test_large_class_tables_list_the_transitions_present():
    table = ClassTable(tuple(LandCoverClass(c, f"class {c}", "#808080") for c in range(1, 21)))  # 400 transitions
    change, listed = change_table(table, {1, 23, 400})  # 23 = 1·20 + 2 + 1: class 2 → class 3
    assert change.codes == [1, 23, 400] and [t.changed for t in listed] == [False, True, False]
    assert (listed[1].source.code, listed[1].target.code) == (2, 3)
