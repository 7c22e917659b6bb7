"""`eoscale predict` end to end: MLflow logging and the summary; a checkpoint from a real `eoscale fit`, mapped
and evaluated on its tile store's test split with the same numbers as `eoscale test`."""

from __future__ import annotations

from pathlib import Path

import pytest
import rasterio
import torch
from mlflow import MlflowClient

from eoscale.cli import main
from eoscale.track.trace_summary import load_trace
from tests.rasters import CLASSES_CSV, write_labels, write_scene


@pytest.mark.slow
def test_predict_logs_to_the_embedded_mlflow_store(checkpoint, scene, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(scene), "--output", str(out),
                 "--overlap", "0.5", "--batch-size", "8", "--profile"]) == 0
    printed = capsys.readouterr().out
    assert "odd" in printed and "301×347" in printed and "MLflow run" in printed
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("eoscale-predict").experiment_id])
    params, metrics = run.data.params, run.data.metrics
    assert params["inputs"] == str(scene) and params["checkpoint"] == str(checkpoint.resolve())
    assert params["overlap"] == "0.5" and params["batch_size"] == "8" and params["devices"] == "1"
    assert params["adapter"] == "" and params["backbone"] == "test_resnet"
    assert params["readers"] == "auto"
    assert metrics["windows_per_s"] > 0 and metrics["km2_per_s"] > 0
    areas = {k.removeprefix("area_ha/"): v for k, v in metrics.items() if k.startswith("area_ha/")}
    assert set(areas) == {"Tree cover", "Grassland", "Cropland", "Permanent water bodies"}
    assert sum(areas.values()) == pytest.approx((301 * 347 - 50 * 70) / 100, abs=0.01)
    artifacts = {a.path for folder in ("quicklook", "areas") for a in client.list_artifacts(run.info.run_id, folder)}
    assert artifacts == {"quicklook/odd_quicklook.png", "areas/odd_areas.csv", "areas/odd_areas.json"}
    # --profile: the trace beside the map (batches 2-6 of the process), its summary, both in the run
    assert (out / "odd_landcover.tif").is_file()
    trace = load_trace(out / "profile" / "rank0.pt.trace.json.gz")
    steps = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {f"ProfilerStep#{i}" for i in range(2, 7)}
    # the op table: a ResNet's forward is mostly its convolutions (wrappers such as aten::conv2d have little self
    # time, and where they rank among the 15 rows shown varies with the machine's load)
    table = (out / "profile" / "summary.md").read_text().split("Top CPU ops by self time:")[1]
    first_row = table.strip().splitlines()[2]
    assert "convolution" in first_row, table
    profiled = {a.path for a in client.list_artifacts(run.info.run_id, "profile")}
    assert profiled == {"profile/rank0.pt.trace.json.gz", "profile/summary.md", "profile/summary.png"}


def test_a_run_folder_gives_its_best_checkpoint(checkpoint, scene, tmp_path, tracking_uri, capsys):
    import shutil

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    best = folder / "epoch000-step000010-miou0.5000.ckpt"
    shutil.copy(checkpoint, best)
    (folder / "last.ckpt").write_text("not a checkpoint: predict must not read it")
    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(tmp_path / "run"), "--input", str(scene), "--output", str(out),
                 "--tracking-uri", tracking_uri, "--no-progress"]) == 0
    assert f"eoscale predict: checkpoint {best} (the best val_miou (0.5)" in capsys.readouterr().out
    assert (out / "odd_landcover.tif").is_file()


@pytest.mark.slow
def test_checkpoint_from_eoscale_fit(tmp_path, tracking_uri, monkeypatch, capsys):
    """A real checkpoint (2 training steps): predict maps its scenes; --store matches `eoscale test`."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    torch.set_num_threads(1)
    store = _store(tmp_path / "data")
    common = ["--config", str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml"),
              "--data.init_args.store", str(store), "--data.init_args.batch_size", "4",
              "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger.init_args.tracking_uri",
              tracking_uri, "--model.init_args.backbone", "test_resnet", "--model.init_args.decoder_channels", "64"]
    assert main(["fit", *common, "--trainer.max_steps", "2", "--trainer.val_check_interval", "2"]) == 0
    (checkpoint,) = (tmp_path / "run").rglob("last.ckpt")

    out = tmp_path / "maps"
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "data" / "scene0.tif"),
                 "--output", str(out), "--tracking-uri", tracking_uri, "--no-progress"]) == 0
    with rasterio.open(out / "scene0_landcover.tif") as src:
        assert (src.width, src.height) == (96, 96) and src.tags()["EOSCALE_WINDOW"] == "32"

    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(checkpoint), "--store", str(store), "--split", "test",
                 "--output", str(out), "--tracking-uri", tracking_uri, "--batch-size", "3"]) == 0
    assert "test_miou" in capsys.readouterr().out
    assert main(["test", *common, "--ckpt_path", str(checkpoint)]) == 0
    client = MlflowClient(tracking_uri)
    (evaluated,) = client.search_runs([client.get_experiment_by_name("eoscale-predict").experiment_id],
                                      filter_string="attributes.run_name = 'evaluate-test'")
    tested = [r for r in client.search_runs([client.get_experiment_by_name("eoscale").experiment_id])
              if "test_miou" in r.data.metrics]
    ours, theirs = evaluated.data.metrics, tested[0].data.metrics
    assert {k for k in ours} >= {"test_miou", "test_accuracy", "test_f1", "test_iou/Tree cover"}
    for key in ("test_miou", "test_accuracy", "test_iou/Tree cover"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-3), key


def _store(folder: Path) -> Path:
    """Two 96 × 96 scenes with EPSG:3035 labels, ingested at tile 32 by the real `eoscale ingest`."""
    from eoscale.ingest import ingest

    folder.mkdir(parents=True)
    scenes, labels = [], []
    for i in range(2):
        scene = folder / f"scene{i}.tif"
        classes = write_scene(scene, height=96, width=96, seed=i, origin=(310_000.0 + 4_000 * i, 5_650_000.0),
                              nodata_box=(slice(0, 20), slice(0, 30)))
        write_labels(folder / f"labels{i}.tif", scene, classes)
        scenes.append(str(scene))
        labels.append(str(folder / f"labels{i}.tif"))
    (folder / "classes.csv").write_text(CLASSES_CSV)
    ingest(scenes, folder / "tiles.zarr", labels=labels, classes=str(folder / "classes.csv"), tile_size=32,
           shard_tiles=8, split_block=1, workers=1, progress=False)
    return folder / "tiles.zarr"
