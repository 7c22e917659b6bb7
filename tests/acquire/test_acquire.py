"""Acquisition against real servers (`tests.acquire.servers`): `eoscale search` at a `rustac serve` STAC API writes
the frozen list; `eoscale stage` downloads from a fault-injecting asset server and survives what users hit (429 with
Retry-After, 503, a stalled and a truncated answer, a wrong checksum, a file cut short, an expired signature) or
stops in one line naming the item and asset; a rerun fetches only what is missing or damaged; `ingest --items` and
`predict --items` read the cache offline and give the store and map the local files give."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import rasterio
import zarr

from eoscale.acquire.cache import ITEM_FILE, LOG_FILE
from eoscale.acquire.frozen import read_list
from eoscale.cli import main
from tests.acquire import signer
from tests.acquire.conftest import COLLECTION, local_items, search, stage
from tests.acquire.servers import AssetServer, proxy


def ids(path: Path) -> list[str]:
    return [item.id for item in read_list(path)[0]]


def last_log(cache: Path) -> dict:
    return json.loads((cache / LOG_FILE).read_text().splitlines()[-1])


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("eoscale stage: error: "), err
    return err[-1]


# search → frozen list

@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_search_writes_the_frozen_list_with_its_search(api, scenes, tmp_path, suffix):
    """guards: the area, dates and property filters reaching the answer, and the list recording its search"""
    path = tmp_path / f"list{suffix}"
    assert search(api, path, "--datetime", "2024-06-01/2024-06-08", "--filter", "eo:cloud_cover<50") == 0
    items, record = read_list(path)
    assert [i.id for i in items] == [p.stem for p in local_items(scenes)[:2]]  # the 06-11 scene: out of the dates
    assert record["api"] == api.url and record["filters"] == ["eo:cloud_cover<50"] and record["matched"] == 2
    assert search(api, tmp_path / f"cloudy{suffix}", "--filter", "eo:cloud_cover>=50") == 0
    assert ids(tmp_path / f"cloudy{suffix}") == [local_items(scenes)[2].stem]
    assert search(api, tmp_path / f"none{suffix.replace('parquet', 'json')}", "--datetime", "2020-01-01/2020-12-31") == 0
    assert ids(tmp_path / f"none{suffix.replace('parquet', 'json')}") == []


def test_search_by_an_area_file_in_another_crs(api, scenes, tmp_path):
    """guards: an area file's shapes taken in their own CRS as degrees (or its CRS ignored)"""
    import geopandas
    from shapely.geometry import box

    first = json.loads(local_items(scenes)[0].read_text())
    west, south, east, north = first["bbox"]
    area = geopandas.GeoDataFrame(geometry=[box(west + 0.002, south + 0.002, east - 0.002, north - 0.002)],
                                  crs="EPSG:4326").to_crs("EPSG:3035")
    area.to_file(tmp_path / "district.gpkg")
    assert main(["search", "--api", api.url, "--collections", COLLECTION, "--area", str(tmp_path / "district.gpkg"),
                 "--output", str(tmp_path / "l.json")]) == 0
    assert ids(tmp_path / "l.json") == [first["id"]]


def test_search_retries_an_api_that_says_wait(api, scenes, tmp_path):
    """guards: a search stopped by the API's 429 or 503 (pystac-client's own default retries connection errors only)"""
    with AssetServer(None, app=proxy(api.url)) as front:
        front.plan("/search", "429", "503")
        assert main(["search", "--api", front.url, "--collections", COLLECTION, "--bbox", "6.0,51.0,6.3,51.1",
                     "--output", str(tmp_path / "l.json")]) == 0
        assert front.requests["/search"] == 3
    assert len(ids(tmp_path / "l.json")) == 3


def test_search_refuses_bad_input_in_one_line(api, tmp_path, capsys):
    assert search(api, tmp_path / "a.json", "--filter", "eo:cloud_cover~5") == 2
    assert "--filter 'eo:cloud_cover~5'" in capsys.readouterr().err
    assert main(["search", "--api", "http://127.0.0.1:9", "--collections", "x", "--bbox", "0,0,1,1", "--output",
                 str(tmp_path / "b.json")]) == 2
    assert "does not answer as a STAC API" in capsys.readouterr().err
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()


# staging and its faults

def test_stage_then_rerun_fetches_nothing(frozen, assets, tmp_path):
    """guards: a rerun that downloads again what the cache already holds"""
    cache = tmp_path / "cache"
    assets.clear()
    assert stage(frozen, cache) == 0
    first = last_log(cache)
    assert first["fetched"] == first["assets"] == 33 and first["retries"] == 0  # 10 bands + SCL, 3 items
    assert len(list(cache.glob(f"items/*/*/{ITEM_FILE}"))) == 3
    assets.clear()
    assert stage(frozen, cache) == 0
    assert sum(assets.requests.values()) == 0 and last_log(cache)["kept"] == 33


@pytest.mark.parametrize("fault", ["429", "503", "stall", "truncate", "corrupt", "short"])
def test_stage_survives_a_fault(frozen, assets, scenes, tmp_path, fault):
    """guards: each fault users hit either retried into the right bytes or (corrupt, short) caught before use:
    `corrupt` by the item's file:checksum, `short` (a file cut short, its length consistent) on an item without one by
    reading the raster's last block"""
    first, _, third = local_items(scenes)
    item = third if fault == "short" else first  # the third item states no file:size or checksum
    path = f"/scenes/{item.stem}/B04.tif"
    assets.clear()
    assets.plan(path, fault)
    cache = tmp_path / "cache"
    assert stage(frozen, cache) == 0
    log = last_log(cache)
    assert log["retries"] == 1 and log["fetched"] == 33 and not log["failed"]
    staged = next(cache.glob(f"items/*/{item.stem}/red.tif"))
    assert staged.read_bytes() == (scenes / path.lstrip("/")).read_bytes()
    if fault == "429":  # the server's Retry-After (1 s) waited, not the 0.01 s backoff
        assert log["waited_s"] >= 1.0
    if fault in ("stall", "truncate"):  # resumed with a Range request after the half received, not from the start
        assert assets.faults.ranges[path] == [None, f"bytes={staged.stat().st_size // 2}-"]
    else:
        assert assets.faults.ranges[path] == [None, None]


def test_a_fault_that_lasts_stops_in_one_line_and_a_rerun_fetches_only_the_rest(frozen, assets, scenes, tmp_path,
                                                                                   capsys):
    """guards: a failure without the item and asset named, the other assets lost with it, and a rerun that fetches
    again what it already has"""
    first = local_items(scenes)[0].stem
    red, nir = f"/scenes/{first}/B04.tif", f"/scenes/{first}/B08.tif"
    assets.clear()
    assets.plan(red, *["503"] * 3)
    assets.plan(nir, *["corrupt"] * 3)
    cache = tmp_path / "cache"
    assert stage(frozen, cache, "--retries", "2") == 2
    line = one_line_error(capsys)
    assert "2 of 33 assets" in line and f"STAC item {first!r} asset" in line
    assert "HTTP 503" in line or "file:checksum" in line
    assert not (cache / "items" / COLLECTION / first / ITEM_FILE).exists()  # the item is not staged
    assert len(list(cache.glob(f"items/*/*/{ITEM_FILE}"))) == 2  # the others are
    assert not list(cache.glob("items/*/*/*.part"))
    assets.clear()
    assert stage(frozen, cache) == 0
    assert set(assets.requests) == {red, nir}  # only what was missing
    assert last_log(cache)["fetched"] == 2 and last_log(cache)["kept"] == 31


def test_a_wait_past_the_retry_budget_stops_at_once(frozen, assets, scenes, tmp_path, capsys):
    """guards: a Retry-After waited out however long it is (a run that hangs for hours on one asset)"""
    first = local_items(scenes)[0].stem
    assets.clear()
    assets.plan(f"/scenes/{first}/SCL.tif", "429")
    start = time.monotonic()
    assert stage(frozen, tmp_path / "cache", "--retry-budget", "0.5") == 2
    assert time.monotonic() - start < 30
    line = one_line_error(capsys)
    assert f"STAC item {first!r} asset 'scl'" in line and "retry budget of 0.5 s" in line and "HTTP 429" in line
    assets.clear()


def test_a_damaged_file_in_the_cache_is_fetched_again(frozen, assets, scenes, tmp_path):
    """guards: a cached file cut short (a full quota, a bad copy) taken as staged"""
    cache = tmp_path / "cache"
    assets.clear()
    assert stage(frozen, cache) == 0
    staged = next(cache.glob("items/*/*/nir.tif"))
    staged.write_bytes(staged.read_bytes()[:100])
    assets.clear()
    assert stage(frozen, cache) == 0
    assert sum(assets.requests.values()) == 1 and last_log(cache)["damaged"] == 1
    assert staged.read_bytes() == (scenes / "scenes" / staged.parent.name / "B08.tif").read_bytes()


def test_signing_hook_signs_every_try(frozen, assets, scenes, tmp_path, capsys):
    """guards: an unsigned request where the archive needs a signature, and a signature made once and let expire"""
    first = local_items(scenes)[0].stem
    red = f"/scenes/{first}/B04.tif"
    assets.clear()
    assets.faults.require_token.add(red)
    assert stage(frozen, tmp_path / "unsigned") == 2
    assert f"STAC item {first!r} asset 'red': HTTP 403" in one_line_error(capsys)
    assets.plan(red, "403")  # the first signature has expired: signed again
    signer.CALLS.clear()
    assert stage(frozen, tmp_path / "signed", "--sign", "tests.acquire.signer:sign") == 0
    assert len(signer.CALLS) == 34 and last_log(tmp_path / "signed")["retries"] == 1
    assert "token=" not in (tmp_path / "signed" / "items" / COLLECTION / first / ITEM_FILE).read_text()
    assets.clear()


def test_stage_refuses_a_folder_it_did_not_make(frozen, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert stage(frozen, tmp_path / "mine") == 2
    assert "not an eoscale cache" in one_line_error(capsys)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


# the compute nodes: the cache only

@pytest.mark.slow
def test_ingest_by_items_gives_the_store_of_the_local_files(frozen, staged, scenes, assets, tmp_path):
    """guards: search → frozen list → stage → ingest --items differing from ingest of the same scenes' local files
    (tiles, labels, dates, statistics), and ingest --items touching the network"""
    common = ["--labels", *map(str, sorted(scenes.glob("labels/*.tif"))), "--classes", str(scenes / "classes.csv"),
              "--tile-size", "32", "--workers", "1", "-q", "--min-valid", "0.1"]
    assets.clear()
    assert main(["ingest", "--items", str(frozen), "--cache", str(staged), "--output", str(tmp_path / "a.zarr"),
                 *common]) == 0
    assert sum(assets.requests.values()) == 0
    assert main(["ingest", "--stac", *map(str, local_items(scenes)), "--output", str(tmp_path / "b.zarr"), *common]) == 0
    a, b = zarr.open_group(tmp_path / "a.zarr", mode="r"), zarr.open_group(tmp_path / "b.zarr", mode="r")
    assert sorted(a.array_keys()) == sorted(b.array_keys())
    for name in a.array_keys():
        np.testing.assert_array_equal(a[name][...], b[name][...], err_msg=name)
    assert a.attrs["statistics"] == b.attrs["statistics"] and a.attrs["bands"] == b.attrs["bands"]
    assert int((a["labels"][...] != 255).sum()) > 0


def test_ingest_by_items_not_staged_stops_in_one_line(frozen, tmp_path, capsys):
    assert main(["ingest", "--items", str(frozen), "--cache", str(tmp_path / "none"), "--output",
                 str(tmp_path / "s.zarr"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eoscale stage --items" in err[0]
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.slow
def test_predict_by_items_gives_the_map_of_the_local_files(frozen, staged, scenes, tmp_path):
    """guards: predict --items mapping other pixels than predict --stac of the same scenes, and its MLflow run
    without the staging's retries"""
    import mlflow

    from tests.checkpoints import make_checkpoint

    checkpoint = make_checkpoint(tmp_path / "model.ckpt")
    common = ["--checkpoint", str(checkpoint), "--device", "cpu", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]
    assert main(["predict", "--items", str(frozen), "--cache", str(staged), "--output", str(tmp_path / "a"),
                 *common]) == 0
    assert main(["predict", "--stac", *map(str, local_items(scenes)), "--output", str(tmp_path / "b"), *common]) == 0
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("eoscale-predict").experiment_id],
                              order_by=["attributes.start_time ASC"])
    assert runs[0].data.metrics["stage/retries"] == 1 and runs[0].data.metrics["stage/fetched"] == 33
    maps = sorted((tmp_path / "a").glob("*_landcover.tif"))
    assert len(maps) == 3
    for path in maps:
        with rasterio.open(path) as a, rasterio.open(tmp_path / "b" / path.name) as b:
            np.testing.assert_array_equal(a.read(), b.read())
            assert a.transform == b.transform and a.crs == b.crs
