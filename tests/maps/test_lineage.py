"""`eoscale lineage`: every map names its chain (checkpoint, training run, store, scenes) and the command flags a
file that changed since; the store's STAC Collection lists its scenes; a real fit logs its store to MLflow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pystac
import pytest
import rasterio
import torch
from mlflow import MlflowClient

from eoscale import __version__, schema
from eoscale.catalog.digest import file_sha256, store_fingerprint
from eoscale.catalog.stac import LINEAGE, PREDICT_RUN
from eoscale.cli import main
from eoscale.contract import LINEAGE_KEY, load_checkpoint
from eoscale.data.store import check_shards, read_store_attrs
from eoscale.infer.run import PredictConfig, predict
from eoscale.train.callbacks.monitor import store_lineage
from tests.checkpoints import make_checkpoint
from tests.stores import make_store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> tuple[str, str]:
    """A SQLite MLflow store with one finished run in experiment 'eoscale' (about 8 s to create)."""
    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)  # artifacts beside the store, not in ./mlruns of the cwd
    run = client.create_run(client.create_experiment("eoscale", artifact_location=(folder / "mlartifacts").as_uri()))
    client.set_terminated(run.info.run_id)
    return uri, run.info.run_id


def trained_checkpoint(path: Path, store: Path, tracking: tuple[str, str]) -> Path:
    """A checkpoint as `eoscale fit` writes it, with the lineage record a fit on `store` logged in `tracking` adds."""
    make_checkpoint(path)
    saved = load_checkpoint(path)
    uri, run_id = tracking
    saved[LINEAGE_KEY] = {"run": {"run_id": run_id, "tracking_uri": uri, "experiment_id": "1"},
                          "store": store_lineage(SimpleNamespace(store=str(store), attrs=read_store_attrs(store))),
                          "eoscale_version": __version__}
    torch.save(saved, path)
    return path


def _map(checkpoint: Path, scene: Path, out: Path) -> Path:
    predict(PredictConfig(checkpoint=str(checkpoint), inputs=[str(scene)], output=str(out), confidence=True,
                          progress=False))
    return out / f"{scene.stem}_landcover.tif"


def _lineage(map_path: Path, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["lineage", str(map_path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def _statuses(chain: dict) -> list[tuple[str, str]]:
    return [(link["kind"], link["status"]) for link in chain["links"]]


def test_the_store_collection_lists_its_scenes(store: Path):
    collection = pystac.Collection.from_file(str(store / schema.COLLECTION_FILE))
    data = collection.to_dict()
    assert data["eoscale:fingerprint"] == store_fingerprint(store)
    inputs = data["eoscale:inputs"]
    scenes = [r for r in inputs if r["role"] == "scene"]
    assert [Path(r["path"]).name for r in scenes] == ["scene0.tif", "scene1.tif"]
    assert [r["scene"] for r in scenes] == ["scene0", "scene1"]
    assert all(r["sha256"] == file_sha256(r["path"]) for r in inputs)
    assert {Path(r["path"]).name for r in inputs if r["role"] == "labels"} == {"labels0.tif", "labels1.tif"}
    attrs = read_store_attrs(store)  # the collection breaks neither the store's checks nor --check
    assert attrs[schema.ATTR_INPUTS] == inputs
    assert check_shards(store) > 0
    summaries = data["summaries"]
    assert [b["name"] for b in summaries["eo:bands"]] == attrs[schema.ATTR_BANDS]
    assert summaries["eo:bands"][0]["center_wavelength"] == pytest.approx(attrs[schema.ATTR_WAVELENGTHS][0] / 1000)
    assert [c["value"] for c in summaries["classification:classes"]] == [c["code"] for c in attrs[schema.ATTR_CLASSES]]
    overall, *per_scene = data["extent"]["spatial"]["bbox"]
    assert len(per_scene) == 2 and 6.2 < overall[0] < overall[2] < 6.5 and 50.9 < overall[1] < overall[3] < 51.0
    assert data["eoscale:tiles"] == sum(b - a for a, b in attrs[schema.ATTR_SPLITS].values())


def test_predict_writes_the_lineage_into_the_map_and_its_item(store, tracking, tmp_path):
    checkpoint = trained_checkpoint(tmp_path / "best.ckpt", store, tracking)
    landcover = _map(checkpoint, store.parent / "scene0.tif", tmp_path / "maps")
    item = pystac.Item.from_file(str(tmp_path / "maps" / "scene0_item.json"))
    lineage = item.properties[LINEAGE]
    assert lineage["checkpoint"] == {"path": str(checkpoint.resolve()), "size": checkpoint.stat().st_size,
                                     "sha256": file_sha256(checkpoint)}
    assert lineage["training_run"]["run_id"] == tracking[1] and lineage["training_run"]["tracking_uri"] == tracking[0]
    assert lineage["store"]["path"] == str(store.resolve())
    assert lineage["store"]["fingerprint"] == store_fingerprint(store)
    assert [s["sha256"] for s in lineage["scenes"]] == [file_sha256(store.parent / "scene0.tif")]
    assert lineage["eoscale_version"] == __version__ and lineage["adapter"] is None
    with rasterio.open(landcover) as src:
        tags, bounds, crs = src.tags(), src.bounds, src.crs
    assert json.loads(tags["EOSCALE_LINEAGE"]) == lineage
    assert tags["EOSCALE_VERSION"] == __version__ and tags["EOSCALE_CHECKPOINT_SHA256"] == file_sha256(checkpoint)
    assert item.properties["proj:code"] == f"EPSG:{crs.to_epsg()}"
    from rasterio.warp import transform_bounds

    west, south, east, north = transform_bounds(crs, "EPSG:4326", *bounds)
    assert item.bbox == pytest.approx([west, south, east, north], abs=1e-5)
    assert item.assets["landcover"].extra_fields["file:checksum"] == "1220" + file_sha256(landcover)
    assert not list((tmp_path / "maps").glob(".*"))  # nothing half-written left


def test_lineage_names_every_link(store, tracking, tmp_path, capsys):
    checkpoint = trained_checkpoint(tmp_path / "best.ckpt", store, tracking)
    landcover = _map(checkpoint, store.parent / "scene0.tif", tmp_path / "maps")
    code, chain = _lineage(landcover, capsys)
    assert code == 0 and chain["ok"]
    assert _statuses(chain) == [("map", "OK"), ("scene", "OK"), ("checkpoint", "OK"), ("training run", "FOUND"),
                                ("store", "OK")] + [("store input", "OK")] * 4
    run = next(link for link in chain["links"] if link["kind"] == "training run")
    assert run["now"] == tracking[1] and "experiment 'eoscale', FINISHED" in run["detail"]
    # the text form names each link in order, and the Item works as the argument too
    assert main(["lineage", str(tmp_path / "maps" / "scene0_item.json")]) == 0
    text = capsys.readouterr().out
    kinds = [line.strip().removeprefix("└ ").split("  ")[0] for line in text.splitlines()[:-1]]
    assert kinds == ["map", "scene", "checkpoint", "training run", "store"] + ["store input"] * 4
    assert str(checkpoint.resolve()) in text and str(store.resolve()) in text and tracking[1][:12] in text


def test_a_changed_scene_checkpoint_or_store_is_flagged(tracking, tmp_path, capsys):
    store = make_store(tmp_path / "data")
    checkpoint = trained_checkpoint(tmp_path / "best.ckpt", store, tracking)
    scene = tmp_path / "data" / "scene1.tif"
    landcover = _map(checkpoint, scene, tmp_path / "maps")
    assert _lineage(landcover, capsys)[0] == 0

    data = bytearray(scene.read_bytes())
    data[len(data) // 2] ^= 1  # one bit of one pixel
    scene.write_bytes(bytes(data))
    code, chain = _lineage(landcover, capsys)
    assert code == 1 and not chain["ok"]
    changed = [(link["kind"], Path(link["path"]).name) for link in chain["links"] if link["status"] == "CHANGED"]
    assert changed == [("scene", "scene1.tif"), ("store input", "scene1.tif")]
    capsys.readouterr()
    assert main(["lineage", str(landcover)]) == 1
    text = capsys.readouterr().out
    assert "CHANGED" in text and "2 link(s) changed" in text

    shard = next(p for p in (store / "labels" / "c").rglob("*") if p.is_file())
    shard.write_bytes(shard.read_bytes() + b"\0")
    (tmp_path / "data" / "labels0.tif").unlink()
    checkpoint.write_bytes(checkpoint.read_bytes() + b"\0")
    code, chain = _lineage(landcover, capsys)
    statuses = dict(((k["kind"], Path(k["path"] or "-").name), k["status"]) for k in chain["links"])
    assert code == 1 and statuses[("store", "tiles.zarr")] == "CHANGED"
    assert statuses[("checkpoint", "best.ckpt")] == "CHANGED" and statuses[("store input", "labels0.tif")] == "MISSING"


def test_an_old_checkpoint_gives_unknown_links_not_a_crash(store, tmp_path, capsys):
    landcover = _map(make_checkpoint(tmp_path / "old.ckpt"), store.parent / "scene0.tif", tmp_path / "maps")
    code, chain = _lineage(landcover, capsys)
    assert code == 0
    assert _statuses(chain) == [("map", "OK"), ("scene", "OK"), ("checkpoint", "OK"), ("training run", "unknown"),
                                ("store", "unknown")]


def test_a_map_without_lineage_is_one_line_and_exit_2(tmp_path, capsys):
    from tests.rasters import write_scene

    plain = tmp_path / "plain_landcover.tif"
    write_scene(plain, height=16, width=16)
    assert main(["lineage", str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "carries no lineage" in err
    assert main(["lineage", str(tmp_path / "absent.tif")]) == 2
    assert "no map at" in capsys.readouterr().err


def test_predict_names_its_mlflow_run_in_the_item(store, tracking, tmp_path, capsys):
    checkpoint = trained_checkpoint(tmp_path / "best.ckpt", store, tracking)
    uri = tracking[0]
    assert main(["predict", "--checkpoint", str(checkpoint), "--input", str(store.parent / "scene0.tif"), "--output",
                 str(tmp_path / "maps"), "--tracking-uri", uri, "--no-progress"]) == 0
    item = json.loads((tmp_path / "maps" / "scene0_item.json").read_text())
    noted = item["properties"][PREDICT_RUN]
    assert noted["tracking_uri"] == uri
    run = MlflowClient(uri).get_run(noted["run_id"])
    assert MlflowClient(uri).get_experiment(run.info.experiment_id).name == "eoscale-predict"
    assert item["properties"][LINEAGE]["training_run"]["run_id"] == tracking[1]


# -- one real fit ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(store, tmp_path_factory) -> tuple[Path, str]:
    """A checkpoint from a real `eoscale fit` of 2 steps on `store` (its own SQLite MLflow store)."""
    root = tmp_path_factory.mktemp("fit")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
    with torch.random.fork_rng(devices=[]):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            assert main(["fit", "--config", config, "--data.init_args.store", str(store),
                         "--data.init_args.batch_size", "4", "--trainer.default_root_dir", str(root),
                         "--trainer.logger.init_args.tracking_uri", uri, "--model.init_args.backbone", "test_resnet",
                         "--trainer.max_steps", "2", "--trainer.val_check_interval", "2"]) == 0
        finally:
            torch.set_num_threads(threads)
    (checkpoint,) = root.rglob("last.ckpt")
    return checkpoint, uri


@pytest.mark.slow
def test_fit_records_its_run_and_store_and_logs_the_store_to_mlflow(fitted, store):
    checkpoint, uri = fitted
    lineage = load_checkpoint(checkpoint)[LINEAGE_KEY]
    assert lineage["store"]["path"] == str(store.resolve())
    assert lineage["store"]["fingerprint"] == store_fingerprint(store)
    assert [Path(s["path"]).name for s in lineage["store"]["scenes"] if s["role"] == "scene"] == ["scene0.tif",
                                                                                                  "scene1.tif"]
    assert lineage["run"]["tracking_uri"] == uri and lineage["eoscale_version"] == __version__
    run = MlflowClient(uri).get_run(lineage["run"]["run_id"])
    (entry,) = run.inputs.dataset_inputs
    assert entry.dataset.name == "tiles.zarr" and entry.dataset.digest == store_fingerprint(store)[:36]
    assert str(store.resolve()) in entry.dataset.source
    assert {t.key: t.value for t in entry.tags}["mlflow.data.context"] == "training"


@pytest.mark.slow
def test_lineage_of_a_map_from_a_real_fit(fitted, store, tmp_path, capsys):
    checkpoint, uri = fitted
    work = tmp_path / "scene0.tif"
    shutil.copy(store.parent / "scene0.tif", work)
    landcover = _map(checkpoint, work, tmp_path / "maps")
    code, chain = _lineage(landcover, capsys)
    assert code == 0, chain
    assert _statuses(chain) == [("map", "OK"), ("scene", "OK"), ("checkpoint", "OK"), ("training run", "FOUND"),
                                ("store", "OK")] + [("store input", "OK")] * 4
    run = next(link for link in chain["links"] if link["kind"] == "training run")
    assert f"trained on tiles.zarr ({store_fingerprint(store)[:36]})" in run["detail"]
    work.write_bytes(work.read_bytes()[:-1] + bytes([work.read_bytes()[-1] ^ 1]))
    code, chain = _lineage(landcover, capsys)
    assert code == 1 and [k["kind"] for k in chain["links"] if k["status"] == "CHANGED"] == ["scene"]
