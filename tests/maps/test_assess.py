"""`eoscale assess`: sample → labels filled from a known truth → assess round-trips to a hand computation (CSV,
GeoPackage in another CRS, lon/lat without a design); a census against a reference raster in another CRS and
resolution; MLflow on the map's predict run; bad input refused in one line with nothing written."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import rasterio
from rasterio.enums import Resampling
from rasterio.warp import calculate_default_transform, reproject

from eoscale.cli import main
from eoscale.maps.estimate import stratified
from tests.maps.maps import NODATA, TABLE, blocky_codes, truth_of, write_map

CODES = TABLE.codes


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A map, its truth, and a sample of it (prefix `s`) whose reference column holds the truth's codes."""
    folder = tmp_path_factory.mktemp("assess")
    codes = blocky_codes(240, 300)
    truth = truth_of(codes)
    map_path = write_map(folder / "T32_landcover.tif", codes)
    assert main(["sample", str(map_path), "--n", "160", "--allocation", "min-per-class", "25", "--seed", "5",
                 "--output", str(folder / "s")]) == 0
    table = pd.read_csv(folder / "s.csv")
    table["reference"] = truth[table["row"], table["col"]]
    table.to_csv(folder / "s.csv", index=False)
    return folder, map_path, codes, truth, table


def assess(out, map_path, reference, *extra):
    return main(["assess", str(map_path), "--reference", str(reference), "--output", str(out), "--no-tracking", *extra])


def hand_estimates(codes, table):
    """The error matrix counted from the table and weighed by the map's own pixel counts."""
    index = {c: i for i, c in enumerate(CODES)}
    counts = np.zeros((4, 4), dtype=np.int64)
    for m, r in zip(table["stratum"], table["reference"], strict=True):
        counts[index[m], index[r]] += 1
    pixels = np.array([(codes == c).sum() for c in CODES])
    return counts, stratified(counts, pixels / pixels.sum(), pixels.sum() * 0.01)


def test_sample_to_assessment_round_trip(tmp_path, labelled):
    folder, map_path, codes, _, table = labelled
    assert assess(tmp_path / "a", map_path, folder / "s.csv") == 0
    report = json.loads((tmp_path / "a" / "assessment.json").read_text())
    counts, expected = hand_estimates(codes, table)
    assert report["kind"] == "sample" and report["n"] == 160 and report["design"].endswith("s_design.json")
    assert report["error_matrix"]["counts"] == counts.tolist()
    assert report["overall_accuracy"]["estimate"] == pytest.approx(expected.overall)
    assert report["overall_accuracy"]["ci95"] == pytest.approx(expected.overall_ci95)
    by_code = {c["code"]: c for c in report["classes"]}
    for i, code in enumerate(CODES):
        c = by_code[code]
        assert c["users_accuracy"] == pytest.approx(expected.users[i])
        assert c["producers_accuracy"] == pytest.approx(expected.producers[i])
        assert c["area_ha"] == pytest.approx(expected.area[i]) and c["area_ha_ci95"] == pytest.approx(expected.area_ci95[i])
        assert c["mapped_area_ha"] == pytest.approx((codes == code).sum() * 0.01)
    assert sum(c["area_ha"] for c in report["classes"]) == pytest.approx(((codes != NODATA).sum()) * 0.01)
    rows = pd.read_csv(tmp_path / "a" / "assessment.csv")
    assert rows["code"].tolist() == CODES and rows["area_ha"].to_numpy() == pytest.approx(expected.area, rel=1e-5)
    assert "Overall accuracy" in (tmp_path / "a" / "assessment.md").read_text()
    assert (tmp_path / "a" / "confusion.png").read_bytes()[:4] == b"\x89PNG"


def test_a_geopackage_in_another_crs_and_a_csv_of_lon_lat_give_the_same_matrix(tmp_path, labelled):
    folder, map_path, codes, truth, table = labelled
    points = gpd.read_file(folder / "s.gpkg")
    points["reference"] = truth[points["row"], points["col"]]
    points.to_crs("EPSG:3035").to_file(tmp_path / "labels.gpkg")
    table[["id", "lon", "lat", "reference"]].to_csv(tmp_path / "lonlat.csv", index=False)  # no design beside it
    counts, _ = hand_estimates(codes, table)
    for name in ("labels.gpkg", "lonlat.csv"):
        assert assess(tmp_path / f"out-{name}", map_path, tmp_path / name) == 0
        report = json.loads((tmp_path / f"out-{name}" / "assessment.json").read_text())
        assert report["error_matrix"]["counts"] == counts.tolist(), name
    assert json.loads((tmp_path / "out-lonlat.csv" / "assessment.json").read_text())["design"] is None


def test_a_reference_raster_in_another_crs_and_resolution_is_a_census(tmp_path):
    codes = blocky_codes(200, 240)
    map_path = write_map(tmp_path / "m_landcover.tif", codes)  # UTM 32N, 10 m
    truth = truth_of(codes, error_rate=0.0)
    truth[100:140, 100:160] = 40  # the map's errors: a block it calls otherwise
    with rasterio.open(map_path) as src:
        transform, w, h = calculate_default_transform(src.crs, "EPSG:3035", src.width, src.height, *src.bounds,
                                                      resolution=20.0)
        reference = np.zeros((h, w), dtype=np.uint8)
        reproject(truth, reference, src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                  dst_crs="EPSG:3035", resampling=Resampling.nearest, src_nodata=0, dst_nodata=0)
        with rasterio.open(tmp_path / "ref.tif", "w", driver="GTiff", height=h, width=w, count=1, dtype="uint8",
                           crs="EPSG:3035", transform=transform, nodata=0) as dst:
            dst.write(reference, 1)
        back = np.zeros_like(codes)  # the expected census: the reference, put back on the map's grid
        reproject(reference, back, src_transform=transform, src_crs="EPSG:3035", dst_transform=src.transform,
                  dst_crs=src.crs, resampling=Resampling.nearest, src_nodata=0, dst_nodata=0)
    assert assess(tmp_path / "c", map_path, tmp_path / "ref.tif") == 0
    report = json.loads((tmp_path / "c" / "assessment.json").read_text())
    both = (codes != NODATA) & (back != 0)
    expected = [[int(((codes == a) & (back == b) & both).sum()) for b in CODES] for a in CODES]
    assert report["kind"] == "census" and report["error_matrix"]["counts"] == expected
    assert report["coverage"] == pytest.approx(both.sum() / (codes != NODATA).sum())
    assert report["coverage"] > 0.97  # 20 m pixels: a few map pixels on the edge have none
    assert report["overall_accuracy"]["se"] == 0 and all(c["area_ha_se"] == 0 for c in report["classes"])
    crops = next(c for c in report["classes"] if c["code"] == 40)
    assert crops["area_ha"] > crops["mapped_area_ha"]  # the block the map missed
    assert "census" in (tmp_path / "c" / "assessment.md").read_text()


def test_the_assessment_is_logged_on_the_maps_predict_run(tmp_path, labelled, monkeypatch):
    from mlflow.tracking import MlflowClient

    folder, _, codes, _, table = labelled
    map_path = write_map(tmp_path / "T32_landcover.tif", codes)  # the sample's map, copied (same sha256)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    predict = client.create_run(client.create_experiment(  # artifacts under tmp_path, not ./mlruns of the cwd
        "eoscale-predict", artifact_location=(tmp_path / "mlartifacts").as_uri())).info.run_id
    client.set_terminated(predict, "FINISHED")
    (tmp_path / "T32_item.json").write_text(json.dumps(
        {"type": "Feature", "properties": {"eoscale:predict_run": {"run_id": predict, "tracking_uri": uri}}}))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["assess", str(map_path), "--reference", str(folder / "s.csv"), "--design",
                 str(folder / "s_design.json"), "--output", str(tmp_path / "a")]) == 0
    run = client.get_run(predict)
    report = json.loads((tmp_path / "a" / "assessment.json").read_text())
    assert run.data.metrics["overall_accuracy"] == pytest.approx(report["overall_accuracy"]["estimate"])
    assert run.data.metrics["users_accuracy/Tree cover"] == pytest.approx(report["classes"][0]["users_accuracy"])
    assert "area_ha_ci95/Permanent water bodies" in run.data.metrics
    assert {a.path for a in client.list_artifacts(predict, "assessment")} >= {
        "assessment/assessment.json", "assessment/confusion.png"}
    # without a known run: a new run of experiment eoscale-assess that names the map; a dead store: a warning
    (tmp_path / "T32_item.json").unlink()
    assert main(["assess", str(map_path), "--reference", str(folder / "s.csv"), "--design",
                 str(folder / "s_design.json"), "--output", str(tmp_path / "b"), "--tracking-uri", uri]) == 0
    (new,) = client.search_runs([client.get_experiment_by_name("eoscale-assess").experiment_id])
    assert new.data.params["map"] == str(map_path.resolve()) and "overall_accuracy" in new.data.metrics
    with pytest.warns(RuntimeWarning, match="not logged"):
        assert main(["assess", str(map_path), "--reference", str(folder / "s.csv"), "--design",
                     str(folder / "s_design.json"), "--output", str(tmp_path / "d"),
                     "--tracking-uri", "sqlite:////proc/no-such-dir/mlflow.db"]) == 0
    assert (tmp_path / "d" / "assessment.json").exists()


# -- bad input -------------------------------------------------------------------------------------------------
def refused(capsys, out, code, *, match):
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
    assert not out.exists()


def test_a_reference_that_does_not_overlap_the_map_is_refused(tmp_path, labelled, capsys):
    folder, map_path, codes, _, table = labelled
    far = write_map(tmp_path / "far.tif", codes, origin=(600_000.0, 2_000_000.0), tags=False)
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", map_path, far), match="does not overlap the map")
    moved = table.assign(lon=table["lon"] + 30)[["id", "lon", "lat", "reference"]]
    moved.to_csv(tmp_path / "moved.csv", index=False)
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", map_path, tmp_path / "moved.csv"), match="does not overlap")


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.drop(columns="reference"), "no 'reference' column"),
    (lambda t: t.assign(reference=t["reference"].where(t.index >= 7, None)), "7 of 160 points"),
    (lambda t: t.assign(reference=t["reference"].where(t.index >= 2, 55)), "codes 55 are not in the map's class table"),
    (lambda t: t.assign(reference=t["reference"].astype(object).where(t.index >= 1, "forest")), "'forest'"),
])
def test_a_bad_sample_file_is_refused(tmp_path, labelled, capsys, edit, match):
    folder, map_path, _, _, table = labelled
    edit(table.copy()).to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "s_design.json").write_text((folder / "s_design.json").read_text())
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", map_path, tmp_path / "s.csv"), match=match)


def test_a_map_without_a_class_table_needs_classes(tmp_path, labelled, capsys):
    folder, _, codes, _, table = labelled
    plain = write_map(tmp_path / "plain.tif", codes, tags=False)
    table[["id", "lon", "lat", "reference"]].to_csv(tmp_path / "p.csv", index=False)
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", plain, tmp_path / "p.csv"), match="EOSCALE_CLASSES")
    TABLE.save(tmp_path / "classes.csv")
    assert assess(tmp_path / "o", plain, tmp_path / "p.csv", "--classes", str(tmp_path / "classes.csv")) == 0


def test_a_sample_of_another_map_is_refused(tmp_path, labelled, capsys):
    folder, _, codes, _, _ = labelled
    other = write_map(tmp_path / "other.tif", np.roll(codes, 40, axis=1))
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", other, folder / "s.csv"), match="describes another map")


def test_an_existing_assessment_is_kept_unless_overwrite(tmp_path, labelled, capsys):
    folder, map_path, *_ = labelled
    assert assess(tmp_path / "a", map_path, folder / "s.csv") == 0
    assert assess(tmp_path / "a", map_path, folder / "s.csv") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert assess(tmp_path / "a", map_path, folder / "s.csv", "--overwrite") == 0


def test_a_reference_raster_with_codes_outside_the_table_is_refused(tmp_path, labelled, capsys):
    _, map_path, _, truth, _ = labelled
    wrong = truth.copy()
    wrong[50:60, 50:60], wrong[70, 70] = 95, 100
    raster = write_map(tmp_path / "ref.tif", wrong, tags=False)
    refused(capsys, tmp_path / "o", assess(tmp_path / "o", map_path, raster), match="holds codes 95, 100")
